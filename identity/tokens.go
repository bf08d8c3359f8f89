package api

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"
	"unicode"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/codehub-io/codehub/audit"
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
	// maxTokenDays bounds a token's life; none lives forever.
	maxTokenDays = 366
	// defaultTokenDays is the life of a token whose request names none.
	defaultTokenDays = 30
	// cliTokenDays is the life of a token the CLI's browser login makes.
	cliTokenDays = 90
	// grantTTL is how long a browser login's code waits for the CLI.
	grantTTL = time.Minute
	// lastUsedGranularity is how stale last_used_at may be: a token in
	// steady use costs one write per this period and replica, not one
	// per request.
	lastUsedGranularity = time.Minute
	// expiredTokenKeep is how long an expired token stays listed before
	// the sweep removes it.
	expiredTokenKeep = 30 * 24 * time.Hour
)

// tokens authenticates requests by a personal API token sent as
// "Authorization: Bearer". The secrets are 32 random bytes; what is stored
// is their HMAC-SHA256 under a deployment key, which is fast enough for
// every request and useless to whoever reads the table without the key.
type tokens struct {
	pool  *pgxpool.Pool
	cache *credentialCache[store.TokenSession]

	mu  sync.Mutex
	key []byte
}

func newTokens(pool *pgxpool.Pool) *tokens {
	return &tokens{pool: pool, cache: newCredentialCache[store.TokenSession]()}
}

// hash is the stored hash of a secret. The key is read (or created) on
// first use and kept; a failure to read it is tried again next time.
func (t *tokens) hash(ctx context.Context, secret string) ([sha256.Size]byte, error) {
	t.mu.Lock()
	key := t.key
	t.mu.Unlock()
	if key == nil {
		k, err := store.DeploymentKey(ctx, t.pool, tokenKeyName)
		if err != nil {
			return [sha256.Size]byte{}, err
		}
		t.mu.Lock()
		t.key, key = k, k
		t.mu.Unlock()
	}
	m := hmac.New(sha256.New, key)
	m.Write([]byte(secret))
	var sum [sha256.Size]byte
	m.Sum(sum[:0])
	return sum, nil
}

// newSecret returns a fresh token secret.
func newSecret() (string, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("read token secret: %w", err)
	}
	return TokenPrefix + base64.RawURLEncoding.EncodeToString(b), nil
}

// wellFormedSecret reports whether s could be a secret newSecret made, so
// anything else is refused without a lookup.
func wellFormedSecret(s string) bool {
	rest, ok := strings.CutPrefix(s, TokenPrefix)
	if !ok || len(rest) != base64.RawURLEncoding.EncodedLen(32) {
		return false
	}
	_, err := base64.RawURLEncoding.DecodeString(rest)
	return err == nil
}

// lookup returns the unexpired token with that secret, through the cache
// sessions use too. last_used_at is written when it is older than
// lastUsedGranularity.
func (t *tokens) lookup(ctx context.Context, secret string) (store.TokenSession, bool, error) {
	if !wellFormedSecret(secret) {
		return store.TokenSession{}, false, nil
	}
	hash, err := t.hash(ctx, secret)
	if err != nil {
		return store.TokenSession{}, false, err
	}
	now := time.Now()
	if cached, hit := t.cache.get(hash, now); hit {
		return cached, true, nil
	}
	tok, err := store.TokenBySecretHash(ctx, t.pool, hash[:])
	if errors.Is(err, store.ErrNotFound) {
		return store.TokenSession{}, false, nil
	}
	if err != nil {
		return store.TokenSession{}, false, err
	}
	if tok.LastUsedAt == nil || now.Sub(*tok.LastUsedAt) >= lastUsedGranularity {
		if err := store.TouchToken(ctx, t.pool, tok.ID); err != nil {
			return store.TokenSession{}, false, err
		}
		tok.LastUsedAt = &now
	}
	t.cache.put(hash, tok, tok.ExpiresAt, now)
	return tok, true, nil
}

// forget drops a revoked token from this replica's cache at once.
func (t *tokens) forget(id string) {
	t.cache.deleteWhere(func(tok store.TokenSession) bool { return tok.ID == id })
}

