package proxy_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/codehub-io/codehub/activity"
	"github.com/codehub-io/codehub/api/apitest"
	"github.com/codehub-io/codehub/ports"
	"github.com/codehub-io/codehub/proxy"
	"github.com/codehub-io/codehub/workspace"
)

// portEnv is a server in subdomain mode with workspace ports reached over
// real TCP (apitest.Ports stands in for the agent).
type portEnv struct {
	*apitest.Env
	port string // the server's listening port
}

func newPortEnv(t *testing.T, limit ports.Level) portEnv {
	env := apitest.New(t, apitest.Config{SubdomainBase: "ws.test", MaxPortShare: limit})
	u, _ := url.Parse(env.URL)
	return portEnv{env, u.Port()}
}

// host is the Host of port p of workspace id.
func (e portEnv) host(id string, p int) string {
	return proxy.PortLabel(id, p) + ".ws.test:" + e.port
}

// share sets a port's level through the API and returns the response.
func (e portEnv) share(c *http.Client, id string, p int, level string) apitest.Response {
	return e.Do(c, http.MethodPut, fmt.Sprintf("/api/v1/workspaces/%s/ports/%d", id, p), map[string]string{"share": level})
}

// as sends a GET to a port's host with the cookies of c (as a cookie
// domain covering the dashboard and workspace hosts sends them); c nil
// sends none.
func (e portEnv) as(t *testing.T, c *http.Client, host, path string, headers ...string) apitest.Response {
	t.Helper()
	h := append([]string{"Host", host}, headers...)
	if c != nil {
		h = append(h, cookieHeader(c, e.URL)...)
	}
	return get(t, noRedirects, e.URL+path, h...)
}

var noRedirects = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}

// TestPortShareLevels: a port reaches its owner; another user only once
// it is shared "authenticated", a visitor without a session only once it
// is "public"; what reaches the program carries no credential of
// CodeHub's and the Host the browser used.
func TestPortShareLevels(t *testing.T) {
	env := newPortEnv(t, ports.Public)
	alice := env.CreateUser("alice", false)
	bob := env.CreateUser("bob", false)
	w := runningWorkspace(t, env.Env, alice, "web", startUpstream(t))
	env.Ports.Set(w.ID, 8000, startUpstream(t))
	a, b := env.Login(alice), env.Login(bob)
	host := env.host(w.ID, 8000)
	base, _ := url.Parse(env.URL)
	a.Jar.SetCookies(base, []*http.Cookie{{Name: "theirs", Value: "kept"}, {Name: proxy.CodeServerCookie, Value: "forged"}})

	res := env.as(t, a, host, "/echo?x=1", "Authorization", "Bearer secret", "X-Forwarded-Host", "evil.example")
	if res.StatusCode != http.StatusOK {
		t.Fatalf("owner: %d %s", res.StatusCode, res.Body)
	}
	var e echo
	res.Decode(t, &e)
	h := http.Header(e.Headers)
	if e.Path != "/echo" || e.Query != "x=1" || e.Host != host {
		t.Errorf("the port saw %s ?%s on host %q, want /echo ?x=1 on %q", e.Path, e.Query, e.Host, host)
	}
	if got := h.Get("Cookie"); got != "theirs=kept" {
		t.Errorf("the port got cookies %q, want only theirs=kept", got)
	}
	if got := h.Get("Authorization"); got != "" {
		t.Errorf("the port got Authorization %q", got)
	}
	if got := h.Get("X-Forwarded-Host"); got != host {
		t.Errorf("X-Forwarded-Host = %q, want %q", got, host)
	}
	if got := h.Get("X-Forwarded-Proto"); got != "http" {
		t.Errorf("X-Forwarded-Proto = %q, want http", got)
	}

	if res := env.as(t, b, host, "/echo"); res.StatusCode != http.StatusForbidden {
		t.Fatalf("another user on an owner port: %d, want 403", res.StatusCode)
	}
	if res := env.as(t, nil, host, "/echo"); res.StatusCode != http.StatusUnauthorized {
		t.Fatalf("a visitor on an owner port: %d, want 401", res.StatusCode)
	}
	// A visitor's page load asks the dashboard's host for a session.
	res = env.as(t, nil, host, "/page", "Accept", html)
	want := env.URL + "/w/" + proxy.PortLabel(w.ID, 8000) + proxy.HandoffPath + "?"
	if res.StatusCode != http.StatusFound || !strings.HasPrefix(res.Header.Get("Location"), want) {
		t.Fatalf("a visitor's page load: %d %q %s, want 302 to %s…", res.StatusCode, res.Header.Get("Location"), res.Body, want)
	}

	if res := env.share(a, w.ID, 8000, "authenticated"); res.StatusCode != http.StatusOK {
		t.Fatalf("share authenticated: %d %s", res.StatusCode, res.Body)
	}
	if res := env.as(t, b, host, "/echo"); res.StatusCode != http.StatusOK {
		t.Fatalf("another user on an authenticated port: %d, want 200", res.StatusCode)
	}
	if res := env.as(t, nil, host, "/echo"); res.StatusCode != http.StatusUnauthorized {
		t.Fatalf("a visitor on an authenticated port: %d, want 401", res.StatusCode)
	}
	if res := env.share(a, w.ID, 8000, "public"); res.StatusCode != http.StatusOK {
		t.Fatalf("share public: %d %s", res.StatusCode, res.Body)
	}
	if res := env.as(t, nil, host, "/echo"); res.StatusCode != http.StatusOK {
		t.Fatalf("a visitor on a public port: %d, want 200", res.StatusCode)
	}
	// Another port of the same workspace keeps its own level.
	env.Ports.Set(w.ID, 9000, startUpstream(t))
	if res := env.as(t, nil, env.host(w.ID, 9000), "/echo"); res.StatusCode != http.StatusUnauthorized {
		t.Fatalf("a visitor on another port: %d, want 401", res.StatusCode)
	}
	if res := env.share(a, w.ID, 8000, "owner"); res.StatusCode != http.StatusOK {
		t.Fatalf("share owner: %d %s", res.StatusCode, res.Body)
	}
	if res := env.as(t, b, host, "/echo"); res.StatusCode != http.StatusForbidden {
		t.Fatalf("another user after lowering to owner: %d, want 403", res.StatusCode)
	}
}

