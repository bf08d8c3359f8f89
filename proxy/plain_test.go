package proxy

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
)

const plainTestID = "01jb3x7k9q2m5n8p4r6s0t1v2w"

type nopActivity struct{}

func (nopActivity) Mark(string) {}

// rawUpstream is a workspace that hands every request it reads to the
// test and answers with the raw bytes given for the request's path.
type rawUpstream struct {
	addr     string
	requests chan *http.Request
}

// rawAnswer is a response as the workspace writes it; close ends the
// connection after it.
type rawAnswer struct {
	raw   string
	close bool
}

func startRawUpstream(t *testing.T, answers map[string]rawAnswer) *rawUpstream {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	u := &rawUpstream{addr: ln.Addr().String(), requests: make(chan *http.Request, 16)}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go u.serve(c, answers)
		}
	}()
	return u
}

func (u *rawUpstream) serve(c net.Conn, answers map[string]rawAnswer) {
	defer c.Close()
	br := bufio.NewReader(c)
	for {
		req, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		u.requests <- req
		a, ok := answers[req.URL.Path]
		if !ok {
			a = rawAnswer{raw: "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"}
		}
		if _, err := io.WriteString(c, a.raw); err != nil || a.close {
			return
		}
	}
}

// frontServer serves requests for workspace plainTestID from upstream
// through p: "reverseproxy" always takes httputil.ReverseProxy, "plain"
// always the plain path, and "dispatch" chooses as the proxy does.
func frontServer(t *testing.T, p *Proxy, upstream, via string) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec := &responseRecorder{ResponseWriter: w, activity: nopActivity{}, workspaceID: plainTestID}
		tg, ok := p.locate(rec, r)
		if !ok {
			return
		}
		tg.hostport = upstream
		if p.opts.UpstreamToken != nil {
			tg.token = p.opts.UpstreamToken(tg.id, "run1")
		}
		switch via {
		case "reverseproxy":
			p.rp.ServeHTTP(rec, r.WithContext(context.WithValue(r.Context(), targetKey{}, tg)))
		case "plain":
			p.forwardPlain(rec, r, &tg)
		default:
			p.forward(rec, r, tg)
		}
	}))
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://")
}

// keptFront serves requests for workspace plainTestID from upstream
// through p's own ServeHTTP, with the route cached, behind a listener from
// which p takes connections over. Requests the proxy does not serve get
// "not proxied" from the server, as the API would answer them.
func keptFront(t *testing.T, p *Proxy, upstream string, idle, header time.Duration) (string, *Listener) {
	t.Helper()
	p.auth = userAuth("u")
	rt := route{owner: "u", upstream: upstream, name: "web"}
	if p.opts.UpstreamToken != nil {
		rt.token = p.opts.UpstreamToken(plainTestID, "run1")
	}
	p.routes.ttl = time.Hour
	p.routes.put(plainTestID, rt)
	p.activity = nopActivity{}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := p.Listen(ln, idle, header)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !p.opts.Sites.Proxies(r) {
			_, _ = io.WriteString(w, "not proxied")
			return
		}
		p.ServeHTTP(w, r)
	}), IdleTimeout: idle, ReadHeaderTimeout: header}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close() })
	return ln.Addr().String(), l
}

// userAuth accepts every request as the user it names.
type userAuth string

func (u userAuth) SessionUser(*http.Request, string) (string, bool, error) {
	return string(u), true, nil
}
func (userAuth) Handoff(*http.Request, string) (string, bool, error) { return "", false, nil }
func (userAuth) Redeem(context.Context, string, string) (*http.Cookie, bool, error) {
	return nil, false, nil
}

// waitFor polls cond for up to 5 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// keptConns is how many connections l's proxy serves itself now.
func keptConns(l *Listener) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.kept)
}

func newTestProxy(t *testing.T, opts Options) *Proxy {
	t.Helper()
	sites, err := NewSites("http://127.0.0.1:8080", "")
	if err != nil {
		t.Fatal(err)
	}
	opts.Sites = sites
	opts.SessionCookie = "codehub_session"
	p, err := New(hclog.NewNullLogger(), opts, nil, nil, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.transport.fallback.CloseIdleConnections() })
	return p
}

// exchangeRaw sends head (a request line and header lines, without the
// blank line that ends them) to addr on a connection of its own and reads
// the whole answer.
func exchangeRaw(t *testing.T, addr, method, head string, again bool) (*http.Response, string) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	br := bufio.NewReader(c)
	res, body := sendHead(t, c, br, method, head)
	if again {
		sendAgain(t, c, br, method, head, body)
	}
	return res, body
}

