package api

import (
	"errors"
	"net/http"
	"strconv"
	"sync"
	"time"

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
	if e := decodeJSON(w, r, &req); e != nil {
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
	user, err := store.UserByUsername(ctx, s.pool, req.Username)
	if errors.Is(err, store.ErrNotFound) {
		_, _ = VerifyPassword(dummyHash(), req.Password)
		s.metrics.loginFailures.Inc()
		WriteError(w, newError(http.StatusUnauthorized, CodeUnauthenticated, "wrong username or password"))
		return
	}
	if err != nil {
		s.fail(w, "load user", err)
		return
	}
	if user.LockedUntil != nil {
		if remaining := time.Until(*user.LockedUntil); remaining > 0 {
			w.Header().Set("Retry-After", strconv.Itoa(retryAfterSeconds(remaining)))
			WriteError(w, newError(http.StatusTooManyRequests, CodeTooManyAttempts, "too many failed logins; try again later"))
			return
		}
	}
	ok, err := VerifyPassword(user.PasswordHash, req.Password)
	if err != nil {
		s.fail(w, "verify password", err)
		return
	}
	if !ok {
		s.loginFailed(w, r, user)
		return
	}
	if err := store.ResetLoginFailures(ctx, s.pool, user.ID); err != nil {
		s.fail(w, "reset login failures", err)
		return
	}
	cookie, expires, err := s.sessions.start(ctx, user.ID)
	if err != nil {
		s.fail(w, "start session", err)
		return
	}
	http.SetCookie(w, cookie)
	s.logger.Info("user logged in", "user_id", user.ID, "username", user.Username)
	writeJSON(w, http.StatusOK, sessionView{User: userView{user.ID, user.Username, user.IsAdmin}, ExpiresAt: expires})
}

func (s *Server) loginFailed(w http.ResponseWriter, r *http.Request, user store.User) {
	s.metrics.loginFailures.Inc()
	n, err := store.RecordLoginFailure(r.Context(), s.pool, user.ID)
	if err != nil {
		s.fail(w, "record login failure", err)
		return
	}
	if d := loginBackoff(n); d > 0 {
		if err := store.LockUser(r.Context(), s.pool, user.ID, d); err != nil {
			s.fail(w, "lock user", err)
			return
		}
		s.logger.Warn("login backoff", "username", user.Username, "failures", n, "locked_for", d)
	}
	WriteError(w, newError(http.StatusUnauthorized, CodeUnauthenticated, "wrong username or password"))
}

func (s *Server) logout(w http.ResponseWriter, r *http.Request) {
	cookie, err := s.sessions.end(r.Context(), r)
	if err != nil {
		s.fail(w, "end session", err)
		return
	}
	http.SetCookie(w, cookie)
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) session(w http.ResponseWriter, r *http.Request) {
	sess, ok := s.requireUser(w, r)
	if !ok {
		return
	}
	writeJSON(w, http.StatusOK, sessionView{User: userView{sess.UserID, sess.Username, sess.IsAdmin}, ExpiresAt: sess.ExpiresAt})
}

// requireUser answers 401 (and returns false) unless the request has a session.
func (s *Server) requireUser(w http.ResponseWriter, r *http.Request) (store.Session, bool) {
	sess, ok, err := s.sessions.fromRequest(r)
	if err != nil {
		s.fail(w, "authenticate", err)
		return store.Session{}, false
	}
	if !ok {
		WriteError(w, newError(http.StatusUnauthorized, CodeUnauthenticated, "log in first"))
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
	s.logger.Error("request failed", "step", step, "error", err)
	WriteError(w, internalError())
}