// sharedPort is a server capped at public with alice's running workspace,
// whose port 8000 she shares with every logged-in user, and the clients
// of alice and bob.
func sharedPort(t *testing.T) (portEnv, workspace.Workspace, *http.Client, *http.Client) {
	t.Helper()
	env := newPortEnv(t, ports.Public)
	alice := env.CreateUser("alice", false)
	bob := env.CreateUser("bob", false)
	w := runningWorkspace(t, env.Env, alice, "web", startUpstream(t))
	env.Ports.Set(w.ID, 8000, startUpstream(t))
	a, b := env.Login(alice), env.Login(bob)
	if res := env.share(a, w.ID, 8000, "authenticated"); res.StatusCode != http.StatusOK {
		t.Fatalf("share authenticated: %d %s", res.StatusCode, res.Body)
	}
	return env, w, a, b
}

// TestPortKeptConnection: the plain requests that follow one another on a
// connection to a port are served on a connection the proxy took over,
// each judged by the port's share level as it stands: another user's
// connection gets nothing more once the owner lowers the level, and a
// visitor's requests to a public port are served likewise.
func TestPortKeptConnection(t *testing.T) {
	env, w, a, b := sharedPort(t)
	host := env.host(w.ID, 8000)
	taken := func() string {
		metrics := string(get(t, env.Client(), env.URL+"/metrics", "Authorization", "Bearer "+apitest.MetricsToken).Body)
		return grepLines(metrics, "codehub_proxy_connections_taken_total")
	}

	bobs := dialProxy(t, env.URL)
	cookie := cookieHeader(b, env.URL)[1] + "; theirs=kept"
	for i := range 3 {
		res, body, err := bobs.get(host, "/echo", cookie)
		if err != nil || res.StatusCode != http.StatusOK {
			t.Fatalf("bob's request %d: %v %v", i, res, err)
		}
		var e echo
		if err := json.Unmarshal(body, &e); err != nil {
			t.Fatalf("bob's request %d: %v %s", i, err, body)
		}
		if got := strings.Join(e.Headers["Cookie"], " | "); got != "theirs=kept" {
			t.Fatalf("bob's request %d: the port got cookies %q, want only theirs=kept", i, got)
		}
	}
	if got := taken(); !strings.Contains(got, "codehub_proxy_connections_taken_total 1") {
		t.Fatalf("connections taken over after three requests on one:\n%s", got)
	}

	if res := env.share(a, w.ID, 8000, "owner"); res.StatusCode != http.StatusOK {
		t.Fatalf("lower: %d %s", res.StatusCode, res.Body)
	}
	// The connection ends, or its next request is refused.
	if res, body, err := bobs.get(host, "/echo", cookie); err == nil && res.StatusCode != http.StatusForbidden {
		t.Fatalf("bob's request after lowering to owner: %d %s, want 403 or the connection ended", res.StatusCode, body)
	}

	if res := env.share(a, w.ID, 8000, "public"); res.StatusCode != http.StatusOK {
		t.Fatalf("share public: %d %s", res.StatusCode, res.Body)
	}
	visitor := dialProxy(t, env.URL)
	for i := range 3 {
		if res, body, err := visitor.get(host, "/echo", ""); err != nil || res.StatusCode != http.StatusOK {
			t.Fatalf("a visitor's request %d to a public port: %v %s %v", i, res, body, err)
		}
	}
	if got := taken(); !strings.Contains(got, "codehub_proxy_connections_taken_total 2") {
		t.Fatalf("connections taken over after a visitor's three requests on one:\n%s", got)
	}
}