// sendAgain sends head once more on c and requires the same body: the
// first answer ended where its framing said, and nothing of it is read as
// the second.
func sendAgain(t *testing.T, c net.Conn, br *bufio.Reader, method, head, body string) {
	t.Helper()
	if _, second := sendHead(t, c, br, method, head); second != body {
		t.Errorf("the second answer on the connection has body %q, want %q", second, body)
	}
}

// sendHead writes head and the blank line after it on c and reads the
// whole answer from br, without its Date.
func sendHead(t *testing.T, c net.Conn, br *bufio.Reader, method, head string) (*http.Response, string) {
	t.Helper()
	if _, err := io.WriteString(c, strings.ReplaceAll(head, "\n", "\r\n")+"\r\n"); err != nil {
		t.Fatal(err)
	}
	res, err := http.ReadResponse(br, &http.Request{Method: method})
	if err != nil {
		t.Fatalf("%s: read response: %v", strings.SplitN(head, "\n", 2)[0], err)
	}
	body, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatalf("%s: read body: %v", strings.SplitN(head, "\n", 2)[0], err)
	}
	res.Header.Del("Date")
	return res, string(body)
}

// exchangeKept sends a plain request on a new connection to the kept
// front at addr, so that the proxy takes the connection over, and then
// head on the same connection; it returns the second answer.
func exchangeKept(t *testing.T, addr string, l *Listener, requests <-chan *http.Request, method, head string, again bool) (*http.Response, string) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		// The next exchange counts its own connection alone.
		c.Close()
		waitFor(t, "the proxy to end the connection", func() bool { return keptConns(l) == 0 })
	}()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	br := bufio.NewReader(c)
	if _, err := io.WriteString(c, "GET /w/"+plainTestID+"/warm HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	warm, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("first request: %v", err)
	}
	_, _ = io.Copy(io.Discard, warm.Body)
	warm.Body.Close()
	<-requests
	if n := keptConns(l); n != 1 {
		t.Fatalf("after a plain request the proxy serves %d connections itself, want 1", n)
	}
	res, body := sendHead(t, c, br, method, head)
	if again {
		sendAgain(t, c, br, method, head, body)
	}
	return res, body
}

// seen is what a workspace saw of one request.
type seen struct {
	Method, RequestURI, Host string
	Header                   http.Header
}

// received is what a client received of one answer.
type received struct {
	Status           int
	Header, Trailer  http.Header
	TransferEncoding []string
	Body             string
}

