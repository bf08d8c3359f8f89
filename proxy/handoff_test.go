package proxy_test

import (
	"context"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"strings"
	"testing"

	"github.com/codehub-io/codehub/api/apitest"
	"github.com/codehub-io/codehub/proxy"
)

func cookieNamed(res apitest.Response, name string) *http.Cookie {
	for _, ck := range (&http.Response{Header: res.Header}).Cookies() {
		if ck.Name == name {
			return ck
		}
	}
	return nil
}

// browser is a client with a cookie jar of its own that reaches every host
// (the dashboard's and the workspace hosts under ws.test) at the test
// server, keeping each host's cookies apart as a browser does. It follows
// no redirects.
func browser(t *testing.T, env *apitest.Env) *http.Client {
	addr := apitest.HostOf(t, env.URL)
	jar, _ := cookiejar.New(nil)
	var d net.Dialer
	return &http.Client{
		Jar: jar,
		Transport: &http.Transport{DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
			return d.DialContext(ctx, network, addr)
		}},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

// open loads rawURL in the browser as a page.
func open(t *testing.T, b *http.Client, rawURL string) apitest.Response {
	t.Helper()
	return get(t, b, rawURL, "Accept", html)
}

// TestHandoffBoundToBrowser: a handoff ticket is bound to the nonce the
// workspace host gave the browser that asked for it. A ticket minted by
// user A for A's workspace and opened in B's browser is refused and logs B
// in to nothing; in A's own browser it works. A ticket of a user disabled
// meanwhile is refused too.
func TestHandoffBoundToBrowser(t *testing.T) {
	env := apitest.New(t, apitest.Config{SubdomainBase: "ws.test"})
	alice := env.CreateUser("alice", false)
	w := runningWorkspace(t, env, alice, "web", startUpstream(t))
	u, _ := url.Parse(env.URL)
	origin := "http://" + w.ID + ".ws.test:" + u.Port()

	a := browser(t, env)
	if res := env.Do(a, "POST", "/api/v1/login", map[string]string{"username": "alice", "password": apitest.Password}); res.StatusCode != http.StatusOK {
		t.Fatalf("login: %d", res.StatusCode)
	}
	// mint walks A's browser up to the redemption and returns its address.
	mint := func() string {
		t.Helper()
		res := open(t, a, origin+"/echo")
		if res.StatusCode != http.StatusFound {
			t.Fatalf("workspace host without a session: %d", res.StatusCode)
		}
		res = open(t, a, res.Header.Get("Location"))
		loc := res.Header.Get("Location")
		if res.StatusCode != http.StatusSeeOther || !strings.HasPrefix(loc, origin+proxy.HandoffPath+"?") {
			t.Fatalf("ticket: %d %q", res.StatusCode, loc)
		}
		return loc
	}

	link := mint()
	b := browser(t, env)
	res := open(t, b, link)
	if res.StatusCode != http.StatusUnauthorized || cookieNamed(res, proxy.HostSessionCookie) != nil {
		t.Fatalf("A's ticket in B's browser: %d, cookies %q", res.StatusCode, res.Header.Values("Set-Cookie"))
	}
	if res := open(t, b, origin+"/echo"); res.StatusCode != http.StatusFound {
		t.Fatalf("B's browser on A's workspace host after the ticket: %d, want 302 (no session)", res.StatusCode)
	}
	// B's browser holds a nonce of its own now; A's ticket still does not
	// match it.
	if res := open(t, b, link); res.StatusCode != http.StatusUnauthorized {
		t.Fatalf("A's ticket in B's browser with B's nonce: %d", res.StatusCode)
	}

	// In the browser that asked, the same ticket works.
	res = open(t, a, link)
	if res.StatusCode != http.StatusSeeOther || res.Header.Get("Location") != "/echo" {
		t.Fatalf("A's ticket in A's browser: %d %q %s", res.StatusCode, res.Header.Get("Location"), res.Body)
	}
	if res := open(t, a, origin+"/echo"); res.StatusCode != http.StatusOK {
		t.Fatalf("A's browser on its workspace host: %d", res.StatusCode)
	}

	// A ticket of a user disabled before it is redeemed opens nothing.
	other := browser(t, env)
	if res := env.Do(other, "POST", "/api/v1/login", map[string]string{"username": "alice", "password": apitest.Password}); res.StatusCode != http.StatusOK {
		t.Fatalf("second login: %d", res.StatusCode)
	}
	a = other
	link = mint()
	root := env.CreateUser("root", true)
	if res := env.Do(env.Login(root), "PATCH", "/api/v1/admin/users/"+alice.ID, map[string]any{"disabled": true}); res.StatusCode != http.StatusOK {
		t.Fatalf("disable alice: %d", res.StatusCode)
	}
	if res := open(t, a, link); res.StatusCode != http.StatusUnauthorized || cookieNamed(res, proxy.HostSessionCookie) != nil {
		t.Fatalf("a disabled user's ticket: %d", res.StatusCode)
	}
}