// proxyConn is one client connection to the server, on which requests
// follow one another.
type proxyConn struct {
	c  net.Conn
	br *bufio.Reader
}

func dialProxy(t *testing.T, rawURL string) *proxyConn {
	t.Helper()
	u, _ := url.Parse(rawURL)
	c, err := net.Dial("tcp", u.Host)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &proxyConn{c: c, br: bufio.NewReader(c)}
}

// get sends a GET for path on host with the Cookie header given (none if
// empty) and reads the answer.
func (pc *proxyConn) get(host, path, cookie string) (*http.Response, []byte, error) {
	req, _ := http.NewRequest(http.MethodGet, "http://"+host+path, nil)
	if cookie != "" {
		req.Header.Set("Cookie", cookie)
	}
	if err := req.Write(pc.c); err != nil {
		return nil, nil, err
	}
	res, err := http.ReadResponse(pc.br, req)
	if err != nil {
		return nil, nil, err
	}
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	return res, body, err
}

// TestPortIsolation: a port address reaches the port of the workspace it
// names and nothing else: workspace B's address for a port only A
// listens on does not reach A's program.
func TestPortIsolation(t *testing.T) {
	env := newPortEnv(t, ports.Public)
	alice := env.CreateUser("alice", false)
	wa := runningWorkspace(t, env.Env, alice, "a", startUpstream(t))
	wb := runningWorkspace(t, env.Env, alice, "b", startUpstream(t))
	env.Ports.Set(wa.ID, 8000, startUpstream(t))
	c := env.Login(alice)
	if res := env.as(t, c, env.host(wa.ID, 8000), "/echo"); res.StatusCode != http.StatusOK {
		t.Fatalf("A's port: %d", res.StatusCode)
	}
	res := env.as(t, c, env.host(wb.ID, 8000), "/echo")
	if res.StatusCode != http.StatusBadGateway {
		t.Fatalf("B's address of a port only A listens on: %d %s, want 502", res.StatusCode, res.Body)
	}
}

