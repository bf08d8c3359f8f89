package api

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"html/template"
	"net/http"
	"sync"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"
	"github.com/hashicorp/go-hclog"
	"golang.org/x/oauth2"

	"github.com/codehub-io/codehub/audit"
	"github.com/codehub-io/codehub/identity"
	"github.com/codehub-io/codehub/store"
)

// OIDCOptions configures single sign-on through an OpenID Provider
// (config's auth.oidc).
type OIDCOptions struct {
	Issuer        string
	ClientID      string
	ClientSecret  string
	Scopes        []string
	UsernameClaim string
	GroupsClaim   string
	AllowedGroups []string
	AdminGroups   []string
	// Label names the provider on the login page.
	Label string
}

// rules are the options that judge a login, for package identity; nil
// when single sign-on is off.
func (o *OIDCOptions) rules() *identity.OIDCOptions {
	if o == nil {
		return nil
	}
	return &identity.OIDCOptions{
		Issuer: o.Issuer, UsernameClaim: o.UsernameClaim, GroupsClaim: o.GroupsClaim,
		AllowedGroups: o.AllowedGroups, AdminGroups: o.AdminGroups,
	}
}

// Paths of the OIDC login.
const (
	oidcLoginPath    = "/api/v1/auth/oidc/login"
	oidcCallbackPath = "/api/v1/auth/oidc/callback"
	// oidcPostLogoutPath is where the provider sends the browser back
	// after ending its session: the dashboard, which then offers to log in.
	oidcPostLogoutPath = "/"
	// oidcStateCookie binds a login under way to the browser that started
	// it, so nobody can make a browser finish a login they started.
	oidcStateCookie = "codehub_oidc_state"
	// oidcLoginTTL is how long a user may take at the provider.
	oidcLoginTTL = 10 * time.Minute
)

// oidcLogin signs users in through the provider. Discovery happens at the
// first login and is retried at the next one after a failure, so a
// provider that is down at start delays nothing but its own logins; the
// provider's keys are fetched (again, after a rotation) by go-oidc.
type oidcLogin struct {
	logger      hclog.Logger
	opts        OIDCOptions
	redirectURL string
	// postLogoutURL is the post_logout_redirect_uri of a logout at the
	// provider; the operator registers it there.
	postLogoutURL string
	// now is the clock ID tokens are checked against.
	now func() time.Time

	mu       sync.Mutex
	provider *oidc.Provider
}

func newOIDCLogin(logger hclog.Logger, opts OIDCOptions, publicOrigin string) *oidcLogin {
	return &oidcLogin{logger: logger, opts: opts, redirectURL: publicOrigin + oidcCallbackPath, postLogoutURL: publicOrigin + oidcPostLogoutPath, now: time.Now}
}

// providerTimeout bounds each request to the provider: discovery, key
// fetches and code redemption.
const providerTimeout = 10 * time.Second

// providerContext carries the HTTP client for talking to the provider. It
// is never cancelled: go-oidc fetches rotated keys later with the context
// discovery had, so the client's timeout bounds each request instead.
func providerContext(ctx context.Context) context.Context {
	return oidc.ClientContext(ctx, &http.Client{Timeout: providerTimeout})
}

// discover returns the provider, discovering it the first time.
func (o *oidcLogin) discover() (*oidc.Provider, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.provider != nil {
		return o.provider, nil
	}
	p, err := oidc.NewProvider(providerContext(context.Background()), o.opts.Issuer)
	if err != nil {
		return nil, fmt.Errorf("discover %s: %w", o.opts.Issuer, err)
	}
	o.provider = p
	return p, nil
}

func (o *oidcLogin) oauth2Config(p *oidc.Provider) *oauth2.Config {
	return &oauth2.Config{
		ClientID: o.opts.ClientID, ClientSecret: o.opts.ClientSecret,
		Endpoint: p.Endpoint(), RedirectURL: o.redirectURL, Scopes: o.opts.Scopes,
	}
}

// Reasons an ID token is refused.
var (
	errTokenInvalid = errors.New("the ID token is not valid for this server")
	errTokenExpired = errors.New("the ID token has expired")
	errWrongNonce   = errors.New("the ID token answers another login (nonce mismatch)")
)

// verify checks a raw ID token: signature by the provider's keys, issuer,
// audience (our client id), expiry, and the nonce this login sent.
func (o *oidcLogin) verify(ctx context.Context, p *oidc.Provider, raw, nonce string) (*oidc.IDToken, error) {
	idt, err := p.Verifier(&oidc.Config{ClientID: o.opts.ClientID, Now: o.now}).Verify(ctx, raw)
	var expired *oidc.TokenExpiredError
	switch {
	case errors.As(err, &expired):
		return nil, fmt.Errorf("%w: %w", errTokenExpired, err)
	case err != nil:
		return nil, fmt.Errorf("%w: %w", errTokenInvalid, err)
	case subtle.ConstantTimeCompare([]byte(idt.Nonce), []byte(nonce)) != 1:
		return nil, errWrongNonce
	}
	return idt, nil
}

