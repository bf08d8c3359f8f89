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
	"sync/atomic"
	"testing"
	"time"

	"github.com/codehub-io/codehub/internal/testenv"
)

// countingServer is an upstream that counts the connections it accepted.
type countingServer struct {
	*httptest.Server
	conns atomic.Int32
}

func newCountingServer(t *testing.T, h http.Handler) *countingServer {
	t.Helper()
	s := &countingServer{}
	s.Server = httptest.NewUnstartedServer(h)
	s.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		if st == http.StateNew {
			s.conns.Add(1)
		}
	}
	s.Start()
	t.Cleanup(s.Close)
	return s
}

func testTransport() (*upstreamTransport, *testenv.Clock) {
	clk := testenv.NewClock(time.Unix(1_700_000_000, 0))
	tr := newUpstreamTransport()
	tr.now = clk.Now
	return tr, clk
}

func roundTrip(t *testing.T, tr http.RoundTripper, ctx context.Context, method, url string, body io.Reader) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, method, url, body)
	if err != nil {
		t.Fatal(err)
	}
	res, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	b, err := io.ReadAll(res.Body)
	res.Body.Close()
	if err != nil {
		t.Fatalf("%s %s: read body: %v", method, url, err)
	}
	return res, string(b)
}

func TestTransportReusesConnections(t *testing.T) {
	srv := newCountingServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, r.Method+" "+r.URL.Path)
	}))
	tr, _ := testTransport()
	for i := range 20 {
		method := http.MethodGet
		if i%2 == 1 {
			method = http.MethodHead
		}
		res, body := roundTrip(t, tr, context.Background(), method, srv.URL+"/a", nil)
		want := "GET /a"
		if method == http.MethodHead {
			want = ""
		}
		if res.StatusCode != 200 || body != want {
			t.Fatalf("%s: %d %q", method, res.StatusCode, body)
		}
	}
	if n := srv.conns.Load(); n != 1 {
		t.Errorf("20 sequential requests used %d connections, want 1", n)
	}
}

func TestTransportDropsConnectionsItCannotReuse(t *testing.T) {
	big := strings.Repeat("x", 1<<20)
	srv := newCountingServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/close":
			w.Header().Set("Connection", "close")
		case "/big":
			_, _ = io.WriteString(w, big)
		}
	}))
	tr, _ := testTransport()
	roundTrip(t, tr, context.Background(), "GET", srv.URL+"/close", nil)
	roundTrip(t, tr, context.Background(), "GET", srv.URL+"/", nil)
	if n := srv.conns.Load(); n != 2 {
		t.Fatalf("after a Connection: close answer: %d connections, want 2", n)
	}

	// A body closed before its end is not drained: its connection goes.
	req, _ := http.NewRequest("GET", srv.URL+"/big", nil)
	res, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(res.Body, make([]byte, 1024)); err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	roundTrip(t, tr, context.Background(), "GET", srv.URL+"/", nil)
	if n := srv.conns.Load(); n != 3 {
		t.Errorf("after an unfinished body: %d connections, want 3", n)
	}
}

func TestTransportStaleConnections(t *testing.T) {
	var deletes atomic.Int32
	srv := newCountingServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodDelete {
			deletes.Add(1)
		}
	}))
	tr, clk := testTransport()
	ctx := context.Background()

	// The workspace closed the pooled connection right after answering: a
	// GET is sent again on a new connection.
	roundTrip(t, tr, ctx, "GET", srv.URL+"/", nil)
	srv.CloseClientConnections()
	time.Sleep(50 * time.Millisecond)
	if res, _ := roundTrip(t, tr, ctx, "GET", srv.URL+"/", nil); res.StatusCode != 200 {
		t.Fatalf("GET after the workspace closed the connection: %d", res.StatusCode)
	}

	// A connection that idled long enough is checked before use, so even
	// a request that must not be sent twice finds a live one.
	srv.CloseClientConnections()
	time.Sleep(50 * time.Millisecond)
	clk.Add(2 * time.Second)
	if res, _ := roundTrip(t, tr, ctx, "DELETE", srv.URL+"/", nil); res.StatusCode != 200 {
		t.Fatalf("DELETE after idling: %d", res.StatusCode)
	}

	// Without the check (a fresh connection) a DELETE on a dead one is
	// not replayed: the caller gets the error and the workspace saw one.
	srv.CloseClientConnections()
	time.Sleep(50 * time.Millisecond)
	req, _ := http.NewRequest("DELETE", srv.URL+"/", nil)
	if res, err := tr.RoundTrip(req); err == nil {
		res.Body.Close()
		t.Fatal("DELETE on a connection the workspace had closed succeeded without a replay check")
	} else if !errors.Is(err, errClosedBeforeResponse) {
		t.Fatalf("DELETE on a dead connection: %v", err)
	}
	if n := deletes.Load(); n != 1 {
		t.Errorf("workspace saw %d DELETEs, want 1", n)
	}
}

