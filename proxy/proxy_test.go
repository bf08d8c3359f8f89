package proxy_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/codehub-io/codehub/activity"
	"github.com/codehub-io/codehub/api"
	"github.com/codehub-io/codehub/api/apitest"
	"github.com/codehub-io/codehub/proxy"
	"github.com/codehub-io/codehub/workspace"
)

var upstreamBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "codehub-upstream")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	upstreamBin = filepath.Join(dir, "upstream")
	build := exec.Command("go", "build", "-o", upstreamBin, "./testdata/upstream")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "build test upstream:", err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// startUpstream runs the upstream process and returns its host:port.
func startUpstream(t testing.TB) string {
	t.Helper()
	cmd := command(upstreamBin)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("start upstream: %v", err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatalf("read upstream address: %v", err)
	}
	return strings.TrimSpace(line)
}

type echo struct {
	Method  string              `json:"method"`
	Path    string              `json:"path"`
	RawPath string              `json:"raw_path"`
	Query   string              `json:"query"`
	Host    string              `json:"host"`
	Headers map[string][]string `json:"headers"`
}

// runningWorkspace creates a workspace of u that the "controller" reports
// RUNNING with the upstream at addr.
func runningWorkspace(t testing.TB, env *apitest.Env, u apitest.User, name, addr string) workspace.Workspace {
	t.Helper()
	w := env.CreateWorkspace(u, name)
	env.SetPhase(w.ID, workspace.PhaseRunning, workspace.OpNone)
	env.Upstreams.Set(w.ID, addr)
	return w
}

func get(t testing.TB, c *http.Client, rawURL string, headers ...string) apitest.Response {
	t.Helper()
	req, err := http.NewRequest("GET", rawURL, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		if headers[i] == "Host" {
			req.Host = headers[i+1]
			continue
		}
		req.Header.Add(headers[i], headers[i+1])
	}
	res, err := c.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", rawURL, err)
	}
	defer res.Body.Close()
	body, _ := io.ReadAll(res.Body)
	return apitest.Response{StatusCode: res.StatusCode, Header: res.Header, Body: body}
}

const html = "text/html,application/xhtml+xml"

// pageLoad is what a browser sends with a page load on a plain-http host
// other than localhost, where it sends no Fetch Metadata.
var pageLoad = []string{"Accept", html, "Upgrade-Insecure-Requests", "1"}

// upstreamToken stands in for the deployment's upstream tokens.
func upstreamToken(id, run string) string { return "token-of-" + id + "-" + run }

func TestProxyHTTP(t *testing.T) {
	env := apitest.New(t, apitest.Config{UpstreamToken: upstreamToken})
	alice := env.CreateUser("alice", false)
	w := runningWorkspace(t, env, alice, "web", startUpstream(t))
	// The token sent is the one of the workspace's current run.
	env.Exec(`UPDATE workspaces SET run_id = 'run7' WHERE id = $1`, w.ID)
	c := env.Login(alice)
	base, _ := url.Parse(env.URL)
	// A code-server cookie from the browser is never the one forwarded.
	c.Jar.SetCookies(base, []*http.Cookie{{Name: "theirs", Value: "kept"}, {Name: proxy.CodeServerCookie, Value: "forged"}})

	res := get(t, c, env.URL+"/w/"+w.ID+"/echo/a%2Fb?x=1&y=2",
		"Authorization", "Bearer secret", "X-Forwarded-For", "6.6.6.6",
		"X-Forwarded-Host", "evil.example", "X-Forwarded-Proto", "https")
	if res.StatusCode != 200 {
		t.Fatalf("proxied GET: %d %s", res.StatusCode, res.Body)
	}
	var e echo
	res.Decode(t, &e)
	h := http.Header(e.Headers)
	checks := []struct{ what, got, want string }{
		{"path", e.Path, "/echo/a/b"},
		{"raw path", e.RawPath, "/echo/a%2Fb"},
		{"query", e.Query, "x=1&y=2"},
		{"host", e.Host, base.Host},
		{"cookie", strings.Join(h.Values("Cookie"), " | "), "theirs=kept; code-server-session=" + upstreamToken(w.ID, "run7")},
		{"authorization", h.Get("Authorization"), ""},
		{"x-forwarded-for", h.Get("X-Forwarded-For"), "127.0.0.1"},
		{"x-forwarded-host", h.Get("X-Forwarded-Host"), base.Host},
		{"x-forwarded-proto", h.Get("X-Forwarded-Proto"), "http"},
		{"x-forwarded-prefix", h.Get("X-Forwarded-Prefix"), "/w/" + w.ID},
	}
	for _, ck := range checks {
		if ck.got != ck.want {
			t.Errorf("upstream saw %s %q, want %q", ck.what, ck.got, ck.want)
		}
	}

	res = get(t, c, env.URL+"/w/"+w.ID+"?q=1")
	if res.StatusCode != http.StatusPermanentRedirect || res.Header.Get("Location") != "/w/"+w.ID+"/?q=1" {
		t.Fatalf("workspace root without slash: %d %q", res.StatusCode, res.Header.Get("Location"))
	}

	res = get(t, c, env.URL+"/w/"+w.ID+"/set-cookie")
	cookies := res.Header.Values("Set-Cookie")
	if len(cookies) != 1 || !strings.HasPrefix(cookies[0], "theirs=1") {
		t.Fatalf("Set-Cookie from the workspace: %q", cookies)
	}

	req, _ := http.NewRequest("POST", env.URL+"/w/"+w.ID+"/submit", strings.NewReader("a=1"))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	pres, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer pres.Body.Close()
	if err := json.NewDecoder(pres.Body).Decode(&e); err != nil || pres.StatusCode != 200 || e.Method != "POST" || e.Path != "/submit" {
		t.Fatalf("proxied POST: %d %+v %v", pres.StatusCode, e, err)
	}
	metrics := string(get(t, c, env.URL+"/metrics", "Authorization", "Bearer "+apitest.MetricsToken).Body)
	for _, want := range []string{`codehub_proxy_requests_total{code="200"} 3`, `codehub_proxy_requests_total{code="308"} 1`, "codehub_proxy_request_duration_seconds_count 4"} {
		if !strings.Contains(metrics, want) {
			t.Errorf("metrics lack %q", want)
		}
	}
}

func TestProxyTrustedForwarding(t *testing.T) {
	env := apitest.New(t, apitest.Config{TrustedProxies: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}})
	alice := env.CreateUser("alice", false)
	w := runningWorkspace(t, env, alice, "web", startUpstream(t))
	c := env.Login(alice)
	res := get(t, c, env.URL+"/w/"+w.ID+"/", "X-Forwarded-For", "203.0.113.7",
		"X-Forwarded-Proto", "https", "X-Forwarded-Host", "code.example.com")
	var e echo
	res.Decode(t, &e)
	h := http.Header(e.Headers)
	if h.Get("X-Forwarded-For") != "203.0.113.7, 127.0.0.1" || h.Get("X-Forwarded-Proto") != "https" || h.Get("X-Forwarded-Host") != "code.example.com" {
		t.Fatalf("behind a trusted proxy the upstream saw %v", h)
	}
}

