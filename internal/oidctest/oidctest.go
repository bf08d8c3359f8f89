// Package oidctest runs a real OpenID Provider for tests: zitadel/oidc's
// op package, with its example in-memory storage, serving on 127.0.0.1 with
// a plain login form. Tests add users with groups and change them while it
// runs; each client says where the provider puts preferred_username and
// groups (the ID token, UserInfo, or both). It never fakes a response of
// the protocol: everything comes from the op package, and what a test
// changes, it changes in the provider's storage.
package oidctest

import (
	"context"
	"fmt"
	"html/template"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/zitadel/oidc/v3/example/server/storage"
	"github.com/zitadel/oidc/v3/pkg/oidc"
	"github.com/zitadel/oidc/v3/pkg/op"
	"golang.org/x/oauth2"
	"golang.org/x/text/language"
)

// Client is a client registered at the provider.
type Client struct {
	ID          string
	Secret      string
	RedirectURI string
	// PostLogoutRedirectURI, when set, is registered for RP-initiated
	// logout: the provider's end-session endpoint sends the browser back
	// there, and nowhere else.
	PostLogoutRedirectURI string
	// Claims is where the provider puts the user's claims for this client.
	Claims Claims
}

// Claims is where a provider puts preferred_username and groups. UserInfo
// always answers both; what varies between providers is the ID token.
type Claims int

const (
	// ClaimsInIDToken asserts both into the ID token too, although an
	// access token is issued (the client's IDTokenUserinfoClaimsAssertion).
	ClaimsInIDToken Claims = iota
	// ClaimsInUserinfo follows OpenID Connect Core 5.4 to the letter: with
	// an access token issued, the ID token carries neither, and both come
	// only from UserInfo.
	ClaimsInUserinfo
	// GroupsInUserinfo puts preferred_username into the ID token and the
	// groups only into UserInfo.
	GroupsInUserinfo
)

// registered is a client as the provider's storage hands it to the op
// package: the example client, with the settings Client chose.
type registered struct {
	*storage.Client
	claims     Claims
	postLogout []string
}

func (c *registered) IDTokenUserinfoClaimsAssertion() bool { return c.claims != ClaimsInUserinfo }

func (c *registered) PostLogoutRedirectURIs() []string { return c.postLogout }

// User is a user of the provider. Subject is its id there.
type User struct {
	Subject  string
	Username string
	Password string
	Groups   []string
}

// Provider is a running OpenID Provider.
type Provider struct {
	// Issuer is its issuer URL, http://127.0.0.1:port.
	Issuer string
	users  *users
	server *httptest.Server
}

// Start runs a provider with the clients registered until the test ends.
func Start(t testing.TB, clients ...Client) *Provider {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	issuer := "http://" + ln.Addr().String()
	us := &users{byID: map[string]*User{}, userinfoAs: map[string]string{}}
	examples := map[string]*storage.Client{}
	ours := map[string]*registered{}
	for _, c := range clients {
		examples[c.ID] = storage.WebClient(c.ID, c.Secret, c.RedirectURI)
		r := &registered{Client: examples[c.ID], claims: c.Claims}
		if c.PostLogoutRedirectURI != "" {
			r.postLogout = []string{c.PostLogoutRedirectURI}
		}
		ours[c.ID] = r
	}
	st := &groupStorage{Storage: storage.NewStorageWithClients(us, examples), users: us, clients: ours}
	provider, err := op.NewProvider(&op.Config{
		CryptoKey:          [32]byte{1},
		CodeMethodS256:     true,
		AuthMethodPost:     true,
		SupportedUILocales: []language.Tag{language.English},
	}, st, op.StaticIssuer(issuer), op.WithAllowInsecure())
	if err != nil {
		t.Fatalf("new provider: %v", err)
	}
	mux := http.NewServeMux()
	login := &loginForm{storage: st.Storage, callback: op.AuthCallbackURL(provider)}
	mux.Handle("/login/username", op.NewIssuerInterceptor(provider.IssuerFromRequest).Handler(login))
	mux.Handle("/", provider)
	srv := &httptest.Server{Listener: ln, Config: &http.Server{Handler: mux}}
	srv.Start()
	t.Cleanup(srv.Close)
	return &Provider{Issuer: issuer, users: us, server: srv}
}

// AddUser adds or replaces a user.
func (p *Provider) AddUser(u User) {
	p.users.mu.Lock()
	defer p.users.mu.Unlock()
	p.users.byID[u.Subject] = &u
}

// SetGroups changes a user's groups; tokens issued afterwards carry them.
func (p *Provider) SetGroups(subject string, groups []string) {
	p.users.mu.Lock()
	defer p.users.mu.Unlock()
	p.users.byID[subject].Groups = groups
}