// TestPlainPathMatchesReverseProxy: for requests the plain path takes, the
// workspace sees the same request and the client the same answer as
// through httputil.ReverseProxy, and every request, plain or not, comes
// out of the proxy's own choice of path as it would from ReverseProxy.
// Each case also states the rules themselves, so that a fault both paths
// shared would not pass either.
func TestPlainPathMatchesReverseProxy(t *testing.T) {
	answers := map[string]rawAnswer{
		"/hop": {raw: "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: keep-alive, X-Resp-Hop\r\nX-Resp-Hop: 1\r\n" +
			"Keep-Alive: timeout=5\r\nProxy-Authenticate: Basic\r\nUpgrade: h2c\r\nX-Kept: yes\r\nX-Kept: again\r\n" +
			"Set-Cookie: codehub_session=planted; Path=/\r\nSet-Cookie: a=1\r\nSet-Cookie: code-server-session=planted\r\n" +
			"Set-Cookie: code-server-session\r\n\r\nok"},
		"/credentials-only": {raw: "HTTP/1.1 200 OK\r\nContent-Length: 0\r\nSet-Cookie: codehub_session=x\r\n\r\n"},
		"/trailers": {raw: "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Type: text/plain\r\nTrailer: X-Sum\r\n\r\n" +
			"3\r\none\r\n3\r\ntwo\r\n0\r\nX-Sum: 6\r\nX-Late: yes\r\n\r\n"},
		"/announced":    {raw: "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Type: text/plain\r\nTrailer: X-Sum\r\n\r\n3\r\none\r\n0\r\nX-Sum: 3\r\n\r\n"},
		"/chunked":      {raw: "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Type: text/plain\r\n\r\n3\r\none\r\n3\r\ntwo\r\n0\r\n\r\n"},
		"/until-close":  {raw: "HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\n\r\nall of it", close: true},
		"/no-content":   {raw: "HTTP/1.1 204 No Content\r\nX-Kept: yes\r\n\r\n"},
		"/not-modified": {raw: "HTTP/1.1 304 Not Modified\r\nEtag: \"v1\"\r\n\r\n"},
		"/hints": {raw: "HTTP/1.1 103 Early Hints\r\nLink: </a.css>; rel=preload\r\n\r\n" +
			"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nfinal"},
		"/head":  {raw: "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Type: text/plain\r\n\r\n"},
		"/close": {raw: "HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 4\r\n\r\nbye.", close: true},
		// The workspace names the length as hop-by-hop: the client must
		// still learn where the body ends.
		"/length-hop": {raw: "HTTP/1.1 200 OK\r\nConnection: Content-Length\r\nContent-Length: 5\r\nContent-Type: text/plain\r\n\r\nfirst"},
	}
	up := startRawUpstream(t, answers)
	prefix := "/w/" + plainTestID
	everything := `Connection: keep-alive, X-Hop
X-Hop: secret
Keep-Alive: timeout=5
Proxy-Connection: keep-alive
Proxy-Authorization: Basic eDp5
Te: trailers, deflate
Trailer: X-Foo
Authorization: Bearer secret
Cookie: codehub_session=s; theirs=1
Cookie: code-server-session=forged;  other=2
Forwarded: for=192.0.2.1
X-Forwarded-For: 203.0.113.7
X-Forwarded-For: 198.51.100.1
X-Forwarded-Host: code.example.com
X-Forwarded-Proto: https
X-Forwarded-Port: 8443
X-Forwarded-Prefix: /elsewhere
X-Custom: a
X-Custom: b
Accept: */*
Content-Length: 0
User-Agent: agent/1`
	cases := []struct {
		name, method, target, headers string
		// plain is whether the proxy takes the plain path.
		plain bool
		// again sends the request a second time on the same connection.
		again bool
		// check states the rules for this case on what the workspace saw
		// and the client received through the proxy's choice of path.
		check func(t *testing.T, trusted bool, s seen, r received)
	}{
		{name: "every kind of header", method: "GET", target: "/hop?x=1&y=%41", headers: everything, plain: true,
			check: func(t *testing.T, trusted bool, s seen, r received) {
				for _, name := range []string{"Connection", "X-Hop", "Keep-Alive", "Proxy-Connection", "Proxy-Authorization",
					"Trailer", "Authorization", "Forwarded", "Content-Length"} {
					if v, ok := s.Header[name]; ok {
						t.Errorf("the workspace saw %s %q", name, v)
					}
				}
				want := map[string]string{
					"Te": "trailers", "User-Agent": "agent/1", "X-Forwarded-For": "127.0.0.1",
					"X-Forwarded-Host": "127.0.0.1", "X-Forwarded-Proto": "http", "X-Forwarded-Prefix": prefix,
					"X-Forwarded-Port": "", "Cookie": "theirs=1; other=2; code-server-session=token-of-" + plainTestID + "-run1",
				}
				if trusted {
					want["X-Forwarded-For"] = "203.0.113.7, 198.51.100.1, 127.0.0.1"
					want["X-Forwarded-Host"] = "code.example.com"
					want["X-Forwarded-Proto"] = "https"
					want["X-Forwarded-Port"] = "8443"
					want["Cookie"] = "theirs=1; code-server-session=forged; other=2"
				}
				for name, v := range want {
					if got := strings.Join(s.Header[name], " | "); got != v {
						t.Errorf("the workspace saw %s %q, want %q", name, got, v)
					}
				}
				if s.RequestURI != "/hop?x=1&y=%41" || strings.Join(s.Header["X-Custom"], ",") != "a,b" {
					t.Errorf("the workspace saw %s with X-Custom %q", s.RequestURI, s.Header["X-Custom"])
				}
				for _, name := range []string{"Connection", "X-Resp-Hop", "Keep-Alive", "Proxy-Authenticate", "Upgrade"} {
					if v, ok := r.Header[name]; ok {
						t.Errorf("the client got %s %q", name, v)
					}
				}
				wantCookies := []string{"a=1"}
				if trusted {
					wantCookies = []string{"a=1", "code-server-session=planted", "code-server-session"}
				}
				if !slices.Equal(r.Header["Set-Cookie"], wantCookies) || strings.Join(r.Header["X-Kept"], ",") != "yes,again" || r.Body != "ok" {
					t.Errorf("the client got %+v", r)
				}
			}},
		{name: "only credential cookies set", method: "GET", target: "/credentials-only", plain: true,
			check: func(t *testing.T, _ bool, _ seen, r received) {
				if v, ok := r.Header["Set-Cookie"]; ok {
					t.Errorf("the client got Set-Cookie %q", v)
				}
			}},
		{name: "announced and unannounced trailers", method: "GET", target: "/trailers", plain: true,
			check: func(t *testing.T, _ bool, _ seen, r received) {
				if r.Body != "onetwo" || r.Trailer.Get("X-Sum") != "6" || r.Trailer.Get("X-Late") != "yes" {
					t.Errorf("the client got %+v", r)
				}
			}},
		{name: "announced trailers", method: "GET", target: "/announced", plain: true,
			check: func(t *testing.T, _ bool, _ seen, r received) {
				if r.Body != "one" || r.Trailer.Get("X-Sum") != "3" {
					t.Errorf("the client got %+v", r)
				}
			}},
		{name: "chunked", method: "GET", target: "/chunked", plain: true},
		{name: "body until close", method: "GET", target: "/until-close", plain: true},
		{name: "no content", method: "GET", target: "/no-content", plain: true},
		{name: "not modified", method: "GET", target: "/not-modified", headers: `If-None-Match: "v1"`, plain: true},
		{name: "early hints", method: "GET", target: "/hints", plain: true},
		{name: "head", method: "HEAD", target: "/head", plain: true},
		{name: "workspace closes", method: "GET", target: "/close", plain: true},
		{name: "length named by Connection", method: "GET", target: "/length-hop", plain: true, again: true,
			check: func(t *testing.T, _ bool, _ seen, r received) {
				if r.Body != "first" {
					t.Errorf("the client got %+v", r)
				}
			}},
		{name: "empty user agent", method: "GET", target: "/ua", headers: "User-Agent: ", plain: true,
			check: func(t *testing.T, _ bool, s seen, _ received) {
				if v, ok := s.Header["User-Agent"]; ok {
					t.Errorf("the workspace saw User-Agent %q", v)
				}
			}},
		{name: "empty query", method: "GET", target: "/q?", plain: true},
		{name: "escaped path", method: "GET", target: "/caf%C3%A9/%7Euser/a%41", plain: true},
		{name: "workspace root", method: "GET", target: "/", plain: true},
		{name: "query with semicolon", method: "GET", target: "/q?a=1;b=2&c=3"},
		{name: "query with a bad escape", method: "GET", target: "/q?a=%zz&b=1"},
		{name: "options", method: "OPTIONS", target: "/x"},
		{name: "post without body", method: "POST", target: "/x", headers: "Content-Length: 0"},
		{name: "upgrade not asked for by Connection", method: "GET", target: "/x", headers: "Upgrade: h2c"},
		{name: "expectation", method: "GET", target: "/x", headers: "Expect: 100-continue"},
	}
	for _, cfg := range []struct {
		name    string
		trusted bool
	}{{"untrusted client, upstream token", false}, {"trusted proxy, no upstream token", true}} {
		opts := Options{UpstreamToken: func(id, run string) string { return "token-of-" + id + "-" + run }}
		if cfg.trusted {
			opts = Options{TrustedProxies: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}}
		}
		p := newTestProxy(t, opts)
		fronts := map[string]string{}
		for _, via := range []string{"reverseproxy", "plain", "dispatch"} {
			fronts[via] = frontServer(t, p, up.addr, via)
		}
		kp := newTestProxy(t, opts)
		keptAddr, keptListener := keptFront(t, kp, up.addr, time.Minute, 10*time.Second)
		for _, tc := range cases {
			t.Run(cfg.name+"/"+tc.name, func(t *testing.T) {
				through := func(via string) (seen, received) {
					head := tc.method + " " + prefix + tc.target + " HTTP/1.1\nHost: 127.0.0.1"
					if tc.headers != "" {
						head += "\n" + tc.headers
					}
					var res *http.Response
					var body string
					if via == "kept" {
						res, body = exchangeKept(t, keptAddr, keptListener, up.requests, tc.method, head+"\n", tc.again)
					} else {
						res, body = exchangeRaw(t, fronts[via], tc.method, head+"\n", tc.again)
					}
					var s seen
					select {
					case req := <-up.requests:
						s = seen{req.Method, req.RequestURI, req.Host, req.Header}
					case <-time.After(5 * time.Second):
						t.Fatalf("through %s the workspace got no request", via)
					}
					if tc.again {
						<-up.requests
					}
					return s, received{res.StatusCode, res.Header, res.Trailer, res.TransferEncoding, body}
				}
				wantSeen, wantReceived := through("reverseproxy")
				vias := []string{"dispatch", "kept"}
				if tc.plain {
					vias = append(vias, "plain")
				}
				for _, via := range vias {
					s, r := through(via)
					if !reflect.DeepEqual(s, wantSeen) {
						t.Errorf("through %s the workspace saw\n%+v\nthrough ReverseProxy\n%+v", via, s, wantSeen)
					}
					if !reflect.DeepEqual(r, wantReceived) {
						t.Errorf("through %s the client received\n%+v\nthrough ReverseProxy\n%+v", via, r, wantReceived)
					}
					if tc.check != nil {
						tc.check(t, cfg.trusted, s, r)
					}
				}
			})
		}
	}
}