// TestPortShareAPI: the API sets and lists levels, refuses a level above
// the operator's cap with 400 and bad input likewise, each changing
// nothing, and lets only the owner change them; every change is in the
// audit log.
func TestPortShareAPI(t *testing.T) {
	env := newPortEnv(t, ports.Authenticated)
	alice := env.CreateUser("alice", false)
	bob := env.CreateUser("bob", false)
	admin := env.CreateUser("root", true)
	w := runningWorkspace(t, env.Env, alice, "web", startUpstream(t))
	a, b := env.Login(alice), env.Login(bob)

	res := env.share(a, w.ID, 8000, "authenticated")
	var got struct {
		Port  int    `json:"port"`
		URL   string `json:"url"`
		Share string `json:"share"`
	}
	res.Decode(t, &got)
	if res.StatusCode != http.StatusOK || got.Port != 8000 || got.Share != "authenticated" || got.URL != "http://"+env.host(w.ID, 8000)+"/" {
		t.Fatalf("share authenticated: %d %+v", res.StatusCode, got)
	}
	refusals := []struct {
		name   string
		c      *http.Client
		port   string
		body   any
		status int
		code   string
	}{
		{"above the cap", a, "8000", map[string]string{"share": "public"}, http.StatusBadRequest, "SHARE_ABOVE_CAP"},
		{"unknown level", a, "8000", map[string]string{"share": "everyone"}, http.StatusBadRequest, "INVALID_INPUT"},
		{"no level", a, "8000", map[string]string{}, http.StatusBadRequest, "INVALID_INPUT"},
		{"port 0", a, "0", map[string]string{"share": "owner"}, http.StatusBadRequest, "INVALID_INPUT"},
		{"port 65536", a, "65536", map[string]string{"share": "owner"}, http.StatusBadRequest, "INVALID_INPUT"},
		{"port not a number", a, "http", map[string]string{"share": "owner"}, http.StatusBadRequest, "INVALID_INPUT"},
		{"another user", b, "8000", map[string]string{"share": "owner"}, http.StatusForbidden, "FORBIDDEN"},
	}
	for _, r := range refusals {
		res := env.Do(r.c, http.MethodPut, "/api/v1/workspaces/"+w.ID+"/ports/"+r.port, r.body)
		if res.StatusCode != r.status || res.ErrorCode() != r.code {
			t.Errorf("%s: %d %s, want %d %s", r.name, res.StatusCode, res.Body, r.status, r.code)
		}
	}
	var list struct {
		MaxShare string `json:"max_share"`
		Ports    []struct {
			Port  int    `json:"port"`
			Share string `json:"share"`
		} `json:"ports"`
	}
	res = env.Do(a, http.MethodGet, "/api/v1/workspaces/"+w.ID+"/ports", nil)
	res.Decode(t, &list)
	if res.StatusCode != http.StatusOK || list.MaxShare != "authenticated" || len(list.Ports) != 1 || list.Ports[0].Port != 8000 || list.Ports[0].Share != "authenticated" {
		t.Fatalf("list after the refusals: %d %s", res.StatusCode, res.Body)
	}
	if res := env.Do(b, http.MethodGet, "/api/v1/workspaces/"+w.ID+"/ports", nil); res.StatusCode != http.StatusForbidden {
		t.Fatalf("another user's list: %d, want 403", res.StatusCode)
	}

	var audit struct {
		Events []struct {
			Action  string `json:"action"`
			Outcome string `json:"outcome"`
			Detail  string `json:"detail"`
		} `json:"events"`
	}
	res = env.Do(env.Login(admin), http.MethodGet, "/api/v1/admin/audit?action=port.share", nil)
	res.Decode(t, &audit)
	var seen []string
	for _, ev := range audit.Events {
		seen = append(seen, ev.Outcome+": "+ev.Detail)
	}
	joined := strings.Join(seen, "\n")
	if !strings.Contains(joined, "success: port 8000: owner to authenticated") || !strings.Contains(joined, "failure: port 8000: share: public is wider") {
		t.Fatalf("audit of port.share:\n%s", joined)
	}
}

// TestPortActivityRule: the owner's page loads on a port count as
// activity; another user's requests never do.
func TestPortActivityRule(t *testing.T) {
	env := newPortEnv(t, ports.Public)
	alice := env.CreateUser("alice", false)
	bob := env.CreateUser("bob", false)
	visited := runningWorkspace(t, env.Env, alice, "visited", startUpstream(t))
	used := runningWorkspace(t, env.Env, alice, "used", startUpstream(t))
	env.Ports.Set(visited.ID, 8000, startUpstream(t))
	env.Ports.Set(used.ID, 8000, startUpstream(t))
	a, b := env.Login(alice), env.Login(bob)
	if res := env.share(a, visited.ID, 8000, "authenticated"); res.StatusCode != http.StatusOK {
		t.Fatalf("share: %d", res.StatusCode)
	}
	before := time.Now().Unix()
	for _, res := range []apitest.Response{
		env.as(t, b, env.host(visited.ID, 8000), "/page", pageLoad...),
		env.as(t, b, env.host(visited.ID, 8000), "/page", "Sec-Fetch-Mode", "navigate", "Sec-Fetch-Dest", "document"),
		env.as(t, a, env.host(used.ID, 8000), "/page", pageLoad...),
	} {
		if res.StatusCode != http.StatusOK {
			t.Fatalf("page load: %d %s", res.StatusCode, res.Body)
		}
	}
	post, err := http.NewRequest(http.MethodPost, env.URL+"/form", strings.NewReader("x=1"))
	if err != nil {
		t.Fatal(err)
	}
	post.Host = env.host(visited.ID, 8000)
	post.Header.Set("Cookie", cookieHeader(b, env.URL)[1])
	res, err := noRedirects.Do(post)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusOK {
		t.Fatalf("another user's form post: %d", res.StatusCode)
	}
	env.StopServer()
	ctx := context.Background()
	if score, err := env.Redis.ZScore(ctx, activity.Key, used.ID).Result(); err != nil || int64(score) < before {
		t.Errorf("the owner's page load on a port: activity %v %v, want >= %d", score, err, before)
	}
	if score, err := env.Redis.ZScore(ctx, activity.Key, visited.ID).Result(); err == nil {
		t.Errorf("another user's requests on a port counted as activity (%v)", score)
	}
}

