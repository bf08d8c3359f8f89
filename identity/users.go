package identity

import (
	"context"
	"errors"
	"net/http"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"

	"github.com/codehub-io/codehub/audit"
	"github.com/codehub-io/codehub/config"
	"github.com/codehub-io/codehub/store"
	"github.com/codehub-io/codehub/workspace"
)

// The bounds of a password, as for `codehub user`.
const (
	MinPasswordLength = 8
	MaxPasswordLength = 1024
)

// CheckPassword refuses a password out of bounds, naming field.
func CheckPassword(field, password string) error {
	switch n := utf8.RuneCountInString(password); {
	case !utf8.ValidString(password):
		return invalidField(field, "must be UTF-8 text")
	case n < MinPasswordLength:
		return invalidField(field, "must have at least 8 characters")
	case n > MaxPasswordLength:
		return invalidField(field, "must have at most 1024 characters")
	}
	return nil
}

// CreateUser adds a local user with a password. A username another user
// has is store.ErrUsernameTaken.
func (s *Service) CreateUser(ctx context.Context, username, password string, admin bool) (store.User, error) {
	if !config.ValidUsername(username) {
		return store.User{}, invalidField("username", "must be 1 to 63 of a-z, 0-9, '.', '_' and '-', starting with a letter or digit")
	}
	if err := CheckPassword("password", password); err != nil {
		return store.User{}, err
	}
	hash, err := HashPassword(password)
	if err != nil {
		return store.User{}, err
	}
	return store.CreateUser(ctx, s.pool, workspace.NewID(), username, hash, admin)
}

// UserPatch is what an administrator changes of a user; nil changes
// nothing.
type UserPatch struct {
	Disabled *bool
	IsAdmin  *bool
	Password *string
}

// userChange is one change of a patch, applied in the patch's transaction
// and recorded on its own. revokes, when set, is why it ends every
// credential of the user.
type userChange struct {
	action string
	// apply makes the change in tx and returns the ids of the tokens it
	// revoked.
	apply func(ctx context.Context, tx pgx.Tx) ([]string, error)
	// revokes is the reason the change ends the user's credentials, if it
	// does.
	revokes string
}

// PatchUser applies an administrator's changes to user id, all or none,
// and returns the user after them, the audit actions of the changes made
// and what they revoked (a disable and a password reset end every
// credential). adminID is the administrator, who cannot disable themselves
// or give up their own rights (another admin must), so the last admin
// cannot lock everyone out.
func (s *Service) PatchUser(ctx context.Context, adminID, id string, p UserPatch) (store.User, []string, *Revocation, error) {
	u, err := store.UserByID(ctx, s.pool, id)
	if err != nil {
		return store.User{}, nil, nil, err
	}
	changes, err := userChanges(u, adminID, p)
	if err != nil {
		return store.User{}, nil, nil, err
	}
	var rev *Revocation
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		for _, c := range changes {
			ids, err := c.apply(ctx, tx)
			if err != nil {
				return err
			}
			if c.revokes == "" {
				continue
			}
			if rev == nil {
				rev = &Revocation{UserID: u.ID, Reason: c.revokes}
			}
			rev.TokenIDs = append(rev.TokenIDs, ids...)
		}
		return nil
	})
	if err != nil {
		return store.User{}, nil, nil, err
	}
	if rev != nil {
		s.revoked(*rev)
	}
	actions := make([]string, 0, len(changes))
	for _, c := range changes {
		actions = append(actions, c.action)
	}
	u, err = store.UserByID(ctx, s.pool, id)
	return u, actions, rev, err
}

// userChanges checks a patch of user u by the admin adminID and returns
// the changes it makes; a user signing in through OIDC has no password to
// reset.
func userChanges(u store.User, adminID string, p UserPatch) ([]userChange, error) {
	var changes []userChange
	if p.Disabled != nil && *p.Disabled != u.Disabled {
		if u.ID == adminID {
			return nil, invalidField("disabled", "you cannot disable yourself")
		}
		disabled := *p.Disabled
		c := userChange{action: audit.ActionUserEnable}
		if disabled {
			c = userChange{action: audit.ActionUserDisable, revokes: ReasonDisabled}
		}
		c.apply = func(ctx context.Context, tx pgx.Tx) ([]string, error) {
			return store.SetDisabled(ctx, tx, u.ID, disabled)
		}
		changes = append(changes, c)
	}
	if p.IsAdmin != nil && *p.IsAdmin != u.IsAdmin {
		if u.ID == adminID {
			return nil, invalidField("is_admin", "you cannot take away your own administrator rights")
		}
		admin := *p.IsAdmin
		action := audit.ActionUserAdminRevoke
		if admin {
			action = audit.ActionUserAdminGrant
		}
		changes = append(changes, userChange{action: action, apply: func(ctx context.Context, tx pgx.Tx) ([]string, error) {
			return nil, store.SetAdmin(ctx, tx, u.ID, admin)
		}})
	}
	if p.Password != nil {
		if u.OIDCSubject != nil {
			return nil, invalidField("password", "this user signs in through single sign-on and has no password")
		}
		if err := CheckPassword("password", *p.Password); err != nil {
			return nil, err
		}
		password := *p.Password
		changes = append(changes, userChange{action: audit.ActionUserPassword, revokes: ReasonPasswordReset,
			apply: func(ctx context.Context, tx pgx.Tx) ([]string, error) {
				hash, err := HashPassword(password)
				if err != nil {
					return nil, err
				}
				// SetPassword ends every session; the tokens go here.
				if err := store.SetPassword(ctx, tx, u.Username, hash); err != nil {
					return nil, err
				}
				return store.RevokeUserTokens(ctx, tx, u.ID)
			}})
	}
	return changes, nil
}

