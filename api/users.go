package api

import (
	"errors"
	"net/http"
	"time"

	"github.com/codehub-io/codehub/audit"
	"github.com/codehub-io/codehub/identity"
	"github.com/codehub-io/codehub/store"
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

func invalidField(field, message string) *Error {
	return &Error{Status: http.StatusBadRequest, Code: CodeInvalidInput, Field: field, Message: field + ": " + message}
}

// identityError is the API error for a refusal of the identity service,
// or nil for any other error.
func identityError(err error) *Error {
	var fe *identity.FieldError
	if errors.As(err, &fe) {
		return invalidField(fe.Field, fe.Message)
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
	u, err := s.identity.CreateUser(r.Context(), req.Username, req.Password, req.IsAdmin)
	if e := identityError(err); e != nil {
		WriteError(w, e)
		return
	}
	if errors.Is(err, store.ErrUsernameTaken) {
		e := newError(http.StatusConflict, CodeNameTaken, "a user with that username exists")
		s.record(r, s.actor(r, sess), audit.ActionUserCreate, audit.Target{Type: audit.TargetUser, Name: req.Username}, e)
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
	u, actions, rev, err := s.identity.PatchUser(r.Context(), sess.UserID, id,
		identity.UserPatch{Disabled: req.Disabled, IsAdmin: req.IsAdmin, Password: req.Password})
	if errors.Is(err, store.ErrNotFound) {
		WriteError(w, newError(http.StatusNotFound, CodeNotFound, "user not found"))
		return
	}
	if e := identityError(err); e != nil {
		WriteError(w, e)
		return
	}
	if err != nil {
		s.fail(w, "change user", err)
		return
	}
	actor := s.actor(r, sess)
	for _, action := range actions {
		s.record(r, actor, action, userTarget(u), nil)
	}
	if rev != nil {
		s.recordRevocation(r.Context(), actor, *rev)
	}
	writeJSON(w, http.StatusOK, viewAdminUser(u))
}

type passwordChangeRequest struct {
	CurrentPassword string `json:"current_password"`
	NewPassword     string `json:"new_password"`
	KeepTokens      bool   `json:"keep_tokens"`
}

// changePassword lets a user logged in to the dashboard replace their own
// password, proving the current one (counted against the login backoff).
// Every session of the user ends, this browser gets a fresh one, and the
// user's tokens and pending CLI codes end too unless keep_tokens is set.
func (s *Server) changePassword(w http.ResponseWriter, r *http.Request) {
	sess, ok := s.requireSession(w, r)
	if !ok {
		return
	}
	var req passwordChangeRequest
	if e := decodeJSON(w, r, &req, s.opts.BodyReadTimeout); e != nil {
		WriteError(w, e)
		return
	}
	actor := s.actor(r, sess)
	target := audit.Target{Type: audit.TargetUser, ID: sess.UserID, Name: sess.Username}
	cookie, rev, err := s.identity.ChangePassword(r.Context(), sess.UserID, actor.Address, identity.PasswordChange{
		Current: req.CurrentPassword, New: req.NewPassword, KeepTokens: req.KeepTokens,
	})
	var locked *identity.LockedError
	if errors.As(err, &locked) {
		refuseLocked(w, locked)
		return
	}
	if e := identityError(err); e != nil {
		if e.Field == "current_password" && req.CurrentPassword != "" {
			s.record(r, actor, audit.ActionUserPasswordChange, target, e)
		}
		WriteError(w, e)
		return
	}
	if err != nil {
		s.fail(w, "change password", err)
		return
	}
	s.record(r, actor, audit.ActionUserPasswordChange, target, nil)
	s.recordRevocation(r.Context(), actor, rev)
	http.SetCookie(w, cookie)
	w.WriteHeader(http.StatusNoContent)
}