func TestProxyStreaming(t *testing.T) {
	env := apitest.New(t, apitest.Config{})
	alice := env.CreateUser("alice", false)
	w := runningWorkspace(t, env, alice, "web", startUpstream(t))
	c := env.Login(alice)
	res, err := c.Get(env.URL + "/w/" + w.ID + "/stream")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	r := bufio.NewReader(res.Body)
	// The first part arrives while the upstream is still holding the
	// response open: the proxy does not buffer.
	if line, err := r.ReadString('\n'); err != nil || line != "first\n" {
		t.Fatalf("first part: %q %v", line, err)
	}
	if rel := get(t, c, env.URL+"/w/"+w.ID+"/release"); rel.StatusCode != 200 {
		t.Fatalf("release: %d", rel.StatusCode)
	}
	rest, err := io.ReadAll(r)
	if err != nil || string(rest) != "second\n" {
		t.Fatalf("rest of the stream: %q %v", rest, err)
	}
}

// TestProxyFullDuplex: a workspace that answers before it has read the
// request's body (a dev server reporting an upload's progress) still gets
// the whole body, including what the client sends after the answer began.
func TestProxyFullDuplex(t *testing.T) {
	env := apitest.New(t, apitest.Config{})
	alice := env.CreateUser("alice", false)
	w := runningWorkspace(t, env, alice, "web", startUpstream(t))
	c := env.Login(alice)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	body, send := io.Pipe()
	// The client's transport waits for its body to end before it gives up.
	stop := context.AfterFunc(ctx, func() { send.CloseWithError(ctx.Err()) })
	defer stop()
	req, err := http.NewRequestWithContext(ctx, "POST", env.URL+"/w/"+w.ID+"/duplex", body)
	if err != nil {
		t.Fatal(err)
	}
	half := make([]byte, 32<<10)
	go func() {
		_, _ = send.Write(half)
	}()
	res, err := c.Do(req)
	if err != nil {
		t.Fatalf("post: %v", err)
	}
	defer res.Body.Close()
	r := bufio.NewReader(res.Body)
	if line, err := r.ReadString('\n'); err != nil || line != "started\n" {
		t.Fatalf("first line: %q %v", line, err)
	}
	if _, err := send.Write(half); err != nil {
		t.Fatalf("send the rest: %v", err)
	}
	send.Close()
	rest, err := io.ReadAll(r)
	if want := fmt.Sprintf("size %d\n", 2*len(half)); err != nil || string(rest) != want {
		t.Fatalf("answer: %q %v, want %q", rest, err, want)
	}
}

func dialHeaders(t testing.TB, c *http.Client, rawURL, origin string) http.Header {
	u, _ := url.Parse(rawURL)
	h := http.Header{}
	for _, ck := range c.Jar.Cookies(u) {
		h.Add("Cookie", ck.Name+"="+ck.Value)
	}
	if origin != "" {
		h.Set("Origin", origin)
	}
	return h
}

func TestProxyWebSocket(t *testing.T) {
	env := apitest.New(t, apitest.Config{})
	alice := env.CreateUser("alice", false)
	w := runningWorkspace(t, env, alice, "web", startUpstream(t))
	c := env.Login(alice)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	wsURL := "ws" + strings.TrimPrefix(env.URL, "http") + "/w/" + w.ID + "/ws"

	_, res, err := websocket.Dial(ctx, wsURL, &websocket.DialOptions{HTTPHeader: dialHeaders(t, c, env.URL, "http://evil.example")})
	if err == nil || res == nil || res.StatusCode != http.StatusForbidden {
		t.Fatalf("foreign-origin upgrade: %v %v", res, err)
	}

	env.Exec(`UPDATE workspaces SET last_access_at = now() - interval '1 hour'`)
	before := time.Now().Unix()
	conn, _, err := websocket.Dial(ctx, wsURL, &websocket.DialOptions{HTTPHeader: dialHeaders(t, c, env.URL, env.URL)})
	if err != nil {
		t.Fatalf("dial through the proxy: %v", err)
	}
	defer conn.CloseNow()
	for i := range 20 {
		msg := fmt.Sprintf("message %d", i)
		if err := conn.Write(ctx, websocket.MessageText, []byte(msg)); err != nil {
			t.Fatal(err)
		}
		_, got, err := conn.Read(ctx)
		if err != nil || string(got) != msg {
			t.Fatalf("echo %d: %q %v", i, got, err)
		}
	}
	conn.Close(websocket.StatusNormalClosure, "")

	// Stopping the server flushes the in-memory marks to the ZSET.
	env.StopServer()
	score, err := env.Redis.ZScore(ctx, activity.Key, w.ID).Result()
	if err != nil || int64(score) < before {
		t.Fatalf("activity of %s in %s: %v %v (want >= %d)", w.ID, activity.Key, score, err, before)
	}
}

func TestProxyAuthorization(t *testing.T) {
	env := apitest.New(t, apitest.Config{})
	alice := env.CreateUser("alice", false)
	mallory := env.CreateUser("mallory", false)
	w := runningWorkspace(t, env, alice, "web", startUpstream(t))
	anon := env.Client()
	path := "/w/" + w.ID + "/some/page?x=1"

	if res := get(t, anon, env.URL+path); res.StatusCode != 401 || res.ErrorCode() != "UNAUTHENTICATED" {
		t.Fatalf("anonymous JSON: %d %s", res.StatusCode, res.Body)
	}
	res := get(t, anon, env.URL+path, "Accept", html)
	if res.StatusCode != http.StatusFound || res.Header.Get("Location") != env.URL+"/login?next="+url.QueryEscape(path) {
		t.Fatalf("anonymous browser: %d %q", res.StatusCode, res.Header.Get("Location"))
	}
	m := env.Login(mallory)
	if res := get(t, m, env.URL+path); res.StatusCode != 403 || res.ErrorCode() != "FORBIDDEN" {
		t.Fatalf("another user's workspace: %d %s", res.StatusCode, res.Body)
	}
	if res := get(t, m, env.URL+path, "Accept", html); res.StatusCode != 403 || !strings.Contains(string(res.Body), "belongs to another user") {
		t.Fatalf("another user's workspace (browser): %d", res.StatusCode)
	}
	// Warm the route cache as the owner: the owner check still holds.
	a := env.Login(alice)
	if res := get(t, a, env.URL+path); res.StatusCode != 200 {
		t.Fatalf("owner: %d", res.StatusCode)
	}
	if res := get(t, m, env.URL+path); res.StatusCode != 403 {
		t.Fatalf("another user after the owner: %d", res.StatusCode)
	}
	for _, p := range []string{"/w/01jb3x7k9q2m5n8p4r6s0t1v2w/", "/w/NOT-AN-ID/", "/w/"} {
		if res := get(t, a, env.URL+p); res.StatusCode != 404 {
			t.Fatalf("%s: %d", p, res.StatusCode)
		}
	}
	if err := env.Service.Delete(context.Background(), w.ID); err != nil {
		t.Fatal(err)
	}
	// A replica that has not cached the route answers from the table.
	fresh := env.NewReplica(apitest.Config{})
	req, _ := http.NewRequest("GET", env.URL+path, nil)
	for _, ck := range a.Jar.Cookies(req.URL) {
		req.AddCookie(ck)
	}
	rec := httptest.NewRecorder()
	fresh.ServeHTTP(rec, req)
	if rec.Code != 404 {
		t.Fatalf("deleted workspace: %d", rec.Code)
	}
}

