package api

import (
	"context"
	"errors"
	"net/http"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"

	"github.com/codehub-io/codehub/audit"
	"github.com/codehub-io/codehub/config"
	"github.com/codehub-io/codehub/store"
	"github.com/codehub-io/codehub/workspace"
)

// Sign-in methods of a user.
const (
	signInPassword = "password"
	signInOIDC     = "oidc"
)

// adminUserView is a user as the admin API shows it (docs/api.md).
type adminUserView struct {
	ID        string    `json:"id"`
	Username  string    `json:"username"`
	IsAdmin   bool      `json:"is_admin"`
	Disabled  bool      `json:"disabled"`
	SignIn    string    `json:"sign_in"`
	CreatedAt time.Time `json:"created_at"`
}

func viewAdminUser(u store.User) adminUserView {
	v := adminUserView{ID: u.ID, Username: u.Username, IsAdmin: u.IsAdmin, Disabled: u.Disabled, SignIn: signInPassword, CreatedAt: u.CreatedAt.UTC()}
	if u.OIDCSubject != nil {
		v.SignIn = signInOIDC
	}
	return v
}

type adminUserList struct {
	Users []adminUserView `json:"users"`
}

func (s *Server) adminListUsers(w http.ResponseWriter, r *http.Request) {
	if _, ok := s.requireAdmin(w, r); !ok {
		return
	}
	users, err := store.ListUsers(r.Context(), s.pool)
	if err != nil {
		s.fail(w, "list users", err)
		return
	}
	list := adminUserList{Users: make([]adminUserView, 0, len(users))}
	for _, u := range users {
		list.Users = append(list.Users, viewAdminUser(u))
	}
	writeJSON(w, http.StatusOK, list)
}

type createUserRequest struct {
	Username string `json:"username"`
	Password string `json:"password"`
	IsAdmin  bool   `json:"is_admin"`
}

// The bounds of a password, as for `codehub user`.
const (
	minPasswordLength = 8
	maxPasswordLength = 1024
)

func invalidField(field, message string) *Error {
	return &Error{Status: http.StatusBadRequest, Code: CodeInvalidInput, Field: field, Message: field + ": " + message}
}

func checkPassword(password string) *Error {
	switch n := utf8.RuneCountInString(password); {
	case !utf8.ValidString(password):
		return invalidField("password", "must be UTF-8 text")
	case n < minPasswordLength:
		return invalidField("password", "must have at least 8 characters")
	case n > maxPasswordLength:
		return invalidField("password", "must have at most 1024 characters")
	}
	return nil
}

func (s *Server) adminCreateUser(w http.ResponseWriter, r *http.Request) {
	sess, ok := s.requireAdmin(w, r)
	if !ok {
		return
	}
	var req createUserRequest
	if e := decodeJSON(w, r, &req, s.opts.BodyReadTimeout); e != nil {
		WriteError(w, e)
		return
	}
	if !config.ValidUsername(req.Username) {
		WriteError(w, invalidField("username", "must be 1 to 63 of a-z, 0-9, '.', '_' and '-', starting with a letter or digit"))
		return
	}
	if e := checkPassword(req.Password); e != nil {
		WriteError(w, e)
		return
	}
	hash, err := HashPassword(req.Password)
	if err != nil {
		s.fail(w, "hash password", err)
		return
	}
	target := audit.Target{Type: audit.TargetUser, Name: req.Username}
	u, err := store.CreateUser(r.Context(), s.pool, workspace.NewID(), req.Username, hash, req.IsAdmin)
	if errors.Is(err, store.ErrUsernameTaken) {
		e := newError(http.StatusConflict, CodeNameTaken, "a user with that username exists")
		s.record(r, s.actor(r, sess), audit.ActionUserCreate, target, e)
		WriteError(w, e)
		return
	}
	if err != nil {
		s.fail(w, "create user", err)
		return
	}
	s.record(r, s.actor(r, sess), audit.ActionUserCreate, userTarget(u), nil)
	w.Header().Set("Location", "/api/v1/admin/users/"+u.ID)
	writeJSON(w, http.StatusCreated, viewAdminUser(u))
}