type authMethodsView struct {
	Password bool            `json:"password"`
	OIDC     *oidcMethodView `json:"oidc"`
}

type oidcMethodView struct {
	Label    string `json:"label"`
	LoginURL string `json:"login_url"`
}

// authMethods tells the login page which ways to log in to offer.
func (s *Server) authMethods(w http.ResponseWriter, _ *http.Request) {
	v := authMethodsView{Password: !s.opts.NoPasswordLogin}
	if s.oidc != nil {
		v.OIDC = &oidcMethodView{Label: s.oidc.opts.Label, LoginURL: oidcLoginPath}
	}
	writeJSON(w, http.StatusOK, v)
}

// oidcStart sends the browser to the provider with a fresh state, nonce
// and PKCE challenge, remembering where it goes once logged in (next).
func (s *Server) oidcStart(w http.ResponseWriter, r *http.Request) {
	if s.oidc == nil {
		WriteError(w, newError(http.StatusNotFound, CodeNotFound, "single sign-on is not configured"))
		return
	}
	p, err := s.oidc.discover()
	if err != nil {
		s.oidc.logger.Error("reach the identity provider", "error", err)
		s.refusePage(w, http.StatusBadGateway, "The identity provider cannot be reached. Try again in a moment.")
		return
	}
	state, stateHash, err := identity.NewSecret()
	if err != nil {
		s.fail(w, "make oidc state", err)
		return
	}
	nonce, _, err := identity.NewSecret()
	if err != nil {
		s.fail(w, "make oidc nonce", err)
		return
	}
	verifier := oauth2.GenerateVerifier()
	// next is checked here and again, for its owner, at the callback.
	next, _ := loginNext(s.sites, r.URL.Query().Get("next"))
	login := store.OIDCLogin{Nonce: nonce, Verifier: verifier, Next: next}
	if err := store.CreateOIDCLogin(r.Context(), s.pool, stateHash[:], login, oidcLoginTTL); err != nil {
		s.fail(w, "store oidc login", err)
		return
	}
	http.SetCookie(w, s.oidcStateCookie(state))
	w.Header().Set("Cache-Control", "no-store")
	http.Redirect(w, r, s.oidc.oauth2Config(p).AuthCodeURL(state, oidc.Nonce(nonce), oauth2.S256ChallengeOption(verifier)), http.StatusFound)
}

// oidcStateCookie carries the state to the callback only; an empty value
// clears it.
func (s *Server) oidcStateCookie(state string) *http.Cookie {
	c := &http.Cookie{
		Name: oidcStateCookie, Value: state, Path: oidcCallbackPath, MaxAge: int(oidcLoginTTL / time.Second),
		HttpOnly: true, Secure: s.sites.Secure(), SameSite: http.SameSiteLaxMode,
	}
	if state == "" {
		c.MaxAge = -1
	}
	return c
}

// oidcRefusal is a login the callback refuses: the page's sentence, its
// status, and the detail for the log and the audit record.
type oidcRefusal struct {
	status  int
	message string
	err     error
}

func refuse(status int, message string, err error) *oidcRefusal {
	return &oidcRefusal{status: status, message: message, err: err}
}

// oidcCallback finishes a login at the provider: it checks the state
// against the browser's cookie, redeems the code with the PKCE verifier,
// verifies the ID token and its nonce, applies the group rules and starts
// a session for the user known by (issuer, subject).
func (s *Server) oidcCallback(w http.ResponseWriter, r *http.Request) {
	if s.oidc == nil {
		WriteError(w, newError(http.StatusNotFound, CodeNotFound, "single sign-on is not configured"))
		return
	}
	http.SetCookie(w, s.oidcStateCookie(""))
	attempt := audit.Actor{Address: clientAddress(r, s.opts.TrustedProxies)}
	in, refusal := s.oidcUser(r, &attempt)
	if refusal != nil {
		s.oidc.logger.Warn("sign-in refused", "user_id", attempt.UserID, "username", attempt.Username, "client", attempt.Address, "error", refusal.err)
		s.metrics.loginFailures.Inc()
		detail := refusal.err.Error()
		if refusal.status == http.StatusInternalServerError {
			detail = "internal error"
		}
		s.audit.Record(r.Context(), audit.Event{Actor: attempt, Action: audit.ActionLogin, Outcome: audit.Failure, Detail: detail})
		s.refusePage(w, refusal.status, refusal.message)
		return
	}
	user := in.user
	// The ID token stays on the server, for logging out at the provider.
	cookie, err := s.identity.StartProviderSession(r.Context(), user.ID, in.idToken)
	if err != nil {
		s.fail(w, "start session", err)
		return
	}
	http.SetCookie(w, cookie)
	s.audit.Record(r.Context(), audit.Event{Actor: attempt, Action: audit.ActionLogin, Outcome: audit.Success, Detail: "single sign-on"})
	s.logger.Info("user logged in", "user_id", user.ID, "username", user.Username, "via", "oidc")
	w.Header().Set("Cache-Control", "no-store")
	http.Redirect(w, r, s.loginNextFor(r.Context(), user.ID, in.next), http.StatusFound)
}

