package proxy_test

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/jackc/pgx/v5"

	"github.com/codehub-io/codehub/api/apitest"
	"github.com/codehub-io/codehub/audit"
	"github.com/codehub-io/codehub/proxy"
)

// endWithin is how soon a long-lived connection must end after its
// session: the recheck interval (2 s) and the session cache (2 s), with
// room for a loaded test machine.
const endWithin = 8 * time.Second

// longConns is one of each kind of long-lived connection a browser opens
// to a workspace.
type longConns struct {
	socket *websocket.Conn
	// taken is a connection the proxy took over after a plain answer,
	// now waiting for its next request; takenStream one the proxy took
	// over while it streams an answer.
	taken, takenStream *rawConn
	// stream streams an answer through net/http (the request asked to
	// close its connection, so it is not taken over); forwarded one
	// through ReverseProxy (its query has a semicolon, which only
	// ReverseProxy cleans).
	stream, forwarded *rawConn
}

// rawConn is a client connection whose answer the test reads itself.
type rawConn struct {
	c  net.Conn
	br *bufio.Reader
}

// openRaw sends a request with the client's cookies, the header lines
// extra and body on a new connection and reads the answer's head; an
// answer that streams must have sent its first line.
func openRaw(t *testing.T, env *apitest.Env, c *http.Client, method, path, extra, body string, streams bool) *rawConn {
	t.Helper()
	u, _ := url.Parse(env.URL)
	conn, err := net.Dial("tcp", u.Host)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	var cookies []string
	for _, ck := range c.Jar.Cookies(u) {
		cookies = append(cookies, ck.Name+"="+ck.Value)
	}
	head := method + " " + path + " HTTP/1.1\r\nHost: " + u.Host + "\r\nCookie: " + strings.Join(cookies, "; ") + "\r\n" + extra + "\r\n" + body
	if _, err := io.WriteString(conn, head); err != nil {
		t.Fatal(err)
	}
	rc := &rawConn{c: conn, br: bufio.NewReader(conn)}
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	res, err := http.ReadResponse(rc.br, &http.Request{Method: method})
	if err != nil || res.StatusCode != http.StatusOK {
		t.Fatalf("%s %s: %v %v", method, path, res, err)
	}
	if streams {
		// The stream's first line; its second never comes.
		if line, err := bufio.NewReader(res.Body).ReadString('\n'); err != nil || line != "first\n" {
			t.Fatalf("%s %s: first line %q %v", method, path, line, err)
		}
		return rc
	}
	if _, err := io.Copy(io.Discard, res.Body); err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	return rc
}

// ended waits for the connection to end and reports how long that took.
func (rc *rawConn) ended(t *testing.T, what string, since time.Time) {
	t.Helper()
	_ = rc.c.SetReadDeadline(since.Add(endWithin))
	_, err := io.Copy(io.Discard, rc.br)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Errorf("%s still open %s after its session ended", what, endWithin)
		return
	}
	t.Logf("%s ended after %s", what, time.Since(since).Round(100*time.Millisecond))
}

func openLongConns(t *testing.T, env *apitest.Env, c *http.Client, id string) longConns {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	socket, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(env.URL, "http")+"/w/"+id+"/ws",
		&websocket.DialOptions{HTTPHeader: dialHeaders(t, c, env.URL, env.URL)})
	if err != nil {
		t.Fatalf("dial through the proxy: %v", err)
	}
	t.Cleanup(func() { socket.CloseNow() })
	echoOnce(ctx, t, socket, "before")
	return longConns{
		socket:      socket,
		taken:       openRaw(t, env, c, "GET", "/w/"+id+"/ok", "", "", false),
		takenStream: openRaw(t, env, c, "GET", "/w/"+id+"/stream", "", "", true),
		stream:      openRaw(t, env, c, "GET", "/w/"+id+"/stream", "Connection: close\r\n", "", true),
		forwarded:   openRaw(t, env, c, "GET", "/w/"+id+"/stream?a;b", "", "", true),
	}
}

