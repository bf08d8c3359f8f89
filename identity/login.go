package api

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/codehub-io/codehub/audit"
	"github.com/codehub-io/codehub/store"
)

// userView is a user as the API shows it.
type userView struct {
	ID       string `json:"id"`
	Username string `json:"username"`
	IsAdmin  bool   `json:"is_admin"`
}

type sessionView struct {
	User      userView  `json:"user"`
	ExpiresAt time.Time `json:"expires_at"`
}

type loginRequest struct {
	Username string `json:"username"`
	Password string `json:"password"`
}

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

func (s *Server) login(w http.ResponseWriter, r *http.Request) {
	var req loginRequest
	if e := decodeJSON(w, r, &req, s.opts.BodyReadTimeout); e != nil {
		WriteError(w, e)
		return
	}
	if req.Username == "" {
		WriteError(w, &Error{Status: http.StatusBadRequest, Code: CodeInvalidInput, Field: "username", Message: "username: required"})
		return
	}
	if req.Password == "" {
		WriteError(w, &Error{Status: http.StatusBadRequest, Code: CodeInvalidInput, Field: "password", Message: "password: required"})
		return
	}
	ctx := r.Context()
	client := clientAddress(r, s.opts.TrustedProxies)
	attempt := audit.Actor{Username: req.Username, Address: client}
	if s.opts.NoPasswordLogin {
		e := newError(http.StatusForbidden, CodeForbidden, "password login is turned off; use single sign-on")
		s.record(r, attempt, audit.ActionLogin, audit.Target{}, e)
		WriteError(w, e)
		return
	}
	user, err := s.loginUser(ctx, req.Username)
	if errors.Is(err, store.ErrNotFound) {
		if _, err := verifyPasswordBounded(ctx, dummyHash(), req.Password); err != nil {
			s.fail(w, "verify password", err)
			return
		}
		s.metrics.loginFailures.Inc()
		e := newError(http.StatusUnauthorized, CodeUnauthenticated, "wrong username or password")
		s.record(r, attempt, audit.ActionLogin, audit.Target{}, e)
		WriteError(w, e)
		return
	}
	if err != nil {
		s.fail(w, "load user", err)
		return
	}
	attempt.UserID = user.ID
	if s.refuseLockedLogin(w, r, attempt, user.LockedUntil) {
		return
	}
	clientLock, err := store.ClientLoginLock(ctx, s.pool, user.ID, client)
	if err != nil {
		s.fail(w, "read login lock", err)
		return
	}
	if s.refuseLockedLogin(w, r, attempt, clientLock) {
		return
	}
	failures, lockedUntil, err := s.claimAttempt(ctx, user.ID, client)
	if err != nil {
		s.fail(w, "count login attempt", err)
		return
	}
	if s.refuseLockedLogin(w, r, attempt, lockedUntil) {
		return
	}
	ok, err := verifyPasswordBounded(ctx, user.PasswordHash, req.Password)
	if err != nil {
		s.fail(w, "verify password", err)
		return
	}
	if !ok {
		s.metrics.loginFailures.Inc()
		if d := clientBackoff.after(failures); d > 0 {
			s.logger.Warn("login backoff", "username", user.Username, "client", client, "failures", failures, "locked_for", d)
		}
		e := newError(http.StatusUnauthorized, CodeUnauthenticated, "wrong username or password")
		s.record(r, attempt, audit.ActionLogin, audit.Target{}, e)
		WriteError(w, e)
		return
	}
	if user.Disabled {
		e := newError(http.StatusForbidden, CodeForbidden, "this account is disabled")
		s.record(r, attempt, audit.ActionLogin, audit.Target{}, e)
		WriteError(w, e)
		return
	}
	if err := store.ResetLoginFailures(ctx, s.pool, user.ID); err != nil {
		s.fail(w, "reset login failures", err)
		return
	}
	if err := store.ResetClientLoginFailures(ctx, s.pool, user.ID, client); err != nil {
		s.fail(w, "reset login failures", err)
		return
	}
	cookie, expires, err := s.sessions.start(ctx, user.ID)
	if err != nil {
		s.fail(w, "start session", err)
		return
	}
	http.SetCookie(w, cookie)
	s.record(r, attempt, audit.ActionLogin, audit.Target{}, nil)
	s.logger.Info("user logged in", "user_id", user.ID, "username", user.Username)
	writeJSON(w, http.StatusOK, sessionView{User: userView{user.ID, user.Username, user.IsAdmin}, ExpiresAt: expires.UTC()})
}

