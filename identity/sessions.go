package api

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/codehub-io/codehub/proxy"
	"github.com/codehub-io/codehub/store"
)

// SessionCookie is the name of CodeHub's session cookie.
const SessionCookie = "codehub_session"

// sessionCacheTTL bounds how long a replica trusts a session it looked up
// without asking the database again: a logout on another replica, an
// expiry or a password change takes effect within this time.
const sessionCacheTTL = 2 * time.Second

// sessions authenticates requests by their session cookie.
type sessions struct {
	pool   *pgxpool.Pool
	ttl    time.Duration
	secure bool
	domain string
	cache  *credentialCache[store.Session]
}

func newSessions(pool *pgxpool.Pool, ttl time.Duration, secure bool, domain string) *sessions {
	return &sessions{pool: pool, ttl: ttl, secure: secure, domain: domain, cache: newCredentialCache[store.Session]()}
}

// newToken returns a random session token and the hash stored for it.
func newToken() (string, [sha256.Size]byte, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", [sha256.Size]byte{}, fmt.Errorf("read session token: %w", err)
	}
	token := base64.RawURLEncoding.EncodeToString(b)
	return token, tokenHash(token), nil
}

// tokenHash is the hash stored for a session token. It runs on every
// proxied request: the token is copied to a buffer on the stack, where
// converting it to a slice of its own would allocate it on the heap.
func tokenHash(token string) [sha256.Size]byte {
	var buf [64]byte
	return sha256.Sum256(append(buf[:0], token...))
}

// start creates a session for the user and returns the cookie carrying it.
func (s *sessions) start(ctx context.Context, userID string) (*http.Cookie, time.Time, error) {
	token, hash, err := newToken()
	if err != nil {
		return nil, time.Time{}, err
	}
	expires, err := store.CreateSession(ctx, s.pool, hash[:], userID, s.ttl)
	if err != nil {
		return nil, time.Time{}, err
	}
	return s.cookie(token, expires), expires, nil
}

func (s *sessions) cookie(value string, expires time.Time) *http.Cookie {
	c := &http.Cookie{
		Name: SessionCookie, Value: value, Path: "/", Domain: s.domain,
		HttpOnly: true, Secure: s.secure, SameSite: http.SameSiteLaxMode,
	}
	if value == "" {
		c.MaxAge = -1
	} else {
		c.Expires = expires
	}
	return c
}

// end deletes the request's session, if any, and returns the cookie that
// clears it in the browser.
func (s *sessions) end(ctx context.Context, r *http.Request) (*http.Cookie, error) {
	if c, err := r.Cookie(SessionCookie); err == nil {
		hash := tokenHash(c.Value)
		s.cache.delete(hash)
		if err := store.DeleteSession(ctx, s.pool, hash[:]); err != nil {
			return nil, err
		}
	}
	return s.cookie("", time.Time{}), nil
}

// fromRequest returns the dashboard session of a request; ok is false when
// it has none or it expired.
func (s *sessions) fromRequest(r *http.Request) (store.Session, bool, error) {
	c, err := r.Cookie(SessionCookie)
	if err != nil {
		return store.Session{}, false, nil
	}
	return s.lookup(r.Context(), c.Value, "")
}

// lookup returns the session of token if it is good for workspaceID's
// host (empty: the dashboard's).
func (s *sessions) lookup(ctx context.Context, token, workspaceID string) (store.Session, bool, error) {
	if token == "" {
		return store.Session{}, false, nil
	}
	hash := tokenHash(token)
	now := time.Now()
	if cached, hit := s.cache.get(hash, now); hit {
		return cached, cached.WorkspaceID == workspaceID, nil
	}
	sess, err := store.SessionByTokenHash(ctx, s.pool, hash[:], workspaceID)
	if errors.Is(err, store.ErrNotFound) {
		return store.Session{}, false, nil
	}
	if err != nil {
		return store.Session{}, false, err
	}
	s.cache.put(hash, sess, sess.ExpiresAt, now)
	return sess, true, nil
}

// SessionUser implements proxy.Authenticator. On a workspace's own host
// (workspaceID set) a session handed over to that host counts; so does the
// dashboard's, which reaches workspace hosts only under cookie_domain.
func (s *sessions) SessionUser(r *http.Request, workspaceID string) (string, bool, error) {
	if workspaceID != "" {
		if c, err := r.Cookie(proxy.HostSessionCookie); err == nil {
			sess, ok, err := s.lookup(r.Context(), c.Value, workspaceID)
			if ok || err != nil {
				return sess.UserID, ok, err
			}
		}
	}
	sess, ok, err := s.fromRequest(r)
	return sess.UserID, ok, err
}

// handoffTTL is how long a handoff ticket may take from the dashboard's
// redirect to the workspace host: one browser round trip.
const handoffTTL = time.Minute

// Handoff implements proxy.Authenticator: a ticket for the request's
// dashboard session, to be redeemed on workspaceID's host.
func (s *sessions) Handoff(r *http.Request, workspaceID string) (string, bool, error) {
	c, err := r.Cookie(SessionCookie)
	if err != nil || c.Value == "" {
		return "", false, nil
	}
	ticket, hash, err := newToken()
	if err != nil {
		return "", false, err
	}
	parent := tokenHash(c.Value)
	ok, err := store.CreateHandoff(r.Context(), s.pool, hash[:], parent[:], workspaceID, handoffTTL)
	if err != nil || !ok {
		return "", false, err
	}
	return ticket, true, nil
}

// Redeem implements proxy.Authenticator: it uses up ticket and returns the
// cookie of the session it hands over, which only workspaceID's host
// receives (no Domain attribute).
func (s *sessions) Redeem(ctx context.Context, ticket, workspaceID string) (*http.Cookie, bool, error) {
	token, hash, err := newToken()
	if err != nil {
		return nil, false, err
	}
	used := tokenHash(ticket)
	sess, err := store.RedeemHandoff(ctx, s.pool, used[:], workspaceID, hash[:])
	if errors.Is(err, store.ErrNotFound) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	s.cache.put(hash, sess, sess.ExpiresAt, time.Now())
	return &http.Cookie{
		Name: proxy.HostSessionCookie, Value: token, Path: "/", Expires: sess.ExpiresAt,
		HttpOnly: true, Secure: s.secure, SameSite: http.SameSiteLaxMode,
	}, true, nil
}
