package identity

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/codehub-io/codehub/store"
)

// dummyHash is verified against when the username is unknown, so the
// answer takes as long as for a wrong password and does not reveal which
// usernames exist.
var dummyHash = sync.OnceValue(func() string {
	h, err := HashPassword("codehub-timing-equaliser")
	if err != nil {
		panic(err)
	}
	return h
})

// LoginResult is a password login: the user when known (for the audit
// log, even when refused), and on success the session cookie.
type LoginResult struct {
	User    store.User
	Cookie  *http.Cookie
	Expires time.Time
}

// Login checks a username and password from client and starts a session.
// It refuses with ErrWrongPassword (unknown user too), *LockedError while
// the backoff holds, or ErrDisabled.
func (s *Service) Login(ctx context.Context, username, password, client string) (LoginResult, error) {
	user, err := s.loginUser(ctx, username)
	if errors.Is(err, store.ErrNotFound) {
		if _, err := verifyPasswordBounded(ctx, dummyHash(), password); err != nil {
			return LoginResult{}, err
		}
		return LoginResult{}, ErrWrongPassword
	}
	if err != nil {
		return LoginResult{}, err
	}
	res := LoginResult{User: user}
	if err := s.checkPassword(ctx, user, password, client); err != nil {
		return res, err
	}
	if user.Disabled {
		return res, ErrDisabled
	}
	if err := store.ResetLoginFailures(ctx, s.pool, user.ID); err != nil {
		return res, err
	}
	if err := store.ResetClientLoginFailures(ctx, s.pool, user.ID, client); err != nil {
		return res, err
	}
	res.Cookie, res.Expires, err = s.StartSession(ctx, user.ID)
	if err != nil {
		return res, err
	}
	s.logger.Info("user logged in", "user_id", user.ID, "username", user.Username)
	return res, nil
}

// checkPassword verifies user's password from client under the login
// backoff: locks are honoured and the attempt counted, as a failure until
// the caller resets the counts. A wrong password is ErrWrongPassword.
func (s *Service) checkPassword(ctx context.Context, user store.User, password, client string) error {
	if err := locked(user.LockedUntil); err != nil {
		return err
	}
	clientLock, err := store.ClientLoginLock(ctx, s.pool, user.ID, client)
	if err != nil {
		return err
	}
	if err := locked(clientLock); err != nil {
		return err
	}
	failures, lockedUntil, err := s.claimAttempt(ctx, user.ID, client)
	if err != nil {
		return err
	}
	if err := locked(lockedUntil); err != nil {
		return err
	}
	ok, err := verifyPasswordBounded(ctx, user.PasswordHash, password)
	if err != nil {
		return err
	}
	if !ok {
		if d := clientBackoff.after(failures); d > 0 {
			s.logger.Warn("login backoff", "username", user.Username, "client", client, "failures", failures, "locked_for", d)
		}
		return ErrWrongPassword
	}
	return nil
}

// locked is a *LockedError while lockedUntil lies ahead.
func locked(lockedUntil *time.Time) error {
	if lockedUntil == nil || time.Until(*lockedUntil) <= 0 {
		return nil
	}
	return &LockedError{Until: *lockedUntil}
}

// loginUser loads the user a password login names. A username holding NUL
// cannot exist, and PostgreSQL refuses to even compare one, so it is
// unknown; so is a user who signs in through OIDC and has no password.
func (s *Service) loginUser(ctx context.Context, username string) (store.User, error) {
	if strings.ContainsRune(username, 0) {
		return store.User{}, store.ErrNotFound
	}
	u, err := store.UserByUsername(ctx, s.pool, username)
	if err == nil && u.PasswordHash == "" {
		return store.User{}, store.ErrNotFound
	}
	return u, err
}

// errLoginLocked ends the attempt's transaction when another attempt has
// locked the user meanwhile.
var errLoginLocked = errors.New("login locked")

// claimAttempt counts a login attempt as a failure, for the user from this
// client and for the user over all clients, and applies the locks that
// failure earns, before the password is checked; a successful login resets
// them. Counting first, with the rows held until commit, makes parallel
// attempts see each other: of a burst sent while the user is unlocked, only
// as many are checked as the backoff allows, however long the checks take.
// When another attempt holds a lock, nothing is counted and lockedUntil
// says until when. failures is the client's count.
func (s *Service) claimAttempt(ctx context.Context, userID, client string) (failures int, lockedUntil *time.Time, err error) {
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		all, err := store.RecordLoginFailure(ctx, tx, userID)
		if err != nil {
			return err
		}
		n, clientLock, err := store.RecordClientLoginFailure(ctx, tx, userID, client)
		if err != nil {
			return err
		}
		user, err := store.UserByID(ctx, tx, userID)
		if err != nil {
			return err
		}
		for _, lock := range []*time.Time{user.LockedUntil, clientLock} {
			if lock != nil && time.Until(*lock) > 0 {
				lockedUntil = lock
				return errLoginLocked
			}
		}
		failures = n
		if d := clientBackoff.after(n); d > 0 {
			if err := store.LockClient(ctx, tx, userID, client, d); err != nil {
				return err
			}
		}
		if d := userBackoff.after(all); d > 0 {
			return store.LockUser(ctx, tx, userID, d)
		}
		return nil
	})
	if errors.Is(err, errLoginLocked) {
		return 0, lockedUntil, nil
	}
	return failures, nil, err
}