// TestPortStoppedWorkspace: a port of a stopped workspace shows its owner
// the starting page and wakes it, and shows anyone else a plain 503
// without waking it.
func TestPortStoppedWorkspace(t *testing.T) {
	env := newPortEnv(t, ports.Public)
	alice := env.CreateUser("alice", false)
	bob := env.CreateUser("bob", false)
	w := env.CreateWorkspace(alice, "web")
	env.SetPhase(w.ID, workspace.PhaseStandby, workspace.OpNone)
	env.Exec(`UPDATE workspaces SET desired_state = 'STANDBY' WHERE id = $1`, w.ID)
	a, b := env.Login(alice), env.Login(bob)
	if res := env.share(a, w.ID, 8000, "public"); res.StatusCode != http.StatusOK {
		t.Fatalf("share: %d", res.StatusCode)
	}
	host := env.host(w.ID, 8000)
	desired := func() string {
		t.Helper()
		got, err := env.Service.Get(context.Background(), w.ID)
		if err != nil {
			t.Fatal(err)
		}
		return string(got.DesiredState)
	}
	for name, c := range map[string]*http.Client{"another user": b, "a visitor": nil} {
		res := env.as(t, c, host, "/", pageLoad...)
		if res.StatusCode != http.StatusServiceUnavailable || !strings.Contains(string(res.Body), "not available") || strings.Contains(string(res.Body), "web") {
			t.Errorf("%s on a stopped workspace's port: %d %s, want a plain 503", name, res.StatusCode, res.Body)
		}
		if d := desired(); d != "STANDBY" {
			t.Fatalf("%s woke the workspace: desired %s", name, d)
		}
	}
	// An owner whose session has not reached the port's host yet is a
	// visitor there; the page offers the way in, which a visitor may
	// take too: a login, handed over to this host, then the same page.
	res := env.as(t, nil, host, "/app?x=1", pageLoad...)
	signIn := "/_codehub/signin?next=" + url.QueryEscape("/app?x=1")
	if !strings.Contains(string(res.Body), `href="`+strings.ReplaceAll(signIn, "&", "&amp;")+`"`) {
		t.Fatalf("the 503 of a stopped public port offers no login at %s:\n%s", signIn, res.Body)
	}
	res = env.as(t, nil, host, signIn)
	nonce := cookieNamed(res, proxy.HandoffCookie)
	loc, err := url.Parse(res.Header.Get("Location"))
	if res.StatusCode != http.StatusFound || nonce == nil || err != nil ||
		loc.Path != "/w/"+proxy.PortLabel(w.ID, 8000)+proxy.HandoffPath || loc.Query().Get("next") != "/app?x=1" || loc.Query().Get("state") != nonce.Value {
		t.Fatalf("sign-in on a port's host: %d %q, nonce %+v", res.StatusCode, res.Header.Get("Location"), nonce)
	}
	if d := desired(); d != "STANDBY" {
		t.Fatalf("the sign-in woke the workspace: desired %s", d)
	}
	// With a session on the host, the sign-in goes straight on.
	if res := env.as(t, a, host, signIn); res.StatusCode != http.StatusFound || res.Header.Get("Location") != "/app?x=1" {
		t.Fatalf("sign-in with a session: %d %q", res.StatusCode, res.Header.Get("Location"))
	}

	res = env.as(t, a, host, "/", pageLoad...)
	if res.StatusCode != http.StatusServiceUnavailable || !strings.Contains(string(res.Body), "Starting web") {
		t.Fatalf("the owner on a stopped workspace's port: %d %s, want the starting page", res.StatusCode, res.Body)
	}
	if d := desired(); d != "RUNNING" {
		t.Fatalf("the owner's page load left desired %s, want RUNNING", d)
	}
}

