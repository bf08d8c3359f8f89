package proxy

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/codehub-io/codehub/workspace"
)

// keptClient is one raw client connection to a kept front.
type keptClient struct {
	t  *testing.T
	c  net.Conn
	br *bufio.Reader
}

func dialKept(t *testing.T, addr string) *keptClient {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	return &keptClient{t: t, c: c, br: bufio.NewReader(c)}
}

// send writes raw request bytes (lines ending in \n, sent as CRLF).
func (k *keptClient) send(raw string) {
	k.t.Helper()
	if _, err := io.WriteString(k.c, strings.ReplaceAll(raw, "\n", "\r\n")); err != nil {
		k.t.Fatal(err)
	}
}

// read reads one answer whole.
func (k *keptClient) read(method string) (*http.Response, string) {
	k.t.Helper()
	res, err := http.ReadResponse(k.br, &http.Request{Method: method})
	if err != nil {
		k.t.Fatalf("read response: %v", err)
	}
	body, err := io.ReadAll(res.Body)
	if err != nil {
		k.t.Fatalf("read body: %v", err)
	}
	return res, string(body)
}

// closed reports whether the server ended the connection.
func (k *keptClient) closed() bool {
	_, err := k.br.ReadByte()
	return errors.Is(err, io.EOF)
}

func rawGet(path string, headers ...string) string {
	raw := "GET " + path + " HTTP/1.1\nHost: 127.0.0.1\n"
	for _, h := range headers {
		raw += h + "\n"
	}
	return raw + "\n"
}

// noWorkspaces knows no workspace.
type noWorkspaces struct{}

func (noWorkspaces) Get(context.Context, string) (workspace.Workspace, error) {
	return workspace.Workspace{}, workspace.ErrNotFound
}

func (noWorkspaces) SetDesired(context.Context, string, workspace.DesiredState, workspace.Cause) (workspace.Workspace, error) {
	return workspace.Workspace{}, workspace.ErrNotFound
}

func (noWorkspaces) Running(context.Context, string) ([]workspace.Workspace, error) { return nil, nil }

