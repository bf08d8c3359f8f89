// Package oidctest runs a real OpenID Provider for tests, as a separate
// process the test starts: zitadel/oidc's op package, with its example
// in-memory storage, serving on 127.0.0.1 with a plain login form (the
// program in ./provider, built once per test binary). Tests add users with
// groups and change them while it runs; each client says where the
// provider puts preferred_username and groups (the ID token, UserInfo, or
// both). It never fakes a response of the protocol: everything comes from
// the op package, and what a test changes, it changes in the provider's
// storage, through a control port of the process that answers only the
// secret the test handed it.
package oidctest

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/oauth2"
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

// User is a user of the provider. Subject is its id there.
type User struct {
	Subject  string
	Username string
	Password string
	Groups   []string
}

// Setup is what the provider process reads on stdin: the secret its
// control port demands and the clients it registers.
type Setup struct {
	Secret  string
	Clients []Client
}

// The control port's paths; each takes a JSON body.
const (
	// ControlUsers adds or replaces a User.
	ControlUsers = "/users"
	// ControlGroups applies a GroupsChange.
	ControlGroups = "/groups"
	// ControlUserinfoAs applies a UserinfoChange.
	ControlUserinfoAs = "/userinfo-as"
)

// GroupsChange sets the groups of the user Subject.
type GroupsChange struct {
	Subject string
	Groups  []string
}

// UserinfoChange makes UserInfo answer Subject's access tokens with
// Other's claims; an empty Other undoes it.
type UserinfoChange struct {
	Subject string
	Other   string
}

// LoginFormPath is where the provider's login form is served.
const LoginFormPath = "/login/username"

// Provider is a running OpenID Provider.
type Provider struct {
	// Issuer is its issuer URL, http://127.0.0.1:port.
	Issuer  string
	control string
	secret  string
}

// providerBuild is the provider program, built once for every test of
// the binary; RemoveBuild deletes it.
var providerBuild struct {
	once sync.Once
	dir  string
	path string
	err  error
}

// RemoveBuild deletes the provider program Start built; a TestMain calls
// it after the run.
func RemoveBuild() {
	if providerBuild.dir != "" {
		_ = os.RemoveAll(providerBuild.dir)
	}
}

func providerBinary(t testing.TB) string {
	t.Helper()
	providerBuild.once.Do(func() {
		dir, err := os.MkdirTemp("", "codehub-oidctest-")
		if err != nil {
			providerBuild.err = err
			return
		}
		providerBuild.dir, providerBuild.path = dir, filepath.Join(dir, "provider")
		build := exec.Command("go", "build", "-o", providerBuild.path, "github.com/codehub-io/codehub/internal/oidctest/provider")
		if out, err := build.CombinedOutput(); err != nil {
			providerBuild.err = fmt.Errorf("%w\n%s", err, out)
		}
	})
	if providerBuild.err != nil {
		t.Fatalf("build the test provider: %v", providerBuild.err)
	}
	return providerBuild.path
}

// Start runs a provider process with the clients registered until the
// test ends.
func Start(t testing.TB, clients ...Client) *Provider {
	t.Helper()
	bin := providerBinary(t)
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		t.Fatalf("control secret: %v", err)
	}
	setup, err := json.Marshal(Setup{Secret: hex.EncodeToString(key), Clients: clients})
	if err != nil {
		t.Fatalf("encode set-up: %v", err)
	}
	cmd := exec.Command(bin)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start the test provider: %v", err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	// stdin stays open: the process ends when it closes, the test
	// binary's end included.
	if _, err := stdin.Write(append(setup, '\n')); err != nil {
		t.Fatalf("hand the test provider its set-up: %v", err)
	}
	lines := bufio.NewReader(stdout)
	issuer, err := lines.ReadString('\n')
	if err != nil {
		t.Fatalf("read the test provider's issuer: %v", err)
	}
	control, err := lines.ReadString('\n')
	if err != nil {
		t.Fatalf("read the test provider's control URL: %v", err)
	}
	return &Provider{Issuer: strings.TrimSpace(issuer), control: strings.TrimSpace(control), secret: hex.EncodeToString(key)}
}

// AddUser adds or replaces a user.
func (p *Provider) AddUser(u User) { p.call(ControlUsers, u) }

// SetGroups changes a user's groups; tokens issued afterwards carry them.
func (p *Provider) SetGroups(subject string, groups []string) {
	p.call(ControlGroups, GroupsChange{Subject: subject, Groups: groups})
}

// AnswerUserinfoAs makes the provider's storage fill the UserInfo answers
// to subject's access tokens with other's claims, subject included: a
// provider that mixes up its users. An empty other undoes it.
func (p *Provider) AnswerUserinfoAs(subject, other string) {
	p.call(ControlUserinfoAs, UserinfoChange{Subject: subject, Other: other})
}

// call posts body to the control port's path. A refusal is a broken test
// set-up, not an outcome under test, and tests call these from subtests
// of the test that started the provider: it panics rather than fail a
// test from another's goroutine.
func (p *Provider) call(path string, body any) {
	b, err := json.Marshal(body)
	if err != nil {
		panic(fmt.Sprintf("oidctest: encode %s: %v", path, err))
	}
	req, err := http.NewRequest(http.MethodPost, p.control+path, bytes.NewReader(b))
	if err != nil {
		panic(fmt.Sprintf("oidctest: %s: %v", path, err))
	}
	req.Header.Set("Authorization", "Bearer "+p.secret)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		panic(fmt.Sprintf("oidctest: %s: %v", path, err))
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(res.Body)
		panic(fmt.Sprintf("oidctest: %s: status %d: %s", path, res.StatusCode, strings.TrimSpace(string(msg))))
	}
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