// AnswerUserinfoAs makes the provider's storage fill the UserInfo answers
// to subject's access tokens with other's claims, subject included: a
// provider that mixes up its users. An empty other undoes it.
func (p *Provider) AnswerUserinfoAs(subject, other string) {
	p.users.mu.Lock()
	defer p.users.mu.Unlock()
	if other == "" {
		delete(p.users.userinfoAs, subject)
		return
	}
	p.users.userinfoAs[subject] = other
}

// LoginFormPath is where the provider's login form is served.
const LoginFormPath = "/login/username"

// users is the provider's user store.
type users struct {
	mu   sync.Mutex
	byID map[string]*User
	// userinfoAs maps a subject to the one whose claims UserInfo answers
	// with instead.
	userinfoAs map[string]string
}

func (us *users) exampleUser(u *User) *storage.User {
	return &storage.User{ID: u.Subject, Username: u.Username, Password: u.Password, PreferredLanguage: language.English}
}

func (us *users) GetUserByID(id string) *storage.User {
	us.mu.Lock()
	defer us.mu.Unlock()
	if u, ok := us.byID[id]; ok {
		return us.exampleUser(u)
	}
	return nil
}

func (us *users) GetUserByUsername(name string) *storage.User {
	us.mu.Lock()
	defer us.mu.Unlock()
	for _, u := range us.byID {
		if u.Username == name {
			return us.exampleUser(u)
		}
	}
	return nil
}

func (us *users) ExampleClientID() string { return storage.ServiceUserID }

func (us *users) groups(id string) ([]string, bool) {
	us.mu.Lock()
	defer us.mu.Unlock()
	u, ok := us.byID[id]
	if !ok {
		return nil, false
	}
	return append([]string(nil), u.Groups...), true
}

// answeredAs is the user whose claims UserInfo answers with for subject.
func (us *users) answeredAs(subject string) (User, bool) {
	us.mu.Lock()
	defer us.mu.Unlock()
	other, ok := us.userinfoAs[subject]
	if !ok {
		return User{}, false
	}
	u, ok := us.byID[other]
	if !ok {
		return User{}, false
	}
	return *u, true
}

// groupStorage is the example storage with a groups claim, put where each
// client's Claims says. The op package itself leaves the profile scope's
// claims (preferred_username) out of the ID token of a client that does
// not assert them.
type groupStorage struct {
	*storage.Storage
	users   *users
	clients map[string]*registered
}

func (s *groupStorage) GetClientByClientID(_ context.Context, id string) (op.Client, error) {
	c, ok := s.clients[id]
	if !ok {
		return nil, fmt.Errorf("client %s not found", id)
	}
	return c, nil
}

// SetUserinfoFromRequest fills the claims of an ID token.
func (s *groupStorage) SetUserinfoFromRequest(ctx context.Context, info *oidc.UserInfo, token op.IDTokenRequest, scopes []string) error {
	if err := s.Storage.SetUserinfoFromRequest(ctx, info, token, scopes); err != nil {
		return err
	}
	if c, ok := s.clients[token.GetClientID()]; ok && c.claims != ClaimsInIDToken {
		return nil
	}
	return s.addGroups(info, token.GetSubject())
}

// SetUserinfoFromToken fills the UserInfo answer: the profile scope's
// claims from the example storage, and the groups.
func (s *groupStorage) SetUserinfoFromToken(ctx context.Context, info *oidc.UserInfo, tokenID, subject, origin string) error {
	if err := s.Storage.SetUserinfoFromToken(ctx, info, tokenID, subject, origin); err != nil {
		return err
	}
	if other, ok := s.users.answeredAs(subject); ok {
		info.Subject = other.Subject
		info.PreferredUsername = other.Username
		subject = other.Subject
	}
	return s.addGroups(info, subject)
}

func (s *groupStorage) addGroups(info *oidc.UserInfo, subject string) error {
	groups, ok := s.users.groups(subject)
	if !ok {
		return fmt.Errorf("no user %s", subject)
	}
	if groups != nil {
		info.AppendClaims("groups", groups)
	}
	return nil
}

var formPage = template.Must(template.New("login").Parse(`<!doctype html>
<html><head><meta charset="utf-8"><title>Test provider login</title></head>
<body><form method="post" action="/login/username">
<input type="hidden" name="authRequestID" value="{{.ID}}">
<label>Username <input id="idp-username" name="username"></label>
<label>Password <input id="idp-password" name="password" type="password"></label>
<button id="idp-submit" type="submit">Sign in</button>
{{if .Error}}<p id="idp-error">{{.Error}}</p>{{end}}
</form></body></html>
`))

// loginForm is the provider's login UI: a username and password form
// that completes the auth request.
type loginForm struct {
	storage  *storage.Storage
	callback func(context.Context, string) string
}

