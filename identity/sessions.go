package identity

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/codehub-io/codehub/proxy"
	"github.com/codehub-io/codehub/store"
)

// SessionCookie is the name of CodeHub's session cookie.
const SessionCookie = "codehub_session"

// NewSecret returns a random 32-byte secret, URL-safe, and the hash stored
// for it: session cookies, handoff tickets, single sign-on states.
func NewSecret() (string, [sha256.Size]byte, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", [sha256.Size]byte{}, fmt.Errorf("read session token: %w", err)
	}
	token := base64.RawURLEncoding.EncodeToString(b)
	return token, HashSecret(token), nil
}

// HashSecret is the hash stored for a secret NewSecret made. It runs on
// every proxied request: the secret is copied to a buffer on the stack,
// where converting it to a slice of its own would allocate it on the heap.
func HashSecret(token string) [sha256.Size]byte {
	var buf [64]byte
	return sha256.Sum256(append(buf[:0], token...))
}

// StartSession creates a dashboard session for the user and returns the
// cookie carrying it.
func (s *Service) StartSession(ctx context.Context, userID string) (*http.Cookie, time.Time, error) {
	token, hash, err := NewSecret()
	if err != nil {
		return nil, time.Time{}, err
	}
	expires, err := store.CreateSession(ctx, s.pool, hash[:], userID, s.opts.SessionTTL)
	if err != nil {
		return nil, time.Time{}, err
	}
	return s.cookie(token, expires), expires, nil
}

func (s *Service) cookie(value string, expires time.Time) *http.Cookie {
	c := &http.Cookie{
		Name: SessionCookie, Value: value, Path: "/", Domain: s.opts.CookieDomain,
		HttpOnly: true, Secure: s.opts.Secure, SameSite: http.SameSiteLaxMode,
	}
	if value == "" {
		c.MaxAge = -1
	} else {
		c.Expires = expires
	}
	return c
}

// LogoutResult is a logout: the session it ended, when the request had a
// live one (Known), and the cookie that clears it in the browser.
type LogoutResult struct {
	Session store.Session
	Known   bool
	Cookie  *http.Cookie
}

// Logout ends the request's session, if any, and with it the ID token of
// a single sign-on login (ProviderIDToken reads it before).
func (s *Service) Logout(ctx context.Context, r *http.Request) (LogoutResult, error) {
	sess, known, err := s.DashboardSession(r)
	if err != nil {
		return LogoutResult{}, err
	}
	if c, err := r.Cookie(SessionCookie); err == nil {
		hash := HashSecret(c.Value)
		s.sessions.delete(hash)
		if err := store.DeleteSession(ctx, s.pool, hash[:]); err != nil {
			return LogoutResult{}, err
		}
	}
	return LogoutResult{Session: sess, Known: known, Cookie: s.cookie("", time.Time{})}, nil
}

// DashboardSession returns the dashboard session of a request; ok is false
// when it has none, it expired or its user is disabled.
func (s *Service) DashboardSession(r *http.Request) (store.Session, bool, error) {
	c, err := r.Cookie(SessionCookie)
	if err != nil {
		return store.Session{}, false, nil
	}
	return s.lookupSession(r.Context(), c.Value, "")
}

// lookupSession returns the session of token if it is good for
// workspaceID's host (empty: the dashboard's).
func (s *Service) lookupSession(ctx context.Context, token, workspaceID string) (store.Session, bool, error) {
	if token == "" {
		return store.Session{}, false, nil
	}
	hash := HashSecret(token)
	now := time.Now()
	if cached, hit := s.sessions.get(hash, now); hit {
		return cached, cached.WorkspaceID == workspaceID, nil
	}
	sess, err := store.SessionByTokenHash(ctx, s.pool, hash[:], workspaceID)
	if errors.Is(err, store.ErrNotFound) {
		return store.Session{}, false, nil
	}
	if err != nil {
		return store.Session{}, false, err
	}
	s.sessions.put(hash, sess, sess.ExpiresAt, now)
	return sess, true, nil
}

// SessionUser implements proxy.Authenticator. On a workspace's own host
// (workspaceID set) a session handed over to that host counts; so does the
// dashboard's, which reaches workspace hosts only under cookie_domain.
func (s *Service) SessionUser(r *http.Request, workspaceID string) (string, bool, error) {
	if workspaceID != "" {
		if c, err := r.Cookie(proxy.HostSessionCookie); err == nil {
			sess, ok, err := s.lookupSession(r.Context(), c.Value, workspaceID)
			if ok || err != nil {
				return sess.UserID, ok, err
			}
		}
	}
	sess, ok, err := s.DashboardSession(r)
	return sess.UserID, ok, err
}

// handoffTTL is how long a handoff ticket may take from the dashboard's
// redirect to the workspace host: one browser round trip.
const handoffTTL = time.Minute

// Handoff implements proxy.Authenticator: a ticket for the request's
// dashboard session, to be redeemed on workspaceID's host.
func (s *Service) Handoff(r *http.Request, workspaceID string) (string, bool, error) {
	c, err := r.Cookie(SessionCookie)
	if err != nil || c.Value == "" {
		return "", false, nil
	}
	ticket, hash, err := NewSecret()
	if err != nil {
		return "", false, err
	}
	parent := HashSecret(c.Value)
	ok, err := store.CreateHandoff(r.Context(), s.pool, hash[:], parent[:], workspaceID, handoffTTL)
	if err != nil || !ok {
		return "", false, err
	}
	return ticket, true, nil
}

// Redeem implements proxy.Authenticator: it uses up ticket and returns the
// cookie of the session it hands over, which only workspaceID's host
// receives (no Domain attribute).
func (s *Service) Redeem(ctx context.Context, ticket, workspaceID string) (*http.Cookie, bool, error) {
	token, hash, err := NewSecret()
	if err != nil {
		return nil, false, err
	}
	used := HashSecret(ticket)
	sess, err := store.RedeemHandoff(ctx, s.pool, used[:], workspaceID, hash[:])
	if errors.Is(err, store.ErrNotFound) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	s.sessions.put(hash, sess, sess.ExpiresAt, time.Now())
	return &http.Cookie{
		Name: proxy.HostSessionCookie, Value: token, Path: "/", Expires: sess.ExpiresAt,
		HttpOnly: true, Secure: s.opts.Secure, SameSite: http.SameSiteLaxMode,
	}, true, nil
}

var _ proxy.Authenticator = (*Service)(nil)