func TestTransportIdleTimeout(t *testing.T) {
	srv := newCountingServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	other := newCountingServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	tr, clk := testTransport()
	roundTrip(t, tr, context.Background(), "GET", srv.URL+"/", nil)
	clk.Add(tr.idleTimeout + time.Second)
	// Traffic to another workspace sweeps the expired pool.
	roundTrip(t, tr, context.Background(), "GET", other.URL+"/", nil)
	tr.mu.Lock()
	_, kept := tr.idle[strings.TrimPrefix(srv.URL, "http://")]
	tr.mu.Unlock()
	if kept {
		t.Error("connection idle past the timeout still pooled")
	}
	roundTrip(t, tr, context.Background(), "GET", srv.URL+"/", nil)
	if n := srv.conns.Load(); n != 2 {
		t.Errorf("%d connections, want a new one after the idle timeout", n)
	}
}

func TestTransportCancellation(t *testing.T) {
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	srv := newCountingServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/stream" {
			_, _ = io.WriteString(w, "first")
			http.NewResponseController(w).Flush()
		}
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	tr, _ := testTransport()

	// Waiting for the response head.
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL+"/wait", nil)
	done := make(chan error, 1)
	go func() {
		res, err := tr.RoundTrip(req)
		if err == nil {
			res.Body.Close()
		}
		done <- err
	}()
	time.Sleep(100 * time.Millisecond)
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("cancelled while waiting for the head: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("cancellation did not stop a request waiting for its answer")
	}

	// Waiting in the middle of a streamed body.
	ctx, cancel = context.WithCancel(context.Background())
	req, _ = http.NewRequestWithContext(ctx, "GET", srv.URL+"/stream", nil)
	res, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		time.Sleep(100 * time.Millisecond)
		cancel()
	}()
	got, err := io.ReadAll(res.Body)
	res.Body.Close()
	if err == nil || string(got) != "first" {
		t.Fatalf("cancelled stream: %q, %v", got, err)
	}
	if pooled(tr) != 0 {
		t.Error("a cancelled connection went back to the pool")
	}
}

func TestTransportInterimAndUpgrade(t *testing.T) {
	srv := newCountingServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/hints":
			w.Header().Set("Link", "</style.css>; rel=preload")
			w.WriteHeader(http.StatusEarlyHints)
			_, _ = io.WriteString(w, "final")
		case "/upgrade":
			conn, brw, err := http.NewResponseController(w).Hijack()
			if err != nil {
				return
			}
			defer conn.Close()
			_, _ = brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\nhello ")
			_ = brw.Flush()
			line, _ := brw.ReadString('\n')
			_, _ = io.WriteString(conn, line)
		}
	}))
	tr, _ := testTransport()
	res, body := roundTrip(t, tr, context.Background(), "GET", srv.URL+"/hints", nil)
	if res.StatusCode != 200 || body != "final" {
		t.Fatalf("after early hints: %d %q", res.StatusCode, body)
	}

	req, _ := http.NewRequest("GET", srv.URL+"/upgrade", nil)
	req.Header.Set("Connection", "Upgrade")
	req.Header.Set("Upgrade", "echo")
	res, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	rw, ok := res.Body.(io.ReadWriteCloser)
	if res.StatusCode != http.StatusSwitchingProtocols || !ok {
		t.Fatalf("upgrade: %d, body %T", res.StatusCode, res.Body)
	}
	if _, err := io.WriteString(rw, "world\n"); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(rw).ReadString('\n')
	if err != nil || line != "hello world\n" {
		t.Fatalf("upgraded stream: %q, %v", line, err)
	}
}

func TestTransportBodiesUseTheStandardTransport(t *testing.T) {
	srv := newCountingServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(w, r.Body)
	}))
	tr, _ := testTransport()
	res, body := roundTrip(t, tr, context.Background(), "POST", srv.URL+"/", strings.NewReader("payload"))
	if res.StatusCode != 200 || body != "payload" {
		t.Fatalf("POST: %d %q", res.StatusCode, body)
	}
	if pooled(tr) != 0 {
		t.Error("a request with a body went through the pool")
	}
}

func TestTransportDropsConnectionsWithUnaskedBytes(t *testing.T) {
	// A workspace that writes more than its response: a raw server, since
	// net/http never does.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	var accepted atomic.Int32
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted.Add(1)
			go func() {
				defer c.Close()
				br := bufio.NewReader(c)
				for {
					if _, err := http.ReadRequest(br); err != nil {
						return
					}
					_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nokHTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\nforged")
				}
			}()
		}
	}()
	tr, _ := testTransport()
	url := "http://" + ln.Addr().String() + "/"
	for range 2 {
		if res, body := roundTrip(t, tr, context.Background(), "GET", url, nil); res.StatusCode != 200 || body != "ok" {
			t.Fatalf("got %d %q, want the real answer", res.StatusCode, body)
		}
	}
	if n := accepted.Load(); n != 2 {
		t.Errorf("%d connections, want the first one dropped", n)
	}
}

// pooled counts the idle connections of every host.
func pooled(tr *upstreamTransport) int {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	n := 0
	for _, conns := range tr.idle {
		n += len(conns)
	}
	return n
}