func echoOnce(ctx context.Context, t *testing.T, socket *websocket.Conn, msg string) {
	t.Helper()
	if err := socket.Write(ctx, websocket.MessageText, []byte(msg)); err != nil {
		t.Fatalf("write %q: %v", msg, err)
	}
	if _, got, err := socket.Read(ctx); err != nil || string(got) != msg {
		t.Fatalf("echo of %q: %q %v", msg, got, err)
	}
}

// endedAll waits for every connection of lc to end.
func (lc longConns) endedAll(t *testing.T, since time.Time) {
	t.Helper()
	ctx, cancel := context.WithDeadline(context.Background(), since.Add(endWithin))
	defer cancel()
	_, _, err := lc.socket.Read(ctx)
	switch {
	case ctx.Err() != nil:
		t.Errorf("the WebSocket is still open %s after its session ended", endWithin)
	case websocket.CloseStatus(err) != websocket.StatusPolicyViolation:
		t.Errorf("the WebSocket ended with %v, want a close frame with status %d", err, websocket.StatusPolicyViolation)
	default:
		t.Logf("the WebSocket ended after %s: %v", time.Since(since).Round(100*time.Millisecond), err)
	}
	lc.taken.ended(t, "a taken connection", since)
	lc.takenStream.ended(t, "a streaming answer on a taken connection", since)
	lc.stream.ended(t, "a streaming answer", since)
	lc.forwarded.ended(t, "a streaming answer through ReverseProxy", since)
}

// TestProxyConnectionsEndWithSession: every kind of long-lived connection
// to a workspace ends within seconds of the end of the session that
// opened it, or of its user's ownership of the workspace; each ending is
// counted and recorded in the audit log.
func TestProxyConnectionsEndWithSession(t *testing.T) {
	cases := []struct {
		name   string
		end    func(env *apitest.Env, c *http.Client, u apitest.User, id string)
		reason string
		// words is the reason as the audit log says it.
		words string
	}{
		{"logout", func(env *apitest.Env, c *http.Client, _ apitest.User, _ string) {
			if res := env.Do(c, "POST", "/api/v1/logout", nil); res.StatusCode != http.StatusNoContent {
				t.Fatalf("logout: %d %s", res.StatusCode, res.Body)
			}
		}, "session", "session ended"},
		{"sessions deleted", func(env *apitest.Env, _ *http.Client, u apitest.User, _ string) {
			// As an expiry sweep, a password reset or a disable does.
			env.Exec(`DELETE FROM sessions WHERE user_id = $1`, u.ID)
		}, "session", "session ended"},
		{"another owner", func(env *apitest.Env, _ *http.Client, _ apitest.User, id string) {
			bob := env.CreateUser("bob", false)
			env.Exec(`UPDATE workspaces SET owner_id = $1 WHERE id = $2`, bob.ID, id)
		}, "owner", "workspace no longer owned by the user"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			env := apitest.New(t, apitest.Config{})
			alice := env.CreateUser("alice", false)
			w := runningWorkspace(t, env, alice, "web", startUpstream(t))
			c := env.Login(alice)
			lc := openLongConns(t, env, c, w.ID)
			since := time.Now()
			tc.end(env, c, alice, w.ID)
			lc.endedAll(t, since)

			metrics := string(get(t, env.Client(), env.URL+"/metrics", "Authorization", "Bearer "+apitest.MetricsToken).Body)
			want := `codehub_proxy_connections_revoked_total{reason="` + tc.reason + `"} 5`
			if !strings.Contains(metrics, want) {
				t.Errorf("metrics lack %q:\n%s", want, grepLines(metrics, "codehub_proxy_connections_revoked_total"))
			}
			// The event is written after the connections are closed.
			var detail string
			for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(50 * time.Millisecond) {
				err := env.Pool.QueryRow(context.Background(), `SELECT detail FROM audit_events
					WHERE action = $1 AND actor_user_id = $2 AND target_id = $3`, audit.ActionConnectionEnd, alice.ID, w.ID).Scan(&detail)
				if err == nil {
					break
				}
				if !errors.Is(err, pgx.ErrNoRows) || time.Now().After(deadline) {
					t.Fatalf("read the %s event: %v", audit.ActionConnectionEnd, err)
				}
			}
			if want := tc.words + ": 5 connection(s) closed"; detail != want {
				t.Errorf("the audit event says %q, want %q", detail, want)
			}
		})
	}
}