// oidcSignIn is a login the callback lets in.
type oidcSignIn struct {
	user store.User
	// next is where the login was going, checked at its start.
	next string
	// idToken is the raw ID token the provider issued for this login.
	idToken string
}

// oidcUser runs the callback's checks and returns who logs in, or why not
// (with the user, when known). It fills attempt in as it learns who is
// logging in.
func (s *Server) oidcUser(r *http.Request, attempt *audit.Actor) (oidcSignIn, *oidcRefusal) {
	ctx := r.Context()
	q := r.URL.Query()
	if e := q.Get("error"); e != "" {
		return oidcSignIn{}, refuse(http.StatusForbidden, "The identity provider did not sign you in: "+describeProviderError(e, q.Get("error_description")),
			fmt.Errorf("provider answered %s", e))
	}
	state := q.Get("state")
	c, err := r.Cookie(oidcStateCookie)
	if state == "" || err != nil || subtle.ConstantTimeCompare([]byte(c.Value), []byte(state)) != 1 {
		return oidcSignIn{}, refuse(http.StatusBadRequest, "This sign-in was not started from this browser, or took too long. Start again from the login page.",
			errors.New("state does not match the browser's"))
	}
	stateHash := identity.HashSecret(state)
	login, err := store.TakeOIDCLogin(ctx, s.pool, stateHash[:])
	if errors.Is(err, store.ErrNotFound) {
		return oidcSignIn{}, refuse(http.StatusBadRequest, "This sign-in has expired or was already used. Start again from the login page.",
			errors.New("unknown or expired state"))
	}
	if err != nil {
		return oidcSignIn{}, refuse(http.StatusInternalServerError, "Signing in failed on our side. Try again.", err)
	}
	idt, raw, token, refusal := s.oidc.redeem(ctx, q.Get("code"), login.Verifier, login.Nonce)
	if refusal != nil {
		return oidcSignIn{}, refusal
	}
	claims, refusal := s.oidc.claims(ctx, idt, token, s.identity.NeedsUserinfo)
	if refusal != nil {
		return oidcSignIn{}, refusal
	}
	in, err := s.identity.SignInWithProvider(ctx, claims)
	s.recordSignInChanges(r, in)
	attempt.Username = in.Username
	if in.User.ID != "" {
		attempt.UserID, attempt.Username = in.User.ID, in.User.Username
	}
	var refused *identity.RefusedError
	switch {
	case errors.As(err, &refused) && errors.Is(err, store.ErrUsernameTaken):
		return oidcSignIn{}, refuse(http.StatusConflict, refused.Message, err)
	case errors.As(err, &refused):
		return oidcSignIn{}, refuse(http.StatusForbidden, refused.Message, err)
	case err != nil:
		return oidcSignIn{}, refuse(http.StatusInternalServerError, "Signing in failed on our side. Try again.", err)
	}
	return oidcSignIn{user: in.User, next: login.Next, idToken: raw}, nil
}

// recordSignInChanges records what a single sign-on login changed of its
// user, refused or not: the user's creation, the admin flag admin_groups
// set, the credentials a refusal ended.
func (s *Server) recordSignInChanges(r *http.Request, in identity.ProviderSignIn) {
	u := in.User
	actor := audit.Actor{UserID: u.ID, Username: u.Username, Address: clientAddress(r, s.opts.TrustedProxies)}
	if in.Created {
		s.record(r, actor, audit.ActionUserCreate, userTarget(u), nil)
	}
	if in.AdminAction != "" {
		s.audit.Record(r.Context(), audit.Event{
			Actor: actor, Action: in.AdminAction, Target: userTarget(u), Outcome: audit.Success, Detail: "from admin_groups at login",
		})
	}
	if in.Revocation != nil {
		s.recordRevocation(r.Context(), audit.Actor{UserID: u.ID, Username: u.Username}, *in.Revocation)
	}
}

