package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"
	"unicode"

	"github.com/codehub-io/codehub/audit"
	"github.com/codehub-io/codehub/identity"
	"github.com/codehub-io/codehub/store"
)

// TokenPrefix begins every API token secret.
const TokenPrefix = identity.TokenPrefix

// Token scopes: a read token may only send GET and HEAD.
const (
	ScopeRead      = identity.ScopeRead
	ScopeReadWrite = identity.ScopeReadWrite
)

const (
	// maxTokenDays bounds a token's life; none lives forever.
	maxTokenDays = 366
	// defaultTokenDays is the life of a token whose request names none.
	defaultTokenDays = 30
)

// tokenAllows decides whether a token of scope may send a request with
// method: read tokens only the methods that change nothing.
func tokenAllows(scope, method string) bool {
	return scope == ScopeReadWrite || safeMethod(method)
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

// checkTokenRequest validates a request for a token; it decides nothing
// about who may make it.
func checkTokenRequest(req tokenRequest) (identity.TokenSpec, *Error) {
	if e := checkTokenName(req.Name); e != nil {
		return identity.TokenSpec{}, e
	}
	if req.Scope != ScopeRead && req.Scope != ScopeReadWrite {
		return identity.TokenSpec{}, &Error{Status: http.StatusBadRequest, Code: CodeInvalidInput, Field: "scope",
			Message: `scope: must be "read" or "read-write"`}
	}
	days := defaultTokenDays
	if req.ExpiresInDays != nil {
		days = *req.ExpiresInDays
	}
	if days < 1 || days > maxTokenDays {
		return identity.TokenSpec{}, &Error{Status: http.StatusBadRequest, Code: CodeInvalidInput, Field: "expires_in_days",
			Message: fmt.Sprintf("expires_in_days: must be from 1 to %d", maxTokenDays)}
	}
	return identity.TokenSpec{Name: req.Name, Scope: req.Scope, Days: days, Admin: req.Admin}, nil
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
	list, err := s.identity.Tokens(r.Context(), sess.UserID)
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
	if spec.Admin && !sess.IsAdmin {
		WriteError(w, newError(http.StatusForbidden, CodeForbidden, "only administrators can make admin tokens"))
		return
	}
	t, secret, err := s.identity.IssueToken(r.Context(), sess.UserID, spec)
	s.recordTokenCreate(r, s.actor(r, sess), t, spec.Name, err)
	if err != nil {
		s.fail(w, "create token", err)
		return
	}
	w.Header().Set("Location", "/api/v1/tokens/"+t.ID)
	writeJSON(w, http.StatusCreated, createdToken{Token: viewToken(t), Secret: secret})
}

// recordTokenCreate records the making of a token, made or not.
func (s *Server) recordTokenCreate(r *http.Request, actor audit.Actor, t store.Token, name string, err error) {
	s.record(r, actor, audit.ActionTokenCreate, audit.Target{Type: audit.TargetToken, ID: t.ID, Name: name}, err)
}

// currentToken is the id DELETE /api/v1/tokens/{id} takes for the token
// the request is sent with; no token has it, since ids are ULIDs.
const currentToken = "current"

func (s *Server) revokeToken(w http.ResponseWriter, r *http.Request) {
	if r.PathValue("id") == currentToken {
		s.revokeCurrentToken(w, r)
		return
	}
	sess, ok := s.requireUser(w, r)
	if !ok {
		return
	}
	id, ok := pathID(w, r, "token")
	if !ok {
		return
	}
	err := s.identity.RevokeToken(r.Context(), sess.UserID, id)
	if errors.Is(err, store.ErrNotFound) {
		// Nothing was revoked, and nothing is recorded: another user's
		// token, or none.
		WriteError(w, newError(http.StatusNotFound, CodeNotFound, "token not found"))
		return
	}
	s.record(r, s.actor(r, sess), audit.ActionTokenRevoke, audit.Target{Type: audit.TargetToken, ID: id}, err)
	if err != nil {
		s.fail(w, "revoke token", err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// revokeCurrentToken ends the token the request is sent with: how a
// client logs out. A read token may end itself too.
func (s *Server) revokeCurrentToken(w http.ResponseWriter, r *http.Request) {
	sess, ok, err := s.identity.Authenticate(r)
	if err != nil {
		s.fail(w, "authenticate", err)
		return
	}
	if !ok {
		WriteError(w, newError(http.StatusUnauthorized, CodeUnauthenticated, "the token is invalid, expired or revoked"))
		return
	}
	if sess.TokenID == "" {
		WriteError(w, newError(http.StatusBadRequest, CodeInvalidInput,
			"send the token to revoke as the bearer token; a dashboard session logs out at POST /api/v1/logout"))
		return
	}
	err = s.identity.RevokeToken(r.Context(), sess.UserID, sess.TokenID)
	if errors.Is(err, store.ErrNotFound) {
		// Revoked meanwhile, by another request.
		WriteError(w, newError(http.StatusUnauthorized, CodeUnauthenticated, "the token is invalid, expired or revoked"))
		return
	}
	s.record(r, s.actor(r, sess), audit.ActionTokenRevoke, audit.Target{Type: audit.TargetToken, ID: sess.TokenID}, err)
	if err != nil {
		s.fail(w, "revoke token", err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// recordRevocation records each token a change of the user ended, with
// the reason.
func (s *Server) recordRevocation(ctx context.Context, actor audit.Actor, rev identity.Revocation) {
	for _, id := range rev.TokenIDs {
		s.audit.Record(ctx, audit.Event{Actor: actor, Action: audit.ActionTokenRevoke,
			Target: audit.Target{Type: audit.TargetToken, ID: id}, Outcome: audit.Success, Detail: rev.Reason})
	}
}

type grantRequest struct {
	Name          string `json:"name"`
	CodeChallenge string `json:"code_challenge"`
}

type grantView struct {
	Code      string    `json:"code"`
	ExpiresAt time.Time `json:"expires_at"`
}

type redeemRequest struct {
	Code         string `json:"code"`
	CodeVerifier string `json:"code_verifier"`
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
	code, expires, err := s.identity.CreateGrant(r.Context(), sess.UserID, req.Name, req.CodeChallenge)
	if e := identityError(err); e != nil {
		WriteError(w, e)
		return
	}
	if err != nil {
		s.fail(w, "create token grant", err)
		return
	}
	writeJSON(w, http.StatusCreated, grantView{Code: code, ExpiresAt: expires.UTC()})
}

// redeemGrant exchanges a browser login's code, with the verifier of its
// challenge, for a read-write token of the user who approved it.
func (s *Server) redeemGrant(w http.ResponseWriter, r *http.Request) {
	var req redeemRequest
	if e := decodeJSON(w, r, &req, s.opts.BodyReadTimeout); e != nil {
		WriteError(w, e)
		return
	}
	t, secret, err := s.identity.RedeemGrant(r.Context(), req.Code, req.CodeVerifier)
	if errors.Is(err, identity.ErrUnknownCode) {
		WriteError(w, newError(http.StatusUnauthorized, CodeUnauthenticated, "the code is unknown, used or expired"))
		return
	}
	if t.UserID != "" {
		// The code stood for the user who approved it, at the client that
		// redeems it.
		s.recordTokenCreate(r, audit.Actor{UserID: t.UserID, Address: clientAddress(r, s.opts.TrustedProxies)}, t, t.Name, err)
	}
	if err != nil {
		s.fail(w, "redeem token grant", err)
		return
	}
	writeJSON(w, http.StatusCreated, createdToken{Token: viewToken(t), Secret: secret})
}
