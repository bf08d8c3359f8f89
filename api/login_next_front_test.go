package api_test

import (
	"net/http"
	"net/url"
	"testing"

	"github.com/codehub-io/codehub/api/apitest"
	"github.com/codehub-io/codehub/internal/oidctest"
)

// offSite are nexts that a browser would follow to another site if a login
// sent it there.
var offSite = []string{"/\t/evil.example", "/\\evil.example", "//evil.example", "https://evil.example/", "javascript:alert(1)", " //evil.example"}

// After a password login the login page asks the server where to go: never
// off-site, and back to the page the user came from otherwise.
func TestLoginNextAfterPasswordLogin(t *testing.T) {
	env := apitest.New(t, apitest.Config{})
	c := env.Login(env.CreateUser("nina", false))
	validate(t, c)
	target := func(next string) string {
		t.Helper()
		res := env.Do(c, "GET", "/api/v1/auth/next?next="+url.QueryEscape(next), nil)
		if res.StatusCode != http.StatusOK {
			t.Fatalf("next %q: status %d %s", next, res.StatusCode, res.Body)
		}
		var v struct {
			Next string `json:"next"`
		}
		res.Decode(t, &v)
		return v.Next
	}
	for _, next := range offSite {
		if got := target(next); got != "/" {
			t.Errorf("next %q: login goes to %q, want /", next, got)
		}
	}
	if got := target("/cli-login?port=5555&state=s"); got != "/cli-login?port=5555&state=s" {
		t.Errorf("the CLI's approval page: login goes to %q", got)
	}
	if res := env.Do(env.Client(), "GET", "/api/v1/auth/next?next=%2F", nil); res.StatusCode != http.StatusUnauthorized {
		t.Errorf("without a session: %d", res.StatusCode)
	}
}

// A single sign-on login started with a next lands there once the provider
// sends the browser back, and never off-site.
func TestSSOLoginNext(t *testing.T) {
	env, p := startSSO(t, nil)
	olga := oidctest.User{Subject: "sub-olga", Username: "olga", Password: "pw-olga", Groups: []string{"dev"}}
	p.AddUser(olga)
	cases := map[string]string{"/cli-login?port=5555&state=s": "/cli-login?port=5555&state=s"}
	for _, next := range offSite {
		cases[next] = "/"
	}
	for next, want := range cases {
		c := env.Client()
		res := p.Login(t, c, env.URL+"/api/v1/auth/oidc/login?next="+url.QueryEscape(next), olga, nil)
		res.Body.Close()
		if res.StatusCode != http.StatusFound || res.Header.Get("Location") != want {
			t.Errorf("next %q: status %d, location %q; want %q", next, res.StatusCode, res.Header.Get("Location"), want)
		}
	}
}