func TestProxyUpstreamDown(t *testing.T) {
	env := apitest.New(t, apitest.Config{})
	alice := env.CreateUser("alice", false)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := ln.Addr().String()
	ln.Close()
	w := runningWorkspace(t, env, alice, "down", closed)
	c := env.Login(alice)
	if res := get(t, c, env.URL+"/w/"+w.ID+"/"); res.StatusCode != 502 || res.ErrorCode() != "UPSTREAM_UNAVAILABLE" {
		t.Fatalf("refused upstream: %d %s", res.StatusCode, res.Body)
	}
	res := get(t, c, env.URL+"/w/"+w.ID+"/", "Accept", html)
	if res.StatusCode != 502 || !strings.Contains(string(res.Body), "Workspace not reachable") || !strings.HasPrefix(res.Header.Get("Content-Type"), "text/html") {
		t.Fatalf("refused upstream (browser): %d %s", res.StatusCode, res.Body)
	}
	unresolved := env.CreateWorkspace(alice, "unresolved")
	env.SetPhase(unresolved.ID, workspace.PhaseRunning, workspace.OpNone)
	if res := get(t, c, env.URL+"/w/"+unresolved.ID+"/"); res.StatusCode != 502 {
		t.Fatalf("no upstream: %d %s", res.StatusCode, res.Body)
	}
}

func TestProxyAutoWake(t *testing.T) {
	env := apitest.New(t, apitest.Config{})
	alice := env.CreateUser("alice", false)
	addr := startUpstream(t)
	w := env.CreateWorkspace(alice, "sleepy")
	if _, err := env.Service.SetDesired(context.Background(), w.ID, workspace.DesiredStandby, workspace.CauseIdle); err != nil {
		t.Fatal(err)
	}
	env.SetPhase(w.ID, workspace.PhaseStandby, workspace.OpNone)
	env.Exec(`UPDATE workspaces SET last_access_at = now() - interval '1 hour' WHERE id = $1`, w.ID)
	env.Upstreams.Set(w.ID, addr)
	c := env.Login(alice)

	// A loaded page's own requests (a service worker update check) must not
	// undo the stop: only a user opening the workspace wakes it.
	bg := get(t, c, env.URL+"/w/"+w.ID+"/sw.js", "Sec-Fetch-Mode", "same-origin", "Sec-Fetch-Dest", "serviceworker")
	if bg.StatusCode != 503 || env.Workspace(w.ID).DesiredState != workspace.DesiredStandby {
		t.Fatalf("background request: %d, desired %s; want 503 and still STANDBY", bg.StatusCode, env.Workspace(w.ID).DesiredState)
	}

	res := get(t, c, env.URL+"/w/"+w.ID+"/", "Accept", html, "Sec-Fetch-Mode", "navigate", "Sec-Fetch-Dest", "document")
	if res.StatusCode != 503 || !strings.Contains(string(res.Body), "Starting sleepy") || !strings.Contains(string(res.Body), "location.reload") {
		t.Fatalf("standby workspace: %d %s", res.StatusCode, res.Body)
	}
	// The page says why it was not running.
	if !strings.Contains(string(res.Body), "minutes without use, less than a minute ago.") {
		t.Errorf("the starting page does not say why it had stopped: %s", res.Body)
	}
	row := env.Workspace(w.ID)
	if row.DesiredState != workspace.DesiredRunning || time.Since(row.LastAccessAt) > 10*time.Minute {
		t.Fatalf("after auto-wake: desired %s, last access %v", row.DesiredState, row.LastAccessAt)
	}
	// The page's poll gets JSON while the controller works.
	env.SetPhase(w.ID, workspace.PhaseStandby, workspace.OpStarting)
	if res := get(t, c, env.URL+"/w/"+w.ID+"/", "Accept", "application/json"); res.StatusCode != 503 || res.ErrorCode() != "STARTING" || res.Header.Get("Retry-After") == "" {
		t.Fatalf("starting: %d %s", res.StatusCode, res.Body)
	}
	env.SetPhase(w.ID, workspace.PhaseRunning, workspace.OpNone)
	if res := get(t, c, env.URL+"/w/"+w.ID+"/"); res.StatusCode != 200 {
		t.Fatalf("once running: %d %s", res.StatusCode, res.Body)
	}
}

// TestProxyWakeSaysWhy: opening a workspace its owner stopped wakes it,
// and the starting page says who had stopped it.
func TestProxyWakeSaysWhy(t *testing.T) {
	env := apitest.New(t, apitest.Config{})
	alice := env.CreateUser("alice", false)
	c := env.Login(alice)
	w := env.CreateWorkspace(alice, "stopped")
	if _, err := env.Service.SetDesired(context.Background(), w.ID, workspace.DesiredStandby, workspace.CauseUser); err != nil {
		t.Fatal(err)
	}
	env.SetPhase(w.ID, workspace.PhaseStandby, workspace.OpNone)
	res := get(t, c, env.URL+"/w/"+w.ID+"/", pageLoad...)
	if body := string(res.Body); res.StatusCode != 503 || !strings.Contains(body, "Starting stopped") ||
		!strings.Contains(body, `<p class="detail">You stopped it less than a minute ago.</p>`) {
		t.Fatalf("page load: %d %s", res.StatusCode, body)
	}
	if got := env.Workspace(w.ID).DesiredState; got != workspace.DesiredRunning {
		t.Fatalf("desired after the page load: %s", got)
	}
}

func TestProxyLimitPage(t *testing.T) {
	env := apitest.New(t, apitest.Config{MaxRunningPerUser: 1})
	alice := env.CreateUser("alice", false)
	sleepy := env.CreateWorkspace(alice, "sleepy")
	if _, err := env.Service.SetDesired(context.Background(), sleepy.ID, workspace.DesiredStandby, workspace.CauseIdle); err != nil {
		t.Fatal(err)
	}
	env.SetPhase(sleepy.ID, workspace.PhaseStandby, workspace.OpNone)
	busy := env.CreateWorkspace(alice, "busy")
	c := env.Login(alice)
	res := get(t, c, env.URL+"/w/"+sleepy.ID+"/", pageLoad...)
	body := string(res.Body)
	if res.StatusCode != 429 || !strings.Contains(body, ">busy</a>") || !strings.Contains(body, env.URL+"/w/"+busy.ID+"/") {
		t.Fatalf("limit page: %d %s", res.StatusCode, body)
	}
	// Each running workspace has a Stop that the dashboard carries out.
	stop := env.URL + "/?open=" + sleepy.ID + "&amp;stop=" + busy.ID
	if !strings.Contains(body, `href="`+stop+`">Stop…</a>`) {
		t.Fatalf("limit page offers no stop of busy (%s): %s", stop, body)
	}
	// A client that is not a browser opening a page does not wake it.
	if res := get(t, c, env.URL+"/w/"+sleepy.ID+"/"); res.StatusCode != 503 || res.ErrorCode() != "NOT_STARTED" {
		t.Fatalf("JSON client: %d %s", res.StatusCode, res.Body)
	}
	if got := env.Workspace(sleepy.ID).DesiredState; got != workspace.DesiredStandby {
		t.Fatalf("refused wake changed desired state to %s", got)
	}
}