// TestKeptConnection: once a workspace answered a plain request, the proxy
// serves the plain requests after it on the connection itself, and any
// other request on it reaches the server as if the connection had never
// left it.
func TestKeptConnection(t *testing.T) {
	up := startRawUpstream(t, map[string]rawAnswer{
		"/gone": {raw: "HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\nall", close: true},
	})
	ws := "/w/" + plainTestID
	p := newTestProxy(t, Options{})
	p.workspaces = noWorkspaces{}
	addr, l := keptFront(t, p, up.addr, time.Minute, 10*time.Second)
	drain := func(n int) {
		for range n {
			select {
			case <-up.requests:
			case <-time.After(5 * time.Second):
				t.Fatal("the workspace got no request")
			}
		}
	}
	taken := func(t *testing.T, k *keptClient) {
		t.Helper()
		// Connections of earlier cases have ended.
		waitFor(t, "earlier connections to end", func() bool { return keptConns(l) == 0 })
		k.send(rawGet(ws + "/first"))
		if res, body := k.read("GET"); res.StatusCode != 200 || body != "ok" {
			t.Fatalf("first request: %d %q", res.StatusCode, body)
		}
		drain(1)
		if n := keptConns(l); n != 1 {
			t.Fatalf("the proxy serves %d connections itself, want 1", n)
		}
	}

	t.Run("plain requests, pipelined", func(t *testing.T) {
		k := dialKept(t, addr)
		taken(t, k)
		k.send(rawGet(ws+"/a") + rawGet(ws+"/b") + "HEAD " + ws + "/c HTTP/1.1\nHost: 127.0.0.1\n\n")
		for _, m := range []string{"GET", "GET", "HEAD"} {
			if res, body := k.read(m); res.StatusCode != 200 || (m == "GET" && body != "ok") || res.Header.Get("Date") == "" {
				t.Fatalf("%s: %d %q %v", m, res.StatusCode, body, res.Header)
			}
		}
		drain(3)
		if keptConns(l) != 1 {
			t.Error("the connection left the proxy")
		}
		k.c.Close()
	})

	t.Run("requests the proxy does not serve go back to the server", func(t *testing.T) {
		for name, raw := range map[string]string{
			"another path":      rawGet("/api/v1/session"),
			"a path to clean":   rawGet(ws + "/a/../../../api/v1/session"),
			"a page load":       rawGet(ws+"/", "Sec-Fetch-Mode: navigate", "Sec-Fetch-Dest: document"),
			"a head too large":  rawGet(ws+"/big", "X-Big: "+strings.Repeat("b", headSize)),
			"another workspace": rawGet("/w/01jb3x7k9q2m5n8p4r6s0t1v2x/x"),
			"the proxy's own":   rawGet(ws + ownPrefix + "status"),
		} {
			k := dialKept(t, addr)
			taken(t, k)
			k.send(raw)
			res, body := k.read("GET")
			if name != "a head too large" {
				// Handed back, the connection leaves the proxy. (A plain
				// request the server forwards is taken over again, so
				// that one case cannot tell.)
				waitFor(t, name+" to leave the taken connection", func() bool { return keptConns(l) == 0 })
			}
			switch name {
			case "another path", "a path to clean":
				if body != "not proxied" {
					t.Errorf("%s: %d %q, want the server's answer", name, res.StatusCode, body)
				}
			case "a page load", "a head too large":
				// The server's own path forwards them.
				if res.StatusCode != 200 || body != "ok" {
					t.Errorf("%s: %d %q", name, res.StatusCode, body)
				}
				drain(1)
			default:
				// No route is cached for another workspace, and the
				// proxy's own paths are answered by it: both need what
				// this front leaves out, so any answer of the server's
				// own is right; none reaches the workspace.
				if res.StatusCode == 200 && body == "ok" {
					t.Errorf("%s: the workspace answered", name)
				}
			}
			// The connection goes on with the server and comes back.
			k.send(rawGet(ws + "/after"))
			if res, body := k.read("GET"); res.StatusCode != 200 || body != "ok" {
				t.Errorf("%s: the request after it: %d %q", name, res.StatusCode, body)
			}
			drain(1)
			k.c.Close()
		}
	})

	t.Run("a malformed request gets the server's answer", func(t *testing.T) {
		for name, raw := range map[string]string{
			"bad header name": "GET " + ws + "/x HTTP/1.1\r\nHost: 127.0.0.1\r\nBad Name: 1\r\n\r\n",
			"no host":         "GET " + ws + "/x HTTP/1.1\r\nX-A: 1\r\n\r\n",
			"two hosts":       "GET " + ws + "/x HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n",
			"bad host":        "GET " + ws + "/x HTTP/1.1\r\nHost: a b\r\n\r\n",
			"http/1.0":        "GET " + ws + "/x HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n",
			// net/http reads a bare line feed as a line's end: the
			// request is served, by the server.
			"bare line feed": "GET " + ws + "/x HTTP/1.1\r\nHost: 127.0.0.1\nX-A: 1\r\n\r\n",
		} {
			k := dialKept(t, addr)
			taken(t, k)
			if _, err := io.WriteString(k.c, raw); err != nil {
				t.Fatal(err)
			}
			res, body := k.read("GET")
			want := http.StatusBadRequest
			if name == "bare line feed" || name == "http/1.0" {
				want = http.StatusOK
				drain(1)
			}
			if res.StatusCode != want {
				t.Errorf("%s: %d %q, want %d", name, res.StatusCode, body, want)
			}
			k.c.Close()
		}
	})

	t.Run("connection close", func(t *testing.T) {
		k := dialKept(t, addr)
		taken(t, k)
		k.send(rawGet(ws+"/x", "Connection: close"))
		res, body := k.read("GET")
		drain(1)
		if res.StatusCode != 200 || body != "ok" || !res.Close || !k.closed() {
			t.Errorf("%d %q, close %v", res.StatusCode, body, res.Close)
		}
	})

	t.Run("a broken answer ends the connection", func(t *testing.T) {
		k := dialKept(t, addr)
		taken(t, k)
		k.send(rawGet(ws + "/gone"))
		// Nothing of an answer with a length may have left yet; what did
		// must end short.
		if res, err := http.ReadResponse(k.br, nil); err == nil {
			if body, err := io.ReadAll(res.Body); !errors.Is(err, io.ErrUnexpectedEOF) {
				t.Errorf("read the broken answer: %q, %v; want it cut short", body, err)
			}
		} else if !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF) {
			t.Errorf("read the broken answer: %v", err)
		}
		drain(1)
	})
}