// redeem exchanges the code, with the PKCE verifier, for the tokens and
// verifies the ID token (raw, as issued) against the nonce the login sent.
func (o *oidcLogin) redeem(ctx context.Context, code, verifier, nonce string) (*oidc.IDToken, string, *oauth2.Token, *oidcRefusal) {
	p, err := o.discover()
	if err != nil {
		return nil, "", nil, refuse(http.StatusBadGateway, "The identity provider cannot be reached. Try again in a moment.", err)
	}
	token, err := o.oauth2Config(p).Exchange(providerContext(ctx), code, oauth2.VerifierOption(verifier))
	if err != nil {
		return nil, "", nil, refuse(http.StatusBadGateway, "The identity provider did not accept this sign-in. Start again from the login page.",
			fmt.Errorf("redeem code: %w", err))
	}
	raw, _ := token.Extra("id_token").(string)
	if raw == "" {
		return nil, "", nil, refuse(http.StatusBadGateway, "The identity provider sent no ID token.", errors.New("no id_token in the token response"))
	}
	idt, err := o.verify(ctx, p, raw, nonce)
	if err != nil {
		return nil, "", nil, refuse(http.StatusForbidden, "The identity provider's answer was refused: "+refusedTokenSentence(err), err)
	}
	return idt, raw, token, nil
}

// claims returns the verified ID token's claims, with the provider's
// UserInfo answer when needsUserinfo says the username or groups claim is
// not in the token: a provider that follows OpenID Connect Core 5.4 serves
// the profile scope's claims there once it issues an access token. A
// provider without a UserInfo endpoint is judged on the ID token alone.
func (o *oidcLogin) claims(ctx context.Context, idt *oidc.IDToken, token *oauth2.Token, needsUserinfo func(map[string]any) bool) (identity.ProviderClaims, *oidcRefusal) {
	c := identity.ProviderClaims{Subject: idt.Subject}
	if err := idt.Claims(&c.IDToken); err != nil {
		return c, refuse(http.StatusForbidden, "The ID token's claims cannot be read.", fmt.Errorf("read claims of subject %s: %w", idt.Subject, err))
	}
	if !needsUserinfo(c.IDToken) {
		return c, nil
	}
	p, err := o.discover()
	if err != nil {
		return c, refuse(http.StatusBadGateway, "The identity provider cannot be reached. Try again in a moment.", err)
	}
	if p.UserInfoEndpoint() == "" {
		return c, nil
	}
	info, err := p.UserInfo(providerContext(ctx), oauth2.StaticTokenSource(token))
	if err != nil {
		return c, refuse(http.StatusBadGateway, "The identity provider's UserInfo endpoint did not answer. Try again in a moment.",
			fmt.Errorf("userinfo of subject %s: %w", idt.Subject, err))
	}
	if err := info.Claims(&c.UserInfo); err != nil {
		return c, refuse(http.StatusBadGateway, "The identity provider's UserInfo answer cannot be read.", fmt.Errorf("read userinfo of subject %s: %w", idt.Subject, err))
	}
	if c.UserInfo == nil {
		// A null answer is about nobody: it is judged, and refused, as
		// an answer without a subject.
		c.UserInfo = map[string]any{}
	}
	return c, nil
}

// describeProviderError words an error the provider sent back.
func describeProviderError(code, description string) string {
	if description != "" {
		return description + " (" + code + ")."
	}
	return code + "."
}

// refusedTokenSentence says why an ID token was refused.
func refusedTokenSentence(err error) string {
	switch {
	case errors.Is(err, errTokenExpired):
		return "it has expired. Start again from the login page."
	case errors.Is(err, errWrongNonce):
		return "it answers another login. Start again from the login page."
	}
	return "it was not issued by the configured provider for this server."
}

var refusalPage = template.Must(template.New("refusal").Parse(`<!doctype html>
<html lang="en">
<head><meta charset="utf-8"><title>Sign-in refused · CodeHub</title>
<link rel="stylesheet" href="/assets/app.css"></head>
<body><main class="refusal">
<h1>Sign-in refused</h1>
<p id="refusal-reason">{{.}}</p>
<p><a href="/login">Back to the login page</a></p>
</main></body>
</html>
`))

// refusePage answers a browser whose login cannot go on with a page that
// says why.
func (s *Server) refusePage(w http.ResponseWriter, status int, message string) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("Content-Security-Policy", "default-src 'none'; style-src 'self'; frame-ancestors 'none'")
	w.WriteHeader(status)
	if err := refusalPage.Execute(w, message); err != nil {
		s.logger.Debug("write refusal page", "error", err)
	}
}