// PasswordChange is a user's change of their own password.
type PasswordChange struct {
	Current, New string
	// KeepTokens keeps the user's API tokens and pending CLI codes; by
	// default they end with the sessions.
	KeepTokens bool
}

// ChangePassword replaces the password of user userID, who proves the
// current one from client under the login backoff (a wrong one is a
// *FieldError). Every session of the user ends, and their tokens unless
// kept; the returned cookie is a fresh session for the browser that asked.
func (s *Service) ChangePassword(ctx context.Context, userID, client string, c PasswordChange) (*http.Cookie, Revocation, error) {
	if c.Current == "" {
		return nil, Revocation{}, invalidField("current_password", "required")
	}
	if err := CheckPassword("new_password", c.New); err != nil {
		return nil, Revocation{}, err
	}
	u, err := store.UserByID(ctx, s.pool, userID)
	if err != nil {
		return nil, Revocation{}, err
	}
	if u.OIDCSubject != nil {
		return nil, Revocation{}, invalidField("new_password", "you sign in through single sign-on and have no password here")
	}
	if err := s.checkPassword(ctx, u, c.Current, client); errors.Is(err, ErrWrongPassword) {
		return nil, Revocation{}, invalidField("current_password", "is not your password")
	} else if err != nil {
		return nil, Revocation{}, err
	}
	hash, err := HashPassword(c.New)
	if err != nil {
		return nil, Revocation{}, err
	}
	rev := Revocation{UserID: u.ID, Reason: ReasonPasswordChanged}
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		// SetPassword ends every session and clears the backoff.
		if err := store.SetPassword(ctx, tx, u.Username, hash); err != nil {
			return err
		}
		if c.KeepTokens {
			return nil
		}
		rev.TokenIDs, err = store.RevokeUserTokens(ctx, tx, u.ID)
		return err
	})
	if err != nil {
		return nil, Revocation{}, err
	}
	s.sessions.deleteWhere(func(sess store.Session) bool { return sess.UserID == u.ID })
	if !c.KeepTokens {
		s.revoked(rev)
	}
	cookie, _, err := s.StartSession(ctx, u.ID)
	return cookie, rev, err
}

// EndAccess ends every credential of user userID, for reason: a user
// refused at single sign-on is out everywhere.
func (s *Service) EndAccess(ctx context.Context, userID, reason string) (Revocation, error) {
	var ids []string
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var err error
		ids, err = store.RevokeUserAccess(ctx, tx, userID)
		return err
	})
	if err != nil {
		return Revocation{}, err
	}
	rev := Revocation{UserID: userID, TokenIDs: ids, Reason: reason}
	s.revoked(rev)
	return rev, nil
}

// revoked finishes a committed revocation on this replica.
func (s *Service) revoked(rev Revocation) {
	s.forgetUser(rev.UserID)
	s.logger.Info("credentials revoked", "user_id", rev.UserID, "tokens", len(rev.TokenIDs), "reason", rev.Reason)
}

// ResetPassword sets the password of a local user by name and ends every
// credential of the user, as an administrator's reset does; `codehub
// user passwd` uses it on the server. A single sign-on user is
// store.ErrSingleSignOn.
func (s *Service) ResetPassword(ctx context.Context, username, password string) (Revocation, error) {
	if err := CheckPassword("password", password); err != nil {
		return Revocation{}, err
	}
	hash, err := HashPassword(password)
	if err != nil {
		return Revocation{}, err
	}
	rev := Revocation{Reason: ReasonPasswordReset}
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if err := store.SetPassword(ctx, tx, username, hash); err != nil {
			return err
		}
		u, err := store.UserByUsername(ctx, tx, username)
		if err != nil {
			return err
		}
		rev.UserID = u.ID
		// SetPassword ended the sessions.
		rev.TokenIDs, err = store.RevokeUserTokens(ctx, tx, u.ID)
		return err
	})
	if err != nil {
		return Revocation{}, err
	}
	s.revoked(rev)
	return rev, nil
}