// loginUser loads the user a password login names. A username holding NUL
// cannot exist, and PostgreSQL refuses to even compare one, so it is
// unknown; so is a user who signs in through OIDC and has no password.
func (s *Server) loginUser(ctx context.Context, username string) (store.User, error) {
	if strings.ContainsRune(username, 0) {
		return store.User{}, store.ErrNotFound
	}
	u, err := store.UserByUsername(ctx, s.pool, username)
	if err == nil && u.PasswordHash == "" {
		return store.User{}, store.ErrNotFound
	}
	return u, err
}

// refuseLockedLogin is refuseLocked for a login, recording the refusal.
func (s *Server) refuseLockedLogin(w http.ResponseWriter, r *http.Request, attempt audit.Actor, lockedUntil *time.Time) bool {
	if !refuseLocked(w, lockedUntil) {
		return false
	}
	s.record(r, attempt, audit.ActionLogin, audit.Target{}, newError(http.StatusTooManyRequests, CodeTooManyAttempts, "too many failed logins"))
	return true
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
func (s *Server) claimAttempt(ctx context.Context, userID, client string) (failures int, lockedUntil *time.Time, err error) {
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

// refuseLocked answers 429 with Retry-After while lockedUntil lies ahead.
func refuseLocked(w http.ResponseWriter, lockedUntil *time.Time) bool {
	if lockedUntil == nil {
		return false
	}
	remaining := time.Until(*lockedUntil)
	if remaining <= 0 {
		return false
	}
	w.Header().Set("Retry-After", strconv.Itoa(retryAfterSeconds(remaining)))
	WriteError(w, newError(http.StatusTooManyRequests, CodeTooManyAttempts, "too many failed logins; try again later"))
	return true
}

func (s *Server) logout(w http.ResponseWriter, r *http.Request) {
	sess, known, err := s.sessions.fromRequest(r)
	if err != nil {
		s.fail(w, "authenticate", err)
		return
	}
	cookie, err := s.sessions.end(r.Context(), r)
	if err != nil {
		s.fail(w, "end session", err)
		return
	}
	if known {
		s.record(r, s.actor(r, sess), audit.ActionLogout, audit.Target{}, nil)
	}
	http.SetCookie(w, cookie)
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) session(w http.ResponseWriter, r *http.Request) {
	sess, ok := s.requireUser(w, r)
	if !ok {
		return
	}
	writeJSON(w, http.StatusOK, sessionView{User: userView{sess.UserID, sess.Username, sess.IsAdmin}, ExpiresAt: sess.ExpiresAt.UTC()})
}

// requireUser answers 401 (and returns false) unless the request has a
// session or a valid token, and 403 to a read token sending a change.
func (s *Server) requireUser(w http.ResponseWriter, r *http.Request) (store.Session, bool) {
	sess, ok, err := s.authenticate(r)
	if err != nil {
		s.fail(w, "authenticate", err)
		return store.Session{}, false
	}
	if !ok {
		msg := "log in first"
		if _, bearer := bearerToken(r.Header); bearer {
			msg = "the token is invalid, expired or revoked"
		}
		WriteError(w, newError(http.StatusUnauthorized, CodeUnauthenticated, msg))
		return store.Session{}, false
	}
	if sess.TokenID != "" && !tokenAllows(sess.TokenScope, r.Method) {
		WriteError(w, newError(http.StatusForbidden, CodeReadOnlyToken, "this token may only read; make a read-write token to change things"))
		return store.Session{}, false
	}
	return sess, true
}

// authenticate returns who sent an API request: the bearer token when an
// Authorization header is sent (its cookies are then ignored), otherwise
// the dashboard session cookie.
func (s *Server) authenticate(r *http.Request) (store.Session, bool, error) {
	secret, bearer := bearerToken(r.Header)
	if !bearer {
		return s.sessions.fromRequest(r)
	}
	t, ok, err := s.tokens.lookup(r.Context(), secret)
	if !ok || err != nil {
		return store.Session{}, false, err
	}
	return tokenSession(t), true, nil
}

// requireAdmin is requireUser for administrators; others get 403.
func (s *Server) requireAdmin(w http.ResponseWriter, r *http.Request) (store.Session, bool) {
	sess, ok := s.requireUser(w, r)
	if !ok {
		return store.Session{}, false
	}
	if !sess.IsAdmin {
		WriteError(w, newError(http.StatusForbidden, CodeForbidden, "administrators only"))
		return store.Session{}, false
	}
	return sess, true
}

func (s *Server) fail(w http.ResponseWriter, step string, err error) {
	logFailure(s.logger, "request failed", err, "step", step)
	WriteError(w, internalError())
}