func TestProxyStatusPages(t *testing.T) {
	env := apitest.New(t, apitest.Config{MaxRunningPerUser: 10})
	alice := env.CreateUser("alice", false)
	c := env.Login(alice)
	ctx := context.Background()

	archived := env.CreateWorkspace(alice, "archived")
	if _, err := env.Service.SetDesired(ctx, archived.ID, workspace.DesiredArchived, workspace.CauseUser); err != nil {
		t.Fatal(err)
	}
	env.SetPhase(archived.ID, workspace.PhaseArchived, workspace.OpNone)
	pending := env.CreateWorkspace(alice, "pending")
	if _, err := env.Service.SetDesired(ctx, pending.ID, workspace.DesiredStandby, workspace.CauseUser); err != nil {
		t.Fatal(err)
	}
	failed := env.CreateWorkspace(alice, "failed")
	env.Exec(`UPDATE workspaces SET phase = 'ERROR', error_reason = 'ImagePullFailed', error_message = 'manifest unknown' WHERE id = $1`, failed.ID)
	stopping := env.CreateWorkspace(alice, "stopping")
	env.SetPhase(stopping.ID, workspace.PhaseRunning, workspace.OpStopping)
	// A start that failed and waits for its retry is still on its way up,
	// and says what went wrong.
	retrying := env.CreateWorkspace(alice, "retrying")
	env.Exec(`UPDATE workspaces SET phase = 'STANDBY', error_reason = 'StartFailed', error_count = 1,
		error_message = 'exited with code 1: Cannot find module', next_attempt_at = now() + interval '30 seconds' WHERE id = $1`, retrying.ID)
	// A home on a node that is down: opening it waits for the node, and
	// the page says which one.
	away := env.CreateWorkspace(alice, "away")
	env.Exec(`UPDATE workspaces SET phase = 'PENDING', conditions = jsonb_build_object('storage.volume_ready',
		jsonb_build_object('status', 'False', 'reason', 'NodeDown', 'message', 'unavailable: node node-a is down', 'node', 'node-a',
			'last_transition_time', now())) WHERE id = $1`, away.ID)
	// A running workspace whose node is evacuated: its users see it move.
	moving := env.CreateWorkspace(alice, "moving")
	env.Exec(`UPDATE workspaces SET phase = 'RUNNING', operation = 'STOPPING', conditions = jsonb_build_object('storage.moving',
		jsonb_build_object('status', 'True', 'reason', 'Leaving', 'message', 'moving to another machine: leaving node node-a',
			'last_transition_time', now())) WHERE id = $1`, moving.ID)
	// A running workspace on a drained node: the drain stopped its
	// program and its home is being saved. Its users see it move, not a
	// bad gateway, and not the node's unavailability.
	saving := env.CreateWorkspace(alice, "saving")
	env.Exec(`UPDATE workspaces SET phase = 'RUNNING', conditions = jsonb_build_object(
		'storage.moving', jsonb_build_object('status', 'True', 'reason', 'Leaving',
			'message', 'moving to another machine: saving the home on node node-a', 'last_transition_time', now()),
		'storage.volume_ready', jsonb_build_object('status', 'True', 'reason', 'NodeIneligible', 'node', 'node-a',
			'message', 'node node-a is drained: the home is being archived as its program stopped', 'last_transition_time', now()))
		WHERE id = $1`, saving.ID)

	for _, tc := range []struct {
		id, code, text string
	}{
		{archived.ID, "ARCHIVED", "Restore and start"},
		{pending.ID, "NOT_STARTED", "has not been started yet"},
		{failed.ID, "WORKSPACE_ERROR", "ImagePullFailed"},
		{stopping.ID, "STARTING", "Starting stopping"},
		{retrying.ID, "STARTING", "Cannot find module"},
		{away.ID, "UNAVAILABLE", "unavailable: node node-a is down"},
		{moving.ID, "STARTING", "moving to another machine: leaving node node-a"},
		{saving.ID, "STARTING", "moving to another machine: saving the home on node node-a"},
	} {
		if res := get(t, c, env.URL+"/w/"+tc.id+"/"); res.StatusCode != 503 || res.ErrorCode() != tc.code {
			t.Errorf("%s (JSON): %d %s", tc.code, res.StatusCode, res.Body)
		}
		if res := get(t, c, env.URL+"/w/"+tc.id+"/", "Accept", html); res.StatusCode != 503 || !strings.Contains(string(res.Body), tc.text) {
			t.Errorf("%s (browser): %d %s", tc.code, res.StatusCode, res.Body)
		}
	}
	res := get(t, c, env.URL+"/w/"+retrying.ID+"/", "Accept", html)
	for _, want := range []string{"Attempt 1 of 3 failed while starting the program: StartFailed", "Next attempt at <time datetime="} {
		if !strings.Contains(string(res.Body), want) {
			t.Errorf("retrying start page lacks %q: %s", want, res.Body)
		}
	}
	if res := get(t, c, env.URL+"/w/"+retrying.ID+"/"); !strings.Contains(res.ErrorCode()+string(res.Body), "Attempt 1 of 3 failed") {
		t.Errorf("retrying start (JSON): %s", res.Body)
	}

	post := func(origin string) *http.Response {
		req, _ := http.NewRequest("POST", env.URL+"/w/"+archived.ID+"/", strings.NewReader("codehub_action=start"))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("Accept", html)
		if origin != "" {
			req.Header.Set("Origin", origin)
		}
		res, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		return res
	}
	if res := post("http://evil.example"); res.StatusCode != 503 {
		t.Fatalf("cross-origin restore: %d", res.StatusCode)
	}
	if got := env.Workspace(archived.ID).DesiredState; got != workspace.DesiredArchived {
		t.Fatalf("cross-origin post changed desired state to %s", got)
	}
	if res := post(env.URL); res.StatusCode != http.StatusSeeOther {
		t.Fatalf("restore: %d", res.StatusCode)
	}
	if got := env.Workspace(archived.ID).DesiredState; got != workspace.DesiredRunning {
		t.Fatalf("after restore desired state is %s", got)
	}
}

func TestProxySubdomain(t *testing.T) {
	env := apitest.New(t, apitest.Config{SubdomainBase: "ws.test"})
	alice := env.CreateUser("alice", false)
	w := runningWorkspace(t, env, alice, "web", startUpstream(t))
	c := env.Login(alice)
	host := w.ID + ".ws.test"
	// The session cookie of the test's jar belongs to 127.0.0.1; send it
	// to the workspace host as a cookie domain covering both would.
	// Forwarding headers of a client that is no trusted proxy never
	// reach the workspace, including those the proxy sets only in path
	// mode or not at all.
	res := get(t, c, env.URL+"/echo?x=1", append([]string{"Host", host,
		"X-Forwarded-Prefix", "/elsewhere", "X-Forwarded-Port", "8443"}, cookieHeader(c, env.URL)...)...)
	var e echo
	res.Decode(t, &e)
	h := http.Header(e.Headers)
	if res.StatusCode != 200 || e.Path != "/echo" || e.Host != host || h.Get("Cookie") != "" {
		t.Fatalf("subdomain request: %d %+v", res.StatusCode, e)
	}
	for _, name := range []string{"X-Forwarded-Prefix", "X-Forwarded-Port"} {
		if v := h.Values(name); len(v) > 0 {
			t.Errorf("the workspace saw the client's %s %q", name, v)
		}
	}
	var created struct {
		URL string `json:"url"`
	}
	env.Do(c, "GET", "/api/v1/workspaces/"+w.ID, nil).Decode(t, &created)
	// The workspace hosts are served by the dashboard's listener: same port.
	u, _ := url.Parse(env.URL)
	if created.URL != "http://"+host+":"+u.Port()+"/" {
		t.Fatalf("url in subdomain mode: %q", created.URL)
	}
}