// TestProxyConnectionsSurviveDatabaseError: a check of a session that
// fails ends nothing; the connection ends once a check says the session
// ended.
func TestProxyConnectionsSurviveDatabaseError(t *testing.T) {
	env := apitest.New(t, apitest.Config{})
	alice := env.CreateUser("alice", false)
	w := runningWorkspace(t, env, alice, "web", startUpstream(t))
	c := env.Login(alice)
	lc := openLongConns(t, env, c, w.ID)

	// Every session lookup fails while the table is away.
	env.Exec(`ALTER TABLE sessions RENAME TO sessions_away`)
	time.Sleep(endWithin)
	env.Exec(`ALTER TABLE sessions_away RENAME TO sessions`)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	echoOnce(ctx, t, lc.socket, "after the outage")
	for what, rc := range map[string]*rawConn{"taken": lc.taken, "taken stream": lc.takenStream, "stream": lc.stream, "forwarded": lc.forwarded} {
		_ = rc.c.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
		var ne net.Error
		if _, err := rc.br.ReadByte(); err != nil && (!errors.As(err, &ne) || !ne.Timeout()) {
			t.Errorf("the %s connection ended during the outage: %v", what, err)
		}
	}

	since := time.Now()
	if res := env.Do(c, "POST", "/api/v1/logout", nil); res.StatusCode != http.StatusNoContent {
		t.Fatalf("logout: %d %s", res.StatusCode, res.Body)
	}
	lc.endedAll(t, since)
}

// TestProxyConnectionsEndWithHostSession: in subdomain mode a WebSocket
// opened on the workspace's own host, with the session handed over to
// that host, ends when the dashboard's session ends.
func TestProxyConnectionsEndWithHostSession(t *testing.T) {
	env := apitest.New(t, apitest.Config{SubdomainBase: "ws.test"})
	alice := env.CreateUser("alice", false)
	w := runningWorkspace(t, env, alice, "web", startUpstream(t))
	u, _ := url.Parse(env.URL)
	host := w.ID + ".ws.test:" + u.Port()
	c := browser(t, env)
	if res := env.Do(c, "POST", "/api/v1/login", map[string]string{"username": "alice", "password": apitest.Password}); res.StatusCode != http.StatusOK {
		t.Fatalf("login: %d", res.StatusCode)
	}
	// The browser walks the handoff: the workspace's host gives it a
	// nonce, the dashboard a ticket bound to it, the host its session.
	res := open(t, c, "http://"+host+"/")
	for range 2 {
		if res.StatusCode != http.StatusFound && res.StatusCode != http.StatusSeeOther {
			t.Fatalf("handoff: %d %q", res.StatusCode, res.Header.Get("Location"))
		}
		res = open(t, c, res.Header.Get("Location"))
	}
	hostCookie := cookieNamed(res, proxy.HostSessionCookie)
	if hostCookie == nil {
		t.Fatalf("redeem: %d without the host's session cookie", res.StatusCode)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	socket, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(env.URL, "http")+"/ws", &websocket.DialOptions{
		Host:       host,
		HTTPHeader: http.Header{"Cookie": {hostCookie.Name + "=" + hostCookie.Value}, "Origin": {"http://" + host}},
	})
	if err != nil {
		t.Fatalf("dial the workspace's host: %v", err)
	}
	defer socket.CloseNow()
	echoOnce(ctx, t, socket, "before")

	since := time.Now()
	if res := env.Do(c, "POST", "/api/v1/logout", nil); res.StatusCode != http.StatusNoContent {
		t.Fatalf("logout: %d %s", res.StatusCode, res.Body)
	}
	rctx, rcancel := context.WithDeadline(context.Background(), since.Add(endWithin))
	defer rcancel()
	if _, _, err := socket.Read(rctx); websocket.CloseStatus(err) != websocket.StatusPolicyViolation {
		t.Fatalf("the socket on the workspace's host after the logout: %v", err)
	}
	t.Logf("the socket ended after %s", time.Since(since).Round(100*time.Millisecond))
}