type patchUserRequest struct {
	Disabled *bool   `json:"disabled"`
	IsAdmin  *bool   `json:"is_admin"`
	Password *string `json:"password"`
}

// userChange is one change an admin asks of a user, applied and recorded
// on its own.
type userChange struct {
	action string
	apply  func(ctx context.Context, tx pgx.Tx) error
}

func (s *Server) adminPatchUser(w http.ResponseWriter, r *http.Request) {
	sess, ok := s.requireAdmin(w, r)
	if !ok {
		return
	}
	var req patchUserRequest
	if e := decodeJSON(w, r, &req, s.opts.BodyReadTimeout); e != nil {
		WriteError(w, e)
		return
	}
	id, ok := pathID(w, r, "user")
	if !ok {
		return
	}
	u, err := store.UserByID(r.Context(), s.pool, id)
	if errors.Is(err, store.ErrNotFound) {
		WriteError(w, newError(http.StatusNotFound, CodeNotFound, "user not found"))
		return
	}
	if err != nil {
		s.fail(w, "load user", err)
		return
	}
	changes, e := s.userChanges(u, sess, req)
	if e != nil {
		WriteError(w, e)
		return
	}
	// All or nothing: a refused change leaves the others unapplied.
	err = pgx.BeginFunc(r.Context(), s.pool, func(tx pgx.Tx) error {
		for _, c := range changes {
			if err := c.apply(r.Context(), tx); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		s.fail(w, "change user", err)
		return
	}
	for _, c := range changes {
		s.record(r, s.actor(r, sess), c.action, userTarget(u), nil)
	}
	if u, err = store.UserByID(r.Context(), s.pool, id); err != nil {
		s.fail(w, "load user", err)
		return
	}
	writeJSON(w, http.StatusOK, viewAdminUser(u))
}

// userChanges checks a patch of user u by the admin of sess and returns
// the changes it makes. An admin cannot disable themselves or give up
// their own rights (another admin must), so the last admin cannot lock
// everyone out; a user signing in through OIDC has no password to reset.
func (s *Server) userChanges(u store.User, sess store.Session, req patchUserRequest) ([]userChange, *Error) {
	var changes []userChange
	if req.Disabled != nil && *req.Disabled != u.Disabled {
		if u.ID == sess.UserID {
			return nil, invalidField("disabled", "you cannot disable yourself")
		}
		disabled := *req.Disabled
		action := audit.ActionUserEnable
		if disabled {
			action = audit.ActionUserDisable
		}
		changes = append(changes, userChange{action, func(ctx context.Context, tx pgx.Tx) error {
			return store.SetDisabled(ctx, tx, u.ID, disabled)
		}})
	}
	if req.IsAdmin != nil && *req.IsAdmin != u.IsAdmin {
		if u.ID == sess.UserID {
			return nil, invalidField("is_admin", "you cannot take away your own administrator rights")
		}
		admin := *req.IsAdmin
		action := audit.ActionUserAdminRevoke
		if admin {
			action = audit.ActionUserAdminGrant
		}
		changes = append(changes, userChange{action, func(ctx context.Context, tx pgx.Tx) error {
			return store.SetAdmin(ctx, tx, u.ID, admin)
		}})
	}
	if req.Password != nil {
		if u.OIDCSubject != nil {
			return nil, invalidField("password", "this user signs in through single sign-on and has no password")
		}
		if e := checkPassword(*req.Password); e != nil {
			return nil, e
		}
		password := *req.Password
		changes = append(changes, userChange{audit.ActionUserPassword, func(ctx context.Context, tx pgx.Tx) error {
			hash, err := HashPassword(password)
			if err != nil {
				return err
			}
			return store.SetPassword(ctx, tx, u.Username, hash)
		}})
	}
	return changes, nil
}