func cookieHeader(c *http.Client, rawURL string) []string {
	u, _ := url.Parse(rawURL)
	var parts []string
	for _, ck := range c.Jar.Cookies(u) {
		parts = append(parts, ck.Name+"="+ck.Value)
	}
	return []string{"Cookie", strings.Join(parts, "; ")}
}

// stoppedBehindCachedRoute is a workspace of alice's that stopped (desired
// and phase STANDBY) while the proxy still holds its route, to an upstream
// that is gone; c is alice's client.
func stoppedBehindCachedRoute(t *testing.T) (env *apitest.Env, c *http.Client, w workspace.Workspace) {
	t.Helper()
	env = apitest.New(t, apitest.Config{RouteTTL: time.Hour})
	alice := env.CreateUser("alice", false)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "ok")
	}))
	w = runningWorkspace(t, env, alice, "web", strings.TrimPrefix(up.URL, "http://"))
	c = env.Login(alice)
	if res := get(t, c, env.URL+"/w/"+w.ID+"/"); res.StatusCode != 200 {
		t.Fatalf("running: %d %s", res.StatusCode, res.Body)
	}
	up.Close()
	env.SetPhase(w.ID, workspace.PhaseStandby, workspace.OpNone)
	env.Exec(`UPDATE workspaces SET desired_state = 'STANDBY', desired_by = 'idle', desired_at = now() WHERE id = $1`, w.ID)
	return env, c, w
}

// TestProxyStaleRoute: a workspace stops while its route is still cached;
// the next request finds the upstream gone and is answered from the
// workspace's current state instead of with a 502.
func TestProxyStaleRoute(t *testing.T) {
	env, c, w := stoppedBehindCachedRoute(t)

	// A background request learns the workspace's state (and, not being
	// a navigation, does not wake it), not that it failed to answer.
	res := get(t, c, env.URL+"/w/"+w.ID+"/x", "Sec-Fetch-Mode", "cors", "Sec-Fetch-Dest", "empty")
	if res.StatusCode != http.StatusServiceUnavailable || !strings.Contains(string(res.Body), proxy.CodeNotStarted) {
		t.Fatalf("background request after the stop: %d %s", res.StatusCode, res.Body)
	}
	if got := env.Workspace(w.ID).DesiredState; got != workspace.DesiredStandby {
		t.Fatalf("a background request changed the desired state to %s", got)
	}
	// A browser opening it wakes it.
	res = get(t, c, env.URL+"/w/"+w.ID+"/", pageLoad...)
	if res.StatusCode != http.StatusServiceUnavailable || !strings.Contains(string(res.Body), "Starting") {
		t.Fatalf("navigation after the stop: %d %s", res.StatusCode, res.Body)
	}
	if got := env.Workspace(w.ID).DesiredState; got != workspace.DesiredRunning {
		t.Errorf("desired state after opening it: %s", got)
	}
	// Another user's request for it is still refused.
	bob := env.CreateUser("bob", false)
	if res := get(t, env.Login(bob), env.URL+"/w/"+w.ID+"/"); res.StatusCode != http.StatusForbidden {
		t.Errorf("other user: %d", res.StatusCode)
	}
}