// TestIsPlain: the plain path takes bodiless GETs and HEADs that need
// nothing of ReverseProxy's, and nothing else.
func TestIsPlain(t *testing.T) {
	get := func(target string, header ...string) *http.Request {
		r := httptest.NewRequest("GET", target, nil)
		for i := 0; i+1 < len(header); i += 2 {
			r.Header.Add(header[i], header[i+1])
		}
		return r
	}
	with := func(r *http.Request, change func(*http.Request)) *http.Request {
		change(r)
		return r
	}
	cases := []struct {
		name string
		r    *http.Request
		want bool
	}{
		{"get", get("/w/x/a?b=1&c=%41"), true},
		{"head", httptest.NewRequest("HEAD", "/w/x/", nil), true},
		{"hop-by-hop and trailers asked for", get("/w/x/", "Connection", "keep-alive", "Te", "trailers"), true},
		{"post", httptest.NewRequest("POST", "/w/x/", strings.NewReader("a")), false},
		{"post without body", httptest.NewRequest("POST", "/w/x/", nil), false},
		{"options", httptest.NewRequest("OPTIONS", "/w/x/", nil), false},
		{"get with body", httptest.NewRequest("GET", "/w/x/", strings.NewReader("a")), false},
		{"chunked get", with(get("/w/x/"), func(r *http.Request) { r.TransferEncoding = []string{"chunked"} }), false},
		{"websocket", get("/w/x/ws", "Connection", "Upgrade", "Upgrade", "websocket"), false},
		{"upgrade alone", get("/w/x/", "Upgrade", "h2c"), false},
		{"expectation", get("/w/x/", "Expect", "100-continue"), false},
		{"semicolon in query", get("/w/x/?a=1;b=2"), false},
		{"bad escape in query", get("/w/x/?a=%zz"), false},
		{"escape cut short", get("/w/x/?a=%4"), false},
		{"no host", with(get("/w/x/"), func(r *http.Request) { r.Host = "" }), false},
		{"host with zone", with(get("/w/x/"), func(r *http.Request) { r.Host = "[fe80::1%25eth0]:8080" }), false},
		{"non-ascii host", with(get("/w/x/"), func(r *http.Request) { r.Host = "bücher.example" }), false},
		{"opaque url", with(get("/w/x/"), func(r *http.Request) { r.URL.Opaque = "//other/w/x/" }), false},
	}
	for _, tc := range cases {
		if got := isPlain(tc.r); got != tc.want {
			t.Errorf("%s: isPlain = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestPlainStreaming: an answer without a length reaches the client as
// the workspace sends it, its head at once, and so does an event stream
// that has a length. The same holds through ReverseProxy.
func TestPlainStreaming(t *testing.T) {
	release := make(chan struct{})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rc := http.NewResponseController(w)
		switch r.URL.Path {
		case "/held":
			w.Header().Set("Content-Type", "text/plain")
			w.WriteHeader(http.StatusOK)
		case "/events":
			w.Header().Set("Content-Type", "text/event-stream; charset=utf-8")
			w.Header().Set("Content-Length", "16")
			_, _ = io.WriteString(w, "data: 1\n\n")
		}
		_ = rc.Flush()
		select {
		case <-release:
		case <-r.Context().Done():
			return
		}
		_, _ = io.WriteString(w, "data: 2")
	}))
	t.Cleanup(up.Close)
	t.Cleanup(func() { close(release) })
	p := newTestProxy(t, Options{})
	for _, via := range []string{"reverseproxy", "dispatch"} {
		front := frontServer(t, p, strings.TrimPrefix(up.URL, "http://"), via)
		for _, tc := range []struct{ path, first string }{{"/held", ""}, {"/events", "data: 1\n\n"}} {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			req, _ := http.NewRequestWithContext(ctx, "GET", "http://"+front+"/w/"+plainTestID+tc.path, nil)
			res, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatalf("%s through %s: the head did not come before the rest: %v", tc.path, via, err)
			}
			got := make([]byte, len(tc.first))
			if _, err := io.ReadFull(res.Body, got); err != nil || string(got) != tc.first {
				t.Errorf("%s through %s: first part %q, %v", tc.path, via, got, err)
			}
			res.Body.Close()
			cancel()
		}
	}
}