func (l *loginForm) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if err := r.ParseForm(); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	id := r.Form.Get("authRequestID")
	if r.Method == http.MethodPost {
		err := l.storage.CheckUsernamePassword(r.Form.Get("username"), r.Form.Get("password"), id)
		if err == nil {
			http.Redirect(w, r, l.callback(r.Context(), id), http.StatusFound)
			return
		}
		w.WriteHeader(http.StatusUnauthorized)
		_ = formPage.Execute(w, map[string]string{"ID": id, "Error": err.Error()})
		return
	}
	_ = formPage.Execute(w, map[string]string{"ID": id})
}

// Login signs user in at the provider from start, a URL that redirects
// to its authorization endpoint (a relying party's login), and returns the
// response of the first request outside the provider that carries the
// code: the relying party's callback. rewrite, when set, may change the
// authorization request on its way, as a meddling party could.
func (p *Provider) Login(t testing.TB, client *http.Client, start string, u User, rewrite func(*url.URL)) *http.Response {
	t.Helper()
	next := p.CallbackURL(t, client, start, u, rewrite)
	res, err := client.Get(next.String())
	if err != nil {
		t.Fatalf("get %s: %v", next, err)
	}
	return res
}

// CallbackURL is Login up to the provider's redirect back: it returns the
// relying party's callback URL, with the code, without requesting it.
func (p *Provider) CallbackURL(t testing.TB, client *http.Client, start string, u User, rewrite func(*url.URL)) *url.URL {
	t.Helper()
	authorize := p.redirectOf(t, client, start)
	if rewrite != nil {
		rewrite(authorize)
	}
	form := p.redirectOf(t, client, authorize.String())
	if !strings.HasSuffix(form.Path, LoginFormPath) {
		t.Fatalf("provider sent the browser to %s, not its login form", form)
	}
	res, err := client.PostForm(p.Issuer+LoginFormPath, url.Values{
		"authRequestID": {form.Query().Get("authRequestID")}, "username": {u.Username}, "password": {u.Password},
	})
	if err != nil {
		t.Fatalf("post login form: %v", err)
	}
	res.Body.Close()
	next := location(t, res)
	for strings.HasPrefix(next.String(), p.Issuer) {
		next = p.redirectOf(t, client, next.String())
	}
	return next
}

// redirectOf GETs raw and returns where it redirects.
func (p *Provider) redirectOf(t testing.TB, client *http.Client, raw string) *url.URL {
	t.Helper()
	res, err := client.Get(raw)
	if err != nil {
		t.Fatalf("get %s: %v", raw, err)
	}
	res.Body.Close()
	return location(t, res)
}

func location(t testing.TB, res *http.Response) *url.URL {
	t.Helper()
	if res.StatusCode != http.StatusFound && res.StatusCode != http.StatusSeeOther {
		t.Fatalf("%s %s: status %d, want a redirect", res.Request.Method, res.Request.URL, res.StatusCode)
	}
	u, err := res.Location()
	if err != nil {
		t.Fatalf("redirect of %s: %v", res.Request.URL, err)
	}
	return u
}

// IDToken runs the authorization code flow with PKCE for client as user,
// with nonce, the way a relying party would, and returns the ID token the
// provider issued.
func (p *Provider) IDToken(t testing.TB, c Client, u User, nonce string) string {
	t.Helper()
	ctx := context.Background()
	cfg := &oauth2.Config{
		ClientID: c.ID, ClientSecret: c.Secret, RedirectURL: c.RedirectURI, Scopes: []string{"openid"},
		Endpoint: oauth2.Endpoint{AuthURL: p.Issuer + "/authorize", TokenURL: p.Issuer + "/oauth/token"},
	}
	verifier := oauth2.GenerateVerifier()
	start := cfg.AuthCodeURL("state", oauth2.SetAuthURLParam("nonce", nonce), oauth2.S256ChallengeOption(verifier))
	jar, _ := cookiejar.New(nil)
	client := &http.Client{Jar: jar, Timeout: 30 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	form := p.redirectOf(t, client, start)
	res, err := client.PostForm(p.Issuer+LoginFormPath, url.Values{
		"authRequestID": {form.Query().Get("authRequestID")}, "username": {u.Username}, "password": {u.Password},
	})
	if err != nil {
		t.Fatalf("post login form: %v", err)
	}
	res.Body.Close()
	next := location(t, res)
	for strings.HasPrefix(next.String(), p.Issuer) {
		next = p.redirectOf(t, client, next.String())
	}
	token, err := cfg.Exchange(ctx, next.Query().Get("code"), oauth2.VerifierOption(verifier))
	if err != nil {
		t.Fatalf("exchange code: %v", err)
	}
	raw, ok := token.Extra("id_token").(string)
	if !ok {
		t.Fatal("no id_token in the token response")
	}
	return raw
}