// TestProxySubdomainOnly: in subdomain mode a workspace is never served
// under /w/{id}/ of the dashboard's host, where its pages would run with
// the dashboard's origin and could call the API (or open the user's other
// workspaces) as the user. Old links are sent to the workspace's own host.
func TestProxySubdomainOnly(t *testing.T) {
	env := apitest.New(t, apitest.Config{SubdomainBase: "ws.test"})
	alice := env.CreateUser("alice", false)
	w := runningWorkspace(t, env, alice, "web", startUpstream(t))
	c := env.Login(alice)
	c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	u, _ := url.Parse(env.URL)
	// A form post goes to the workspace's host as it is.
	req, _ := http.NewRequest(http.MethodPost, env.URL+"/w/"+w.ID+"/echo/a%2Fb?x=1", nil)
	res, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if want := "http://" + w.ID + ".ws.test:" + u.Port() + "/echo/a%2Fb?x=1"; res.StatusCode != http.StatusTemporaryRedirect || res.Header.Get("Location") != want {
		t.Fatalf("POST /w/{id}/ on the dashboard's host: %d %q, want 307 %q", res.StatusCode, res.Header.Get("Location"), want)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	wsURL := "ws" + strings.TrimPrefix(env.URL, "http") + "/w/" + w.ID + "/ws"
	_, wres, err := websocket.Dial(ctx, wsURL, &websocket.DialOptions{HTTPClient: c, HTTPHeader: dialHeaders(t, c, env.URL, env.URL)})
	if err == nil || wres == nil || wres.StatusCode == http.StatusSwitchingProtocols {
		t.Fatalf("WebSocket under /w/{id}/ on the dashboard's host: %v %v", wres, err)
	}
}

// TestProxySubdomainHandoff: in subdomain mode the dashboard's session
// cookie stays on the dashboard's host. Opening /w/{id}/… there hands the
// session over to the workspace's own host through a one-time ticket; the
// session it gives is good on that host only, never reaches the workspace
// program, and ends with the dashboard session.
func TestProxySubdomainHandoff(t *testing.T) {
	env := apitest.New(t, apitest.Config{SubdomainBase: "ws.test"})
	alice := env.CreateUser("alice", false)
	w := runningWorkspace(t, env, alice, "web", startUpstream(t))
	other := runningWorkspace(t, env, alice, "other", startUpstream(t))
	c := env.Login(alice)
	noFollow := func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	c.CheckRedirect = noFollow
	anon := &http.Client{CheckRedirect: noFollow}
	u, _ := url.Parse(env.URL)
	host := w.ID + ".ws.test:" + u.Port()
	// onHost asks the server as the browser asks the workspace's host.
	onHost := func(h, pathAndQuery string, cookies ...*http.Cookie) apitest.Response {
		t.Helper()
		req, err := http.NewRequest(http.MethodGet, env.URL+pathAndQuery, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Host = h
		req.Header.Set("Accept", html)
		for _, ck := range cookies {
			req.AddCookie(ck)
		}
		res, err := anon.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		body, _ := io.ReadAll(res.Body)
		return apitest.Response{StatusCode: res.StatusCode, Header: res.Header, Body: body}
	}
	// ticket goes through the handoff as the browser does: the workspace's
	// host gives a nonce cookie and sends it to the dashboard's host, which
	// answers with a ticket bound to the nonce.
	ticket := func() (*url.URL, *http.Cookie) {
		t.Helper()
		res := onHost(host, "/echo/a%2Fb?x=1")
		nonce := cookieNamed(res, proxy.HandoffCookie)
		if res.StatusCode != http.StatusFound || nonce == nil || !nonce.HttpOnly || nonce.Domain != "" || nonce.Path != proxy.HandoffPath {
			t.Fatalf("workspace host without a session: %d %q, nonce cookie %+v", res.StatusCode, res.Header.Get("Location"), nonce)
		}
		res = get(t, c, res.Header.Get("Location"), "Accept", html)
		loc, err := url.Parse(res.Header.Get("Location"))
		if res.StatusCode != http.StatusSeeOther || err != nil || loc.Host != host || loc.Path != proxy.HandoffPath {
			t.Fatalf("handoff on the dashboard's host: %d %q, want 303 to %s%s", res.StatusCode, res.Header.Get("Location"), host, proxy.HandoffPath)
		}
		if next, state := loc.Query().Get("next"), loc.Query().Get("state"); next != "/echo/a%2Fb?x=1" || state != nonce.Value {
			t.Fatalf("handoff next = %q, state %q (nonce %q)", next, state, nonce.Value)
		}
		return loc, nonce
	}

	// Without a session the dashboard's host asks for a login first and
	// comes back to the same place.
	res := onHost(host, "/echo?x=1")
	want := env.URL + "/w/" + w.ID + proxy.HandoffPath + "?"
	if res.StatusCode != http.StatusFound || !strings.HasPrefix(res.Header.Get("Location"), want) {
		t.Fatalf("workspace host without a session: %d %q, want 302 to %s…", res.StatusCode, res.Header.Get("Location"), want)
	}
	ask := res.Header.Get("Location")
	res = get(t, anon, ask, "Accept", html)
	if want := "/login?next=" + url.QueryEscape(strings.TrimPrefix(ask, env.URL)); res.StatusCode != http.StatusFound || !strings.HasSuffix(res.Header.Get("Location"), want) {
		t.Fatalf("handoff without a session: %d %q, want 302 to …%s", res.StatusCode, res.Header.Get("Location"), want)
	}
	// A page under /w/{id}/ on the dashboard's host goes to the workspace's
	// host, which starts the handoff.
	res = get(t, c, env.URL+"/w/"+w.ID+"/echo?x=1", "Accept", html)
	if want := "http://" + host + "/echo?x=1"; res.StatusCode != http.StatusFound || res.Header.Get("Location") != want {
		t.Fatalf("/w/{id}/ on the dashboard's host: %d %q, want 302 %q", res.StatusCode, res.Header.Get("Location"), want)
	}

	// A ticket presented on another workspace's host is used up for nothing.
	stolen, nonce := ticket()
	if res := onHost(other.ID+".ws.test:"+u.Port(), stolen.RequestURI(), nonce); res.StatusCode != http.StatusUnauthorized || len(res.Header.Values("Set-Cookie")) != 0 {
		t.Fatalf("ticket on another workspace's host: %d, cookies %q", res.StatusCode, res.Header.Values("Set-Cookie"))
	}
	if res := onHost(host, stolen.RequestURI(), nonce); res.StatusCode != http.StatusUnauthorized {
		t.Fatalf("ticket used after a failed redemption: %d", res.StatusCode)
	}

	loc, nonce := ticket()
	res = onHost(host, loc.RequestURI(), nonce)
	if res.StatusCode != http.StatusSeeOther || res.Header.Get("Location") != "/echo/a%2Fb?x=1" {
		t.Fatalf("redeem: %d %q %s", res.StatusCode, res.Header.Get("Location"), res.Body)
	}
	if res.Header.Get("Referrer-Policy") != "no-referrer" || res.Header.Get("Cache-Control") != "no-store" {
		t.Errorf("redeem answer headers: %v", res.Header)
	}
	var hostCookie *http.Cookie
	for _, ck := range (&http.Response{Header: res.Header}).Cookies() {
		if ck.Name == proxy.HostSessionCookie {
			hostCookie = ck
		}
	}
	if hostCookie == nil || !hostCookie.HttpOnly || hostCookie.Domain != "" || hostCookie.Path != "/" || hostCookie.SameSite != http.SameSiteLaxMode {
		t.Fatalf("host session cookie: %+v, want HttpOnly, host-only, path /, SameSite=Lax", hostCookie)
	}
	if res := onHost(host, loc.RequestURI(), nonce); res.StatusCode != http.StatusUnauthorized {
		t.Fatalf("ticket used twice: %d", res.StatusCode)
	}

	// The host's session opens the workspace; the program never sees it.
	res = onHost(host, "/echo/x", hostCookie, &http.Cookie{Name: "theirs", Value: "kept"})
	if res.StatusCode != http.StatusOK {
		t.Fatalf("workspace host with its session: %d %s", res.StatusCode, res.Body)
	}
	var e echo
	res.Decode(t, &e)
	if got := strings.Join(http.Header(e.Headers).Values("Cookie"), " | "); got != "theirs=kept" {
		t.Fatalf("upstream saw cookies %q, want only the workspace's own", got)
	}
	// It is good on that host only: not on another workspace's host, not
	// on the dashboard's API under either name.
	if res := onHost(other.ID+".ws.test:"+u.Port(), "/echo", hostCookie); res.StatusCode != http.StatusFound {
		t.Fatalf("host session on another workspace's host: %d", res.StatusCode)
	}
	for _, name := range []string{proxy.HostSessionCookie, api.SessionCookie} {
		req, _ := http.NewRequest(http.MethodGet, env.URL+"/api/v1/workspaces", nil)
		req.AddCookie(&http.Cookie{Name: name, Value: hostCookie.Value})
		res, err := anon.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != http.StatusUnauthorized {
			t.Fatalf("host session as %s on the API: %d, want 401", name, res.StatusCode)
		}
	}

	// Logging out of the dashboard ends it (within the session cache's
	// few seconds on any replica).
	if res := env.Do(c, "POST", "/api/v1/logout", nil); res.StatusCode != http.StatusNoContent {
		t.Fatalf("logout: %d", res.StatusCode)
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		if res := onHost(host, "/echo/x", hostCookie); res.StatusCode == http.StatusFound {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the host session outlived the dashboard session's logout")
		}
	}
}

// TestProxyUnaskedSwitch: a workspace that answers 101 to a request that
// did not ask for that protocol gets a 502, and the proxy closes the
// connection instead of keeping it open forever.
func TestProxyUnaskedSwitch(t *testing.T) {
	env := apitest.New(t, apitest.Config{})
	alice := env.CreateUser("alice", false)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	var asked atomic.Int32
	closed := make(chan error, 4)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				if _, err := http.ReadRequest(bufio.NewReader(c)); err != nil {
					return
				}
				asked.Add(1)
				_, _ = io.WriteString(c, "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: other\r\n\r\n")
				// Wait for the proxy to hang up.
				_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
				_, err := c.Read(make([]byte, 1))
				closed <- err
			}()
		}
	}()
	w := runningWorkspace(t, env, alice, "switch", ln.Addr().String())
	c := env.Login(alice)
	if res := get(t, c, env.URL+"/w/"+w.ID+"/"); res.StatusCode != http.StatusBadGateway {
		t.Fatalf("101 to a plain GET: %d %s", res.StatusCode, res.Body)
	}
	// The proxy may have asked twice (the second time after reading the
	// workspace's state again); every connection must be closed.
	n := int(asked.Load())
	if n == 0 {
		t.Fatal("the workspace was never asked")
	}
	for i := range n {
		if err := <-closed; !errors.Is(err, io.EOF) {
			t.Errorf("connection %d of %d: the proxy did not close it: %v", i+1, n, err)
		}
	}
}

