package identity

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/codehub-io/codehub/store"
	"github.com/codehub-io/codehub/workspace"
)

// TokenPrefix begins every API token secret, so people and secret
// scanners can tell one when they see it.
const TokenPrefix = "codehub_"

// Token scopes: a read token may only send GET and HEAD.
const (
	ScopeRead      = "read"
	ScopeReadWrite = "read-write"
)

const (
	// tokenKeyName is the deployment key the secrets are hashed with.
	tokenKeyName = "api-tokens"
	// CLITokenDays is the life of a token the CLI's browser login makes.
	CLITokenDays = 90
	// GrantTTL is how long a browser login's code waits for the CLI.
	GrantTTL = time.Minute
	// lastUsedGranularity is how stale last_used_at may be: a token in
	// steady use costs one write per this period and replica, not one
	// per request.
	lastUsedGranularity = time.Minute
	// expiredTokenKeep is how long an expired token stays listed before
	// the sweep removes it.
	expiredTokenKeep = 30 * 24 * time.Hour
)

// API tokens authenticate requests sent with "Authorization: Bearer". The
// secrets are 32 random bytes; what is stored is their HMAC-SHA256 under a
// deployment key, which is fast enough for every request and useless to
// whoever reads the table without the key.

// hashToken is the stored hash of a token secret or CLI code. The key is
// read (or created) on first use and kept; a failure to read it is tried
// again next time.
func (s *Service) hashToken(ctx context.Context, secret string) ([sha256.Size]byte, error) {
	s.mu.Lock()
	key := s.key
	s.mu.Unlock()
	if key == nil {
		k, err := store.DeploymentKey(ctx, s.pool, tokenKeyName)
		if err != nil {
			return [sha256.Size]byte{}, err
		}
		s.mu.Lock()
		s.key, key = k, k
		s.mu.Unlock()
	}
	m := hmac.New(sha256.New, key)
	m.Write([]byte(secret))
	var sum [sha256.Size]byte
	m.Sum(sum[:0])
	return sum, nil
}

// newTokenSecret returns a fresh token secret.
func newTokenSecret() (string, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("read token secret: %w", err)
	}
	return TokenPrefix + base64.RawURLEncoding.EncodeToString(b), nil
}

// wellFormedSecret reports whether s could be a secret newTokenSecret
// made, so anything else is refused without a lookup.
func wellFormedSecret(s string) bool {
	rest, ok := strings.CutPrefix(s, TokenPrefix)
	if !ok || len(rest) != base64.RawURLEncoding.EncodedLen(32) {
		return false
	}
	_, err := base64.RawURLEncoding.DecodeString(rest)
	return err == nil
}

// lookupToken returns the unexpired token with that secret of a user who
// is not disabled, through the cache sessions use too. last_used_at is
// written when it is older than lastUsedGranularity.
func (s *Service) lookupToken(ctx context.Context, secret string) (store.TokenSession, bool, error) {
	if !wellFormedSecret(secret) {
		return store.TokenSession{}, false, nil
	}
	hash, err := s.hashToken(ctx, secret)
	if err != nil {
		return store.TokenSession{}, false, err
	}
	now := time.Now()
	if cached, hit := s.tokens.get(hash, now); hit {
		return cached, true, nil
	}
	tok, err := store.TokenBySecretHash(ctx, s.pool, hash[:])
	if errors.Is(err, store.ErrNotFound) {
		return store.TokenSession{}, false, nil
	}
	if err != nil {
		return store.TokenSession{}, false, err
	}
	if tok.LastUsedAt == nil || now.Sub(*tok.LastUsedAt) >= lastUsedGranularity {
		if err := store.TouchToken(ctx, s.pool, tok.ID); err != nil {
			return store.TokenSession{}, false, err
		}
		tok.LastUsedAt = &now
	}
	s.tokens.put(hash, tok, tok.ExpiresAt, now)
	return tok, true, nil
}

// BearerToken returns the credential of an Authorization header. present
// is true whenever the header is sent: a request that sends one is
// judged by it alone, never by its cookies.
func BearerToken(h http.Header) (secret string, present bool) {
	v := h.Get("Authorization")
	if v == "" {
		return "", false
	}
	scheme, rest, ok := strings.Cut(v, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", true
	}
	return strings.TrimSpace(rest), true
}

// Authenticate returns who sent an API request: the bearer token when an
// Authorization header is sent (its cookies are then ignored), otherwise
// the dashboard session cookie.
func (s *Service) Authenticate(r *http.Request) (store.Session, bool, error) {
	secret, bearer := BearerToken(r.Header)
	if !bearer {
		return s.DashboardSession(r)
	}
	t, ok, err := s.lookupToken(r.Context(), secret)
	if !ok || err != nil {
		return store.Session{}, false, err
	}
	return tokenSession(t), true, nil
}

// TokenUser implements proxy.TokenAuthenticator: the user of the
// request's API token; ok is false without a valid one.
func (s *Service) TokenUser(r *http.Request) (string, bool, error) {
	secret, bearer := BearerToken(r.Header)
	if !bearer {
		return "", false, nil
	}
	t, ok, err := s.lookupToken(r.Context(), secret)
	return t.UserID, ok, err
}

// tokenSession is the session a token stands for. It is an administrator's
// only when the token was made as an admin token and its user still is one.
func tokenSession(t store.TokenSession) store.Session {
	return store.Session{
		UserID: t.UserID, Username: t.Username, IsAdmin: t.IsAdmin && t.UserIsAdmin,
		ExpiresAt: t.ExpiresAt, TokenID: t.ID, TokenScope: t.Scope,
	}
}