// TestPlainAbortsTruncatedAnswers: an answer the workspace breaks off
// reaches the client broken off too, never as a complete shorter one.
func TestPlainAbortsTruncatedAnswers(t *testing.T) {
	up := startRawUpstream(t, map[string]rawAnswer{
		"/length":  {raw: "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nhello", close: true},
		"/chunked": {raw: "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n", close: true},
	})
	p := newTestProxy(t, Options{})
	front := frontServer(t, p, up.addr, "dispatch")
	for _, path := range []string{"/length", "/chunked"} {
		// Nothing of an answer with a length may have left yet.
		res, err := http.Get("http://" + front + "/w/" + plainTestID + path)
		if err != nil {
			continue
		}
		body, err := io.ReadAll(res.Body)
		res.Body.Close()
		if !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Errorf("%s: the client read %q, %v; want the answer broken off", path, body, err)
		}
	}
}

// TestPlainHeaderRules states the pure rules of the plain path.
func TestPlainHeaderRules(t *testing.T) {
	connection := []string{"keep-alive, X-Named", " x-other "}
	for _, tc := range []struct {
		name             string
		hop, kept, trust bool
	}{
		{"Accept", false, true, true},
		{"X-Named", true, false, false},
		{"X-Other", true, false, false},
		{"Keep-Alive", true, false, false},
		{"Te", true, false, false},
		{"Proxy-Authorization", true, false, false},
		{"Cookie", false, false, false},
		{"Authorization", false, false, false},
		{"User-Agent", false, false, false},
		{"Content-Length", false, false, false},
		{"X-Forwarded-For", false, false, false},
		{"X-Forwarded-Prefix", false, false, false},
		{"X-Forwarded-Port", false, false, true},
		{"Forwarded", false, false, false},
	} {
		if got := hopByHop(tc.name, connection); got != tc.hop {
			t.Errorf("hopByHop(%s) = %v, want %v", tc.name, got, tc.hop)
		}
		if got := requestHeaderKept(tc.name, connection, false); got != tc.kept {
			t.Errorf("requestHeaderKept(%s, untrusted) = %v, want %v", tc.name, got, tc.kept)
		}
		if got := requestHeaderKept(tc.name, connection, true); got != (tc.kept || tc.trust) {
			t.Errorf("requestHeaderKept(%s, trusted) = %v, want %v", tc.name, got, tc.kept || tc.trust)
		}
	}
	for ct, want := range map[string]bool{
		"text/event-stream": true, "Text/Event-Stream ; charset=utf-8": true, "text/plain": false, "": false,
	} {
		if got := isEventStream(ct); got != want {
			t.Errorf("isEventStream(%q) = %v, want %v", ct, got, want)
		}
	}
	p := &Proxy{opts: Options{SessionCookie: "codehub_session", UpstreamToken: func(string, string) string { return "t" }}}
	in := []string{"a=1", "codehub_session=x; Path=/", "b=2", " code-server-session ; Path=/", "codehub_host_session=y"}
	if got := p.keptCookies(in); !slices.Equal(got, []string{"a=1", "b=2"}) || !slices.Equal(in, []string{"a=1", "codehub_session=x; Path=/", "b=2", " code-server-session ; Path=/", "codehub_host_session=y"}) {
		t.Errorf("keptCookies = %q (input now %q)", got, in)
	}
	all := []string{"a=1", "b=2"}
	if got := p.keptCookies(all); !slices.Equal(got, all) {
		t.Errorf("keptCookies of cookies that are all kept = %q", got)
	}
}