// TestProxyInterimStatus: an upload with "Expect: 100-continue" (curl
// sends it for large bodies) makes the workspace answer 100 first; the
// proxy's metrics count the final status, not the interim one.
func TestProxyInterimStatus(t *testing.T) {
	env := apitest.New(t, apitest.Config{})
	alice := env.CreateUser("alice", false)
	w := runningWorkspace(t, env, alice, "web", startUpstream(t))
	c := env.Login(alice)
	req, _ := http.NewRequest("PUT", env.URL+"/w/"+w.ID+"/upload", strings.NewReader(strings.Repeat("x", 4096)))
	req.Header.Set("Expect", "100-continue")
	res, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		Method string `json:"method"`
		Size   int    `json:"size"`
	}
	err = json.NewDecoder(res.Body).Decode(&got)
	res.Body.Close()
	if err != nil || res.StatusCode != 200 || got.Method != "PUT" || got.Size != 4096 {
		t.Fatalf("upload: %d %+v %v", res.StatusCode, got, err)
	}
	metrics := string(get(t, c, env.URL+"/metrics", "Authorization", "Bearer "+apitest.MetricsToken).Body)
	if !strings.Contains(metrics, `codehub_proxy_requests_total{code="200"} 1`) || strings.Contains(metrics, `codehub_proxy_requests_total{code="100"}`) {
		t.Fatalf("proxy requests by code after one upload:\n%s", grepLines(metrics, "codehub_proxy_requests_total"))
	}
}

// TestProxyPlainRequests: GETs, which take the plain path, mark the
// workspace active and are counted, and a client that goes away ends the
// workspace's request at once and is counted as 499.
func TestProxyPlainRequests(t *testing.T) {
	env := apitest.New(t, apitest.Config{})
	alice := env.CreateUser("alice", false)
	ended, stop := make(chan struct{}, 1), make(chan struct{})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/held" {
			_, _ = io.WriteString(w, "ok")
			return
		}
		select {
		case <-r.Context().Done():
			ended <- struct{}{}
		case <-stop:
		}
	}))
	t.Cleanup(up.Close)
	t.Cleanup(func() { close(stop) })
	w := runningWorkspace(t, env, alice, "web", strings.TrimPrefix(up.URL, "http://"))
	env.Exec(`UPDATE workspaces SET last_access_at = now() - interval '1 hour'`)
	c := env.Login(alice)
	before := time.Now().Unix()
	// A page load, which the activity rule counts, on the plain path.
	if res := get(t, c, env.URL+"/w/"+w.ID+"/", pageLoad...); res.StatusCode != 200 || string(res.Body) != "ok" {
		t.Fatalf("GET: %d %s", res.StatusCode, res.Body)
	}

	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "GET", env.URL+"/w/"+w.ID+"/held", nil)
	done := make(chan error, 1)
	go func() {
		res, err := c.Do(req)
		if err == nil {
			res.Body.Close()
		}
		done <- err
	}()
	time.Sleep(200 * time.Millisecond)
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled request: %v", err)
	}
	select {
	case <-ended:
	case <-time.After(10 * time.Second):
		t.Fatal("the workspace's request outlived the client's")
	}
	metrics := string(get(t, c, env.URL+"/metrics", "Authorization", "Bearer "+apitest.MetricsToken).Body)
	for _, want := range []string{`codehub_proxy_requests_total{code="200"} 1`, `codehub_proxy_requests_total{code="499"} 1`, "codehub_proxy_request_duration_seconds_count 2"} {
		if !strings.Contains(metrics, want) {
			t.Errorf("metrics lack %q:\n%s", want, grepLines(metrics, "codehub_proxy_request"))
		}
	}

	// Stopping the server flushes the in-memory marks to the ZSET.
	env.StopServer()
	score, err := env.Redis.ZScore(context.Background(), activity.Key, w.ID).Result()
	if err != nil || int64(score) < before {
		t.Fatalf("activity of %s in %s: %v %v (want >= %d)", w.ID, activity.Key, score, err, before)
	}
}

func grepLines(text, prefix string) string {
	var out []string
	for line := range strings.SplitSeq(text, "\n") {
		if strings.HasPrefix(line, prefix) {
			out = append(out, line)
		}
	}
	return strings.Join(out, "\n")
}

// TestProxySignOut: code-server's "Sign out" goes to the dashboard's
// sign-out page when the proxy holds the upstream token, and reaches the
// workspace when it does not (a program of the operator's own may serve
// that path).
func TestProxySignOut(t *testing.T) {
	for _, tc := range []struct {
		name     string
		cfg      apitest.Config
		location func(env *apitest.Env) string
	}{
		{"path mode", apitest.Config{UpstreamToken: upstreamToken}, func(env *apitest.Env) string { return env.URL + "/logout" }},
		{"subdomain mode", apitest.Config{UpstreamToken: upstreamToken, SubdomainBase: "ws.test"}, func(env *apitest.Env) string { return env.URL + "/logout" }},
		{"no upstream token", apitest.Config{}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := apitest.New(t, tc.cfg)
			alice := env.CreateUser("alice", false)
			w := runningWorkspace(t, env, alice, "web", startUpstream(t))
			c := env.Login(alice)
			c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
			u, _ := url.Parse(env.URL)
			addr, host := env.URL+"/w/"+w.ID+"/logout?base=.&href=x", ""
			if tc.cfg.SubdomainBase != "" {
				addr, host = env.URL+"/logout?base=.&href=x", w.ID+".ws.test:"+u.Port()
			}
			res := get(t, c, addr, "Accept", html, "Host", host)
			if tc.location == nil {
				var e echo
				if res.StatusCode != http.StatusOK || json.Unmarshal(res.Body, &e) != nil || e.Path != "/logout" {
					t.Fatalf("GET logout without a token: %d %s, want the workspace's answer", res.StatusCode, res.Body)
				}
				return
			}
			if res.StatusCode != http.StatusSeeOther || res.Header.Get("Location") != tc.location(env) {
				t.Fatalf("GET logout: %d %q, want 303 to %s", res.StatusCode, res.Header.Get("Location"), tc.location(env))
			}
		})
	}
}

// workbenchURL is the address of a socket as code-server's workbench opens
// it (on the test upstream's echo path).
func workbenchURL(env *apitest.Env, id string, resumed bool) string {
	return fmt.Sprintf("ws%s/w/%s/ws?reconnectionToken=8f2c7a10-5b3e-4d2a-9c1e-2f6b7d8e9a01&reconnection=%v&skipWebSocketFrames=false",
		strings.TrimPrefix(env.URL, "http"), id, resumed)
}

// vsMessage is one message of VS Code's remote protocol: type, id, ack,
// body length, body.
func vsMessage(typ byte, body string) []byte {
	m := []byte{typ, 0, 0, 0, 1, 0, 0, 0, 0}
	m = append(m, byte(len(body)>>24), byte(len(body)>>16), byte(len(body)>>8), byte(len(body)))
	return append(m, body...)
}

