package api

import (
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/codehub-io/codehub/audit"
	"github.com/codehub-io/codehub/identity"
	"github.com/codehub-io/codehub/store"
)

// SessionCookie is the name of CodeHub's session cookie.
const SessionCookie = identity.SessionCookie

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
	client := clientAddress(r, s.opts.TrustedProxies)
	attempt := audit.Actor{Username: req.Username, Address: client}
	if s.opts.NoPasswordLogin {
		e := newError(http.StatusForbidden, CodeForbidden, "password login is turned off; use single sign-on")
		s.record(r, attempt, audit.ActionLogin, audit.Target{}, e)
		WriteError(w, e)
		return
	}
	res, err := s.identity.Login(r.Context(), req.Username, req.Password, client)
	attempt.UserID = res.User.ID
	var e *Error
	var locked *identity.LockedError
	switch {
	case err == nil:
	case errors.Is(err, identity.ErrWrongPassword):
		s.metrics.loginFailures.Inc()
		e = newError(http.StatusUnauthorized, CodeUnauthenticated, "wrong username or password")
	case errors.Is(err, identity.ErrDisabled):
		e = newError(http.StatusForbidden, CodeForbidden, "this account is disabled")
	case errors.As(err, &locked):
		refuseLocked(w, locked)
		s.record(r, attempt, audit.ActionLogin, audit.Target{}, newError(http.StatusTooManyRequests, CodeTooManyAttempts, "too many failed logins"))
		return
	default:
		s.fail(w, "log in", err)
		return
	}
	if e != nil {
		s.record(r, attempt, audit.ActionLogin, audit.Target{}, e)
		WriteError(w, e)
		return
	}
	http.SetCookie(w, res.Cookie)
	s.record(r, attempt, audit.ActionLogin, audit.Target{}, nil)
	u := res.User
	writeJSON(w, http.StatusOK, sessionView{User: userView{u.ID, u.Username, u.IsAdmin}, ExpiresAt: res.Expires.UTC()})
}

// refuseLocked answers 429 with Retry-After until the lock ends.
func refuseLocked(w http.ResponseWriter, locked *identity.LockedError) {
	w.Header().Set("Retry-After", strconv.Itoa(retryAfterSeconds(time.Until(locked.Until))))
	WriteError(w, newError(http.StatusTooManyRequests, CodeTooManyAttempts, "too many failed logins; try again later"))
}

// retryAfterSeconds rounds a remaining lock up to whole seconds for the
// Retry-After header, never answering 0 while a lock is in force.
func retryAfterSeconds(remaining time.Duration) int {
	s := int((remaining + time.Second - 1) / time.Second)
	return max(s, 1)
}

func (s *Server) logout(w http.ResponseWriter, r *http.Request) {
	out, err := s.identity.Logout(r.Context(), r)
	if err != nil {
		s.fail(w, "end session", err)
		return
	}
	if out.Known {
		s.record(r, s.actor(r, out.Session), audit.ActionLogout, audit.Target{}, nil)
	}
	http.SetCookie(w, out.Cookie)
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
	sess, ok, err := s.identity.Authenticate(r)
	if err != nil {
		s.fail(w, "authenticate", err)
		return store.Session{}, false
	}
	if !ok {
		msg := "log in first"
		if _, bearer := identity.BearerToken(r.Header); bearer {
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