// TestKeptConnectionUpstreamGone: a request whose workspace does not
// answer goes back to the server unanswered, which answers it from the
// workspace's state as any failed request (here: there is no workspace).
func TestKeptConnectionUpstreamGone(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "ok")
	}))
	p := newTestProxy(t, Options{})
	p.workspaces = noWorkspaces{}
	addr, l := keptFront(t, p, strings.TrimPrefix(up.URL, "http://"), time.Minute, 10*time.Second)
	k := dialKept(t, addr)
	k.send(rawGet("/w/" + plainTestID + "/x"))
	if res, body := k.read("GET"); res.StatusCode != 200 || body != "ok" {
		t.Fatalf("first request: %d %q", res.StatusCode, body)
	}
	waitFor(t, "the connection to be taken", func() bool { return keptConns(l) == 1 })
	up.Close()
	k.send(rawGet("/w/" + plainTestID + "/x"))
	res, body := k.read("GET")
	if res.StatusCode != http.StatusNotFound || !strings.Contains(body, CodeNotFound) {
		t.Errorf("after the workspace went away: %d %q, want the server's 404", res.StatusCode, body)
	}
	waitFor(t, "the connection to leave the proxy", func() bool { return keptConns(l) == 0 })
	k.send(rawGet("/api/v1/session"))
	if _, body := k.read("GET"); body != "not proxied" {
		t.Errorf("the connection after it: %q", body)
	}
}

// TestKeptConnectionEnds: a taken connection waits for its next request
// no longer than the idle timeout, for the rest of a head it began no
// longer than the header timeout, and closing the listener ends the
// waiting ones at once.
func TestKeptConnectionEnds(t *testing.T) {
	up := startRawUpstream(t, nil)
	ws := "/w/" + plainTestID
	// taken is a connection the proxy took over, behind a front with the
	// timeouts given.
	taken := func(idle, header time.Duration) (*keptClient, *Listener) {
		p := newTestProxy(t, Options{})
		addr, l := keptFront(t, p, up.addr, idle, header)
		k := dialKept(t, addr)
		k.send(rawGet(ws + "/x"))
		k.read("GET")
		<-up.requests
		waitFor(t, "the connection to be taken", func() bool { return keptConns(l) == 1 })
		return k, l
	}
	k, _ := taken(300*time.Millisecond, 10*time.Second)
	if !k.closed() {
		t.Fatal("the idle connection was not closed")
	}

	k, _ = taken(time.Hour, 300*time.Millisecond)
	k.send("GET " + ws + "/x HTTP/1.1\nHost: 127.0.0.1\n")
	if !k.closed() {
		t.Fatal("the connection with half a head was not closed")
	}

	k, l := taken(time.Hour, 10*time.Second)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := l.Wait(ctx); err != nil {
		t.Fatalf("wait for taken connections: %v", err)
	}
	if !k.closed() {
		t.Error("closing the listener left the connection open")
	}
	if _, err := l.Accept(); !errors.Is(err, net.ErrClosed) {
		t.Errorf("accept after close: %v", err)
	}
}