var (
	vsAuth       = vsMessage(2, `{"type":"auth","auth":"00000000000000000000","data":"2591d747"}`)
	vsManagement = vsMessage(2, `{"type":"connectionType","commit":"409c64e0","signedData":"a2a02606","desiredConnectionType":1}`)
	vsKeepAlive  = vsMessage(9, "")
	vsTelemetry  = vsMessage(1, "\x04\x04\x06\x64\x06\x05\x01\x09telemetry\x01\x04ping\x00")
	vsTyped      = vsMessage(1, "\x04\x04\x06\x64\x06\x06\x01\x0eremoteterminal\x01\x06$input\x04\x02\x06\x01\x01\x01l")
)

// echoAll sends each message over the echo upstream and reads it back, so
// the proxy has passed all of them on.
func echoAll(ctx context.Context, t *testing.T, conn *websocket.Conn, msgs ...[]byte) {
	t.Helper()
	for _, m := range msgs {
		if err := conn.Write(ctx, websocket.MessageBinary, m); err != nil {
			t.Fatal(err)
		}
		if _, got, err := conn.Read(ctx); err != nil || string(got) != string(m) {
			t.Fatalf("echo: %q %v", got, err)
		}
	}
}

// TestProxyActivityRule: what a browser sends counts as activity only when
// it shows a person at work (docs/lifecycle.md, "Activity").
func TestProxyActivityRule(t *testing.T) {
	env := apitest.New(t, apitest.Config{MaxRunningPerUser: 10})
	alice := env.CreateUser("alice", false)
	addr := startUpstream(t)
	c := env.Login(alice)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	idle := runningWorkspace(t, env, alice, "idle", addr)
	typing := runningWorkspace(t, env, alice, "typing", addr)
	opened := runningWorkspace(t, env, alice, "opened", addr)
	posted := runningWorkspace(t, env, alice, "posted", addr)
	before := time.Now().Unix()

	// An idle workbench: its own fetches, a VS Code socket that only keeps
	// itself alive, a socket of another program that only pings.
	for _, h := range [][]string{
		{"Sec-Fetch-Mode", "no-cors", "Sec-Fetch-Dest", "image"},
		{"Sec-Fetch-Mode", "navigate", "Sec-Fetch-Dest", "iframe", "Accept", html},
		{"Sec-Fetch-Mode", "cors", "Sec-Fetch-Dest", "empty"},
	} {
		if res := get(t, c, env.URL+"/w/"+idle.ID+"/img.png", h...); res.StatusCode != 200 {
			t.Fatalf("sub-resource: %d", res.StatusCode)
		}
	}
	vs, _, err := websocket.Dial(ctx, workbenchURL(env, idle.ID, false), &websocket.DialOptions{HTTPHeader: dialHeaders(t, c, env.URL, env.URL)})
	if err != nil {
		t.Fatal(err)
	}
	defer vs.CloseNow()
	echoAll(ctx, t, vs, vsAuth, vsManagement, vsKeepAlive, vsTelemetry, vsKeepAlive)
	pinger, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(env.URL, "http")+"/w/"+idle.ID+"/ws", &websocket.DialOptions{HTTPHeader: dialHeaders(t, c, env.URL, env.URL)})
	if err != nil {
		t.Fatal(err)
	}
	defer pinger.CloseNow()
	pinger.CloseRead(ctx)
	for range 3 {
		if err := pinger.Ping(ctx); err != nil {
			t.Fatal(err)
		}
	}

	// Keys typed into a terminal.
	vt, _, err := websocket.Dial(ctx, workbenchURL(env, typing.ID, false), &websocket.DialOptions{HTTPHeader: dialHeaders(t, c, env.URL, env.URL)})
	if err != nil {
		t.Fatal(err)
	}
	defer vt.CloseNow()
	echoAll(ctx, t, vt, vsAuth, vsManagement, vsKeepAlive, vsTyped)

	// A person opening the workspace, and a form sent from it.
	if res := get(t, c, env.URL+"/w/"+opened.ID+"/", "Accept", html, "Sec-Fetch-Mode", "navigate", "Sec-Fetch-Dest", "document"); res.StatusCode != 200 {
		t.Fatalf("navigation: %d", res.StatusCode)
	}
	if res := env.Do(c, http.MethodPost, "/w/"+posted.ID+"/save", "x=1"); res.StatusCode != 200 {
		t.Fatalf("post: %d", res.StatusCode)
	}

	// Stopping the server flushes the in-memory marks to the ZSET.
	env.StopServer()
	for _, w := range []workspace.Workspace{typing, opened, posted} {
		if score, err := env.Redis.ZScore(ctx, activity.Key, w.ID).Result(); err != nil || int64(score) < before {
			t.Errorf("%s: activity %v %v, want a mark", w.Name, score, err)
		}
	}
	if score, err := env.Redis.ZScore(ctx, activity.Key, idle.ID).Result(); err == nil {
		t.Errorf("idle workbench marked active at %v", score)
	}
}

// TestProxyWorkbenchRefused: a workbench reconnecting to a stopped
// workspace is refused in VS Code's own protocol (it then offers a reload
// instead of reconnecting forever) and does not wake it.
func TestProxyWorkbenchRefused(t *testing.T) {
	env, c, w := stoppedBehindCachedRoute(t)
	env.Exec(`UPDATE workspaces SET last_access_at = now() - interval '12 minutes 5 seconds' WHERE id = $1`, w.ID)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	// The first reconnect meets the cached route to the stopped upstream,
	// the second reads the workspace.
	for attempt := range 2 {
		conn, res, err := websocket.Dial(ctx, workbenchURL(env, w.ID, true), &websocket.DialOptions{HTTPHeader: dialHeaders(t, c, env.URL, env.URL)})
		if err != nil {
			t.Fatalf("attempt %d: handshake: %v %v", attempt, res, err)
		}
		if err := conn.Write(ctx, websocket.MessageBinary, vsAuth); err != nil {
			t.Fatal(err)
		}
		typ, msg, err := conn.Read(ctx)
		if err != nil || typ != websocket.MessageBinary || len(msg) < 13 || msg[0] != 2 {
			t.Fatalf("attempt %d: answer %v % x %v", attempt, typ, msg, err)
		}
		var refusal struct{ Type, Reason string }
		if err := json.Unmarshal(msg[13:], &refusal); err != nil || refusal.Type != "error" ||
			refusal.Reason != "This workspace was stopped. It stopped after 12 minutes without use, less than a minute ago. Reload the window to start it again." {
			t.Fatalf("attempt %d: refusal %s: %v", attempt, msg[13:], err)
		}
		if _, _, err := conn.Read(ctx); websocket.CloseStatus(err) != websocket.StatusNormalClosure {
			t.Fatalf("attempt %d: after the refusal: %v", attempt, err)
		}
	}
	// Another program's socket gets the status as a page.
	_, res, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(env.URL, "http")+"/w/"+w.ID+"/ws", &websocket.DialOptions{HTTPHeader: dialHeaders(t, c, env.URL, env.URL)})
	if err == nil || res == nil || res.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("other socket: %v %v", res, err)
	}
	if got := env.Workspace(w.ID).DesiredState; got != workspace.DesiredStandby {
		t.Fatalf("a reconnect changed the desired state to %s", got)
	}
}