// bearerToken returns the credential of an Authorization header. present
// is true whenever the header is sent: a request that sends one is
// judged by it alone, never by its cookies.
func bearerToken(h http.Header) (secret string, present bool) {
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

// tokenAllows decides whether a token of scope may send a request with
// method: read tokens only the methods that change nothing.
func tokenAllows(scope, method string) bool {
	return scope == ScopeReadWrite || safeMethod(method)
}

// tokenSession is the session a token stands for. It is an administrator's
// only when the token was made as an admin token and its user still is one.
func tokenSession(t store.TokenSession) store.Session {
	return store.Session{
		UserID: t.UserID, Username: t.Username, IsAdmin: t.IsAdmin && t.UserIsAdmin,
		ExpiresAt: t.ExpiresAt, TokenID: t.ID, TokenScope: t.Scope,
	}
}

// tokenView is a token as the API shows it (docs/api.md); the secret is
// shown once, beside it, when the token is made.
type tokenView struct {
	ID         string     `json:"id"`
	Name       string     `json:"name"`
	Scope      string     `json:"scope"`
	Admin      bool       `json:"admin"`
	CreatedAt  time.Time  `json:"created_at"`
	ExpiresAt  time.Time  `json:"expires_at"`
	LastUsedAt *time.Time `json:"last_used_at"`
}

func viewToken(t store.Token) tokenView {
	return tokenView{ID: t.ID, Name: t.Name, Scope: t.Scope, Admin: t.IsAdmin,
		CreatedAt: t.CreatedAt.UTC(), ExpiresAt: t.ExpiresAt.UTC(), LastUsedAt: utc(t.LastUsedAt)}
}

type tokenList struct {
	Tokens []tokenView `json:"tokens"`
}

type createdToken struct {
	Token  tokenView `json:"token"`
	Secret string    `json:"secret"`
}

type tokenRequest struct {
	Name          string `json:"name"`
	Scope         string `json:"scope"`
	ExpiresInDays *int   `json:"expires_in_days"`
	Admin         bool   `json:"admin"`
}

// tokenSpec is a checked request for a token.
type tokenSpec struct {
	name  string
	scope string
	days  int
	admin bool
}

// checkTokenRequest validates a request for a token; it decides nothing
// about who may make it.
func checkTokenRequest(req tokenRequest) (tokenSpec, *Error) {
	if e := checkTokenName(req.Name); e != nil {
		return tokenSpec{}, e
	}
	if req.Scope != ScopeRead && req.Scope != ScopeReadWrite {
		return tokenSpec{}, &Error{Status: http.StatusBadRequest, Code: CodeInvalidInput, Field: "scope",
			Message: `scope: must be "read" or "read-write"`}
	}
	days := defaultTokenDays
	if req.ExpiresInDays != nil {
		days = *req.ExpiresInDays
	}
	if days < 1 || days > maxTokenDays {
		return tokenSpec{}, &Error{Status: http.StatusBadRequest, Code: CodeInvalidInput, Field: "expires_in_days",
			Message: fmt.Sprintf("expires_in_days: must be from 1 to %d", maxTokenDays)}
	}
	return tokenSpec{name: req.Name, scope: req.Scope, days: days, admin: req.Admin}, nil
}

func checkTokenName(name string) *Error {
	bad := len([]rune(name)) < 1 || len([]rune(name)) > 100 || strings.TrimSpace(name) != name ||
		strings.ContainsFunc(name, unicode.IsControl)
	if bad {
		return &Error{Status: http.StatusBadRequest, Code: CodeInvalidInput, Field: "name",
			Message: "name: must be 1-100 characters without control characters or surrounding spaces"}
	}
	return nil
}

// requireSession is requireUser for what only a person logged in to the
// dashboard may do: a token cannot make other tokens, so a leaked one
// cannot outlive its own expiry or revocation.
func (s *Server) requireSession(w http.ResponseWriter, r *http.Request) (store.Session, bool) {
	sess, ok := s.requireUser(w, r)
	if !ok {
		return store.Session{}, false
	}
	if sess.TokenID != "" {
		WriteError(w, newError(http.StatusForbidden, CodeSessionRequired, "log in to the dashboard to make tokens; a token cannot make tokens"))
		return store.Session{}, false
	}
	return sess, true
}

func (s *Server) listTokens(w http.ResponseWriter, r *http.Request) {
	sess, ok := s.requireUser(w, r)
	if !ok {
		return
	}
	list, err := store.TokensOfUser(r.Context(), s.pool, sess.UserID)
	if err != nil {
		s.fail(w, "list tokens", err)
		return
	}
	out := tokenList{Tokens: make([]tokenView, 0, len(list))}
	for _, t := range list {
		out.Tokens = append(out.Tokens, viewToken(t))
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) createToken(w http.ResponseWriter, r *http.Request) {
	sess, ok := s.requireSession(w, r)
	if !ok {
		return
	}
	var req tokenRequest
	if e := decodeJSON(w, r, &req, s.opts.BodyReadTimeout); e != nil {
		WriteError(w, e)
		return
	}
	spec, e := checkTokenRequest(req)
	if e != nil {
		WriteError(w, e)
		return
	}
	if spec.admin && !sess.IsAdmin {
		WriteError(w, newError(http.StatusForbidden, CodeForbidden, "only administrators can make admin tokens"))
		return
	}
	created, err := s.issueToken(r, s.actor(r, sess), sess.UserID, spec)
	if err != nil {
		s.fail(w, "create token", err)
		return
	}
	w.Header().Set("Location", "/api/v1/tokens/"+created.Token.ID)
	writeJSON(w, http.StatusCreated, created)
}

// issueToken makes a token for userID, on actor's request: every token is
// made, and audited, here.
func (s *Server) issueToken(r *http.Request, actor audit.Actor, userID string, spec tokenSpec) (created createdToken, err error) {
	defer func() {
		s.record(r, actor, audit.ActionTokenCreate, audit.Target{Type: audit.TargetToken, ID: created.Token.ID, Name: spec.name}, err)
	}()
	ctx := r.Context()
	secret, err := newSecret()
	if err != nil {
		return createdToken{}, err
	}
	hash, err := s.tokens.hash(ctx, secret)
	if err != nil {
		return createdToken{}, err
	}
	t, err := store.CreateToken(ctx, s.pool, store.Token{
		ID: workspace.NewID(), UserID: userID, Name: spec.name, Scope: spec.scope, IsAdmin: spec.admin,
	}, hash[:], time.Duration(spec.days)*24*time.Hour)
	if err != nil {
		return createdToken{}, err
	}
	s.logger.Info("api token created", "user_id", userID, "token_id", t.ID, "scope", t.Scope, "admin", t.IsAdmin)
	return createdToken{Token: viewToken(t), Secret: secret}, nil
}

func (s *Server) revokeToken(w http.ResponseWriter, r *http.Request) {
	sess, ok := s.requireUser(w, r)
	if !ok {
		return
	}
	id, ok := pathID(w, r, "token")
	if !ok {
		return
	}
	err := s.deleteToken(r, s.actor(r, sess), sess.UserID, id)
	if errors.Is(err, store.ErrNotFound) {
		WriteError(w, newError(http.StatusNotFound, CodeNotFound, "token not found"))
		return
	}
	if err != nil {
		s.fail(w, "revoke token", err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// deleteToken revokes the user's token id: every revocation happens here.
func (s *Server) deleteToken(r *http.Request, actor audit.Actor, userID, id string) error {
	err := store.DeleteToken(r.Context(), s.pool, id, userID)
	if errors.Is(err, store.ErrNotFound) {
		// Nothing was revoked: another user's token, or none.
		return err
	}
	s.record(r, actor, audit.ActionTokenRevoke, audit.Target{Type: audit.TargetToken, ID: id}, err)
	if err != nil {
		return err
	}
	s.tokens.forget(id)
	s.logger.Info("api token revoked", "user_id", userID, "token_id", id)
	return nil
}

type grantRequest struct {
	Name string `json:"name"`
}

type grantView struct {
	Code      string    `json:"code"`
	ExpiresAt time.Time `json:"expires_at"`
}

type redeemRequest struct {
	Code string `json:"code"`
}

// createGrant is the dashboard's half of the CLI's browser login: the
// logged-in user approves, and the page hands the code to the CLI on the
// same machine, which redeems it for a token. The token itself never
// passes through a URL.
func (s *Server) createGrant(w http.ResponseWriter, r *http.Request) {
	sess, ok := s.requireSession(w, r)
	if !ok {
		return
	}
	var req grantRequest
	if e := decodeJSON(w, r, &req, s.opts.BodyReadTimeout); e != nil {
		WriteError(w, e)
		return
	}
	if e := checkTokenName(req.Name); e != nil {
		WriteError(w, e)
		return
	}
	code, err := newSecret()
	if err != nil {
		s.fail(w, "create token grant", err)
		return
	}
	hash, err := s.tokens.hash(r.Context(), code)
	if err != nil {
		s.fail(w, "create token grant", err)
		return
	}
	if err := store.CreateTokenGrant(r.Context(), s.pool, hash[:], sess.UserID, req.Name, grantTTL); err != nil {
		s.fail(w, "create token grant", err)
		return
	}
	writeJSON(w, http.StatusCreated, grantView{Code: code, ExpiresAt: time.Now().Add(grantTTL).UTC()})
}

// redeemGrant exchanges a browser login's code for a read-write token of
// the user who approved it. The code is the credential: it is used up
// whatever the outcome.
func (s *Server) redeemGrant(w http.ResponseWriter, r *http.Request) {
	var req redeemRequest
	if e := decodeJSON(w, r, &req, s.opts.BodyReadTimeout); e != nil {
		WriteError(w, e)
		return
	}
	if !wellFormedSecret(req.Code) {
		WriteError(w, newError(http.StatusUnauthorized, CodeUnauthenticated, "the code is unknown, used or expired"))
		return
	}
	hash, err := s.tokens.hash(r.Context(), req.Code)
	if err != nil {
		s.fail(w, "redeem token grant", err)
		return
	}
	// Used up before the token is made: a failure after this point costs
	// the user a new login, never a second token for one approval.
	userID, name, err := store.RedeemTokenGrant(r.Context(), s.pool, hash[:])
	if errors.Is(err, store.ErrNotFound) {
		WriteError(w, newError(http.StatusUnauthorized, CodeUnauthenticated, "the code is unknown, used or expired"))
		return
	}
	if err != nil {
		s.fail(w, "redeem token grant", err)
		return
	}
	// The code stood for the user who approved it, at the client that
	// redeems it.
	actor := audit.Actor{UserID: userID, Address: clientAddress(r, s.opts.TrustedProxies)}
	created, err := s.issueToken(r, actor, userID, tokenSpec{name: name, scope: ScopeReadWrite, days: cliTokenDays})
	if err != nil {
		s.fail(w, "create token", err)
		return
	}
	writeJSON(w, http.StatusCreated, created)
}