// TokenSpec is a checked request for a token.
type TokenSpec struct {
	Name  string
	Scope string
	Days  int
	Admin bool
}

// Tokens returns the user's tokens, expired ones included, newest first.
func (s *Service) Tokens(ctx context.Context, userID string) ([]store.Token, error) {
	return store.TokensOfUser(ctx, s.pool, userID)
}

// IssueToken makes a token for userID and returns it with its secret,
// which is never stored.
func (s *Service) IssueToken(ctx context.Context, userID string, spec TokenSpec) (store.Token, string, error) {
	secret, err := newTokenSecret()
	if err != nil {
		return store.Token{}, "", err
	}
	hash, err := s.hashToken(ctx, secret)
	if err != nil {
		return store.Token{}, "", err
	}
	t, err := store.CreateToken(ctx, s.pool, store.Token{
		ID: workspace.NewID(), UserID: userID, Name: spec.Name, Scope: spec.Scope, IsAdmin: spec.Admin,
	}, hash[:], time.Duration(spec.Days)*24*time.Hour)
	if err != nil {
		return store.Token{}, "", err
	}
	s.logger.Info("api token created", "user_id", userID, "token_id", t.ID, "scope", t.Scope, "admin", t.IsAdmin)
	return t, secret, nil
}

// RevokeToken revokes the user's token id; another user's token, or none,
// is store.ErrNotFound.
func (s *Service) RevokeToken(ctx context.Context, userID, id string) error {
	if err := store.DeleteToken(ctx, s.pool, id, userID); err != nil {
		return err
	}
	s.tokens.deleteWhere(func(tok store.TokenSession) bool { return tok.ID == id })
	s.logger.Info("api token revoked", "user_id", userID, "token_id", id)
	return nil
}

// CreateGrant stores the code of a CLI login the user approved in the
// dashboard, bound to the S256 challenge the CLI sent, and returns it with
// its expiry.
func (s *Service) CreateGrant(ctx context.Context, userID, name, challenge string) (string, time.Time, error) {
	if !wellFormedChallenge(challenge) {
		return "", time.Time{}, invalidField("code_challenge", "must be the S256 challenge codehub login sends (43 characters of base64url)")
	}
	code, err := newTokenSecret()
	if err != nil {
		return "", time.Time{}, err
	}
	hash, err := s.hashToken(ctx, code)
	if err != nil {
		return "", time.Time{}, err
	}
	if err := store.CreateTokenGrant(ctx, s.pool, hash[:], userID, name, challenge, GrantTTL); err != nil {
		return "", time.Time{}, err
	}
	return code, time.Now().Add(GrantTTL), nil
}

// RedeemGrant exchanges a CLI login's code, with the verifier of the
// challenge it was approved with, for a read-write token of the user who
// approved it. The code is used up whatever the outcome, before the token
// is made: a code sent without its verifier (taken from a browser's
// history, say) is worth nothing and spoils that login, and a failure
// after that costs the user a new login, never a second token for one
// approval. A code that does not redeem is ErrUnknownCode.
func (s *Service) RedeemGrant(ctx context.Context, code, verifier string) (store.Token, string, error) {
	if !wellFormedSecret(code) {
		return store.Token{}, "", ErrUnknownCode
	}
	hash, err := s.hashToken(ctx, code)
	if err != nil {
		return store.Token{}, "", err
	}
	g, err := store.RedeemTokenGrant(ctx, s.pool, hash[:])
	if errors.Is(err, store.ErrNotFound) {
		return store.Token{}, "", ErrUnknownCode
	}
	if err != nil {
		return store.Token{}, "", err
	}
	if !verifies(verifier, g.Challenge) {
		s.logger.Warn("cli login code sent without its verifier", "user_id", g.UserID)
		return store.Token{}, "", ErrUnknownCode
	}
	return s.IssueToken(ctx, g.UserID, TokenSpec{Name: g.Name, Scope: ScopeReadWrite, Days: CLITokenDays})
}

// wellFormedChallenge reports whether c could be an S256 challenge:
// base64url without padding of a SHA-256 sum.
func wellFormedChallenge(c string) bool {
	if len(c) != base64.RawURLEncoding.EncodedLen(sha256.Size) {
		return false
	}
	_, err := base64.RawURLEncoding.DecodeString(c)
	return err == nil
}

// verifies reports whether verifier is the one challenge was made of
// (S256). A grant stored without a challenge verifies nothing.
func verifies(verifier, challenge string) bool {
	if verifier == "" || challenge == "" {
		return false
	}
	sum := sha256.Sum256([]byte(verifier))
	return subtle.ConstantTimeCompare([]byte(base64.RawURLEncoding.EncodeToString(sum[:])), []byte(challenge)) == 1
}

// SweepExpired deletes expired sessions, handoff tickets, CLI codes, and
// tokens expired for longer than their owners see them listed.
func (s *Service) SweepExpired(ctx context.Context) {
	n, err := store.DeleteExpiredSessions(ctx, s.pool)
	if err != nil {
		s.logger.Warn("sweep expired sessions", "error", err)
		return
	}
	if n > 0 {
		s.logger.Debug("swept expired sessions", "count", n)
	}
	n, err = store.DeleteExpiredTokens(ctx, s.pool, expiredTokenKeep)
	if err != nil {
		s.logger.Warn("sweep expired tokens", "error", err)
		return
	}
	if n > 0 {
		s.logger.Debug("swept expired tokens", "count", n)
	}
}