// TestPortStreams: WebSocket and server-sent events pass through a port
// address; a socket from another origin is refused on a port that is not
// public.
func TestPortStreams(t *testing.T) {
	env := newPortEnv(t, ports.Public)
	alice := env.CreateUser("alice", false)
	w := runningWorkspace(t, env.Env, alice, "web", startUpstream(t))
	env.Ports.Set(w.ID, 8000, startUpstream(t))
	a := env.Login(alice)
	host := env.host(w.ID, 8000)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	wsURL := "ws" + strings.TrimPrefix(env.URL, "http") + "/ws"
	headers := func(origin string) http.Header {
		h := http.Header{}
		h.Set("Cookie", cookieHeader(a, env.URL)[1])
		h.Set("Origin", origin)
		return h
	}
	_, res, err := websocket.Dial(ctx, wsURL, &websocket.DialOptions{Host: host, HTTPHeader: headers("http://evil.example")})
	if err == nil || res == nil || res.StatusCode != http.StatusForbidden {
		t.Fatalf("a socket from another origin: %v %v, want 403", res, err)
	}
	conn, _, err := websocket.Dial(ctx, wsURL, &websocket.DialOptions{Host: host, HTTPHeader: headers("http://" + host)})
	if err != nil {
		t.Fatalf("a socket through a port address: %v", err)
	}
	defer conn.CloseNow()
	if err := conn.Write(ctx, websocket.MessageText, []byte("hello")); err != nil {
		t.Fatal(err)
	}
	if _, got, err := conn.Read(ctx); err != nil || string(got) != "hello" {
		t.Fatalf("echo: %q %v", got, err)
	}

	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, env.URL+"/sse", nil)
	req.Host = host
	req.Header.Set("Cookie", cookieHeader(a, env.URL)[1])
	req.Header.Set("Accept", "text/event-stream")
	sse, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer sse.Body.Close()
	r := bufio.NewReader(sse.Body)
	if line, err := r.ReadString('\n'); err != nil || line != "data: first\n" {
		t.Fatalf("first event: %q %v (status %d)", line, err, sse.StatusCode)
	}
	if rel := env.as(t, a, host, "/release"); rel.StatusCode != http.StatusOK {
		t.Fatalf("release: %d", rel.StatusCode)
	}
	rest, err := io.ReadAll(r)
	if err != nil || string(rest) != "\ndata: second\n\n" {
		t.Fatalf("rest of the events: %q %v", rest, err)
	}
}

// TestPortShareLoweredCutsSocket: once the owner lowers a port's level,
// another user's open WebSocket to it ends, with a close frame.
func TestPortShareLoweredCutsSocket(t *testing.T) {
	env, w, a, b := sharedPort(t)
	host := env.host(w.ID, 8000)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	h := http.Header{}
	h.Set("Cookie", cookieHeader(b, env.URL)[1])
	h.Set("Origin", "http://"+host)
	conn, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(env.URL, "http")+"/ws", &websocket.DialOptions{Host: host, HTTPHeader: h})
	if err != nil {
		t.Fatalf("bob's socket: %v", err)
	}
	defer conn.CloseNow()
	if err := conn.Write(ctx, websocket.MessageText, []byte("hi")); err != nil {
		t.Fatal(err)
	}
	if _, got, err := conn.Read(ctx); err != nil || string(got) != "hi" {
		t.Fatalf("echo: %q %v", got, err)
	}
	if res := env.share(a, w.ID, 8000, "owner"); res.StatusCode != http.StatusOK {
		t.Fatalf("lower: %d", res.StatusCode)
	}
	if _, _, err := conn.Read(ctx); websocket.CloseStatus(err) != websocket.StatusPolicyViolation {
		t.Fatalf("bob's socket after lowering: %v, want a close frame with status %d", err, websocket.StatusPolicyViolation)
	}
}
