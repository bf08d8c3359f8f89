package proxy

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"github.com/hashicorp/go-hclog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"

	"github.com/codehub-io/codehub/workspace"
)

func TestDecide(t *testing.T) {
	const (
		run     = workspace.DesiredRunning
		standby = workspace.DesiredStandby
		archive = workspace.DesiredArchived
	)
	cases := []struct {
		phase    workspace.Phase
		desired  workspace.DesiredState
		op       workspace.Operation
		navigate bool
		want     verdict
	}{
		{workspace.PhaseRunning, run, workspace.OpNone, true, verdictProxy},
		{workspace.PhaseRunning, run, workspace.OpNone, false, verdictProxy},
		{workspace.PhaseRunning, standby, workspace.OpNone, true, verdictWakeAndProxy},
		{workspace.PhaseRunning, standby, workspace.OpNone, false, verdictProxy},
		{workspace.PhaseRunning, archive, workspace.OpNone, false, verdictProxy},
		{workspace.PhaseRunning, standby, workspace.OpStopping, true, verdictStarting},
		{workspace.PhaseRunning, run, workspace.OpStarting, true, verdictStarting},
		{workspace.PhaseRunning, run, workspace.OpStarting, false, verdictStarting},
		{workspace.PhaseStandby, standby, workspace.OpNone, true, verdictWake},
		{workspace.PhaseStandby, standby, workspace.OpNone, false, verdictNotStarted},
		{workspace.PhaseStandby, archive, workspace.OpNone, true, verdictWake},
		{workspace.PhaseStandby, run, workspace.OpNone, true, verdictStarting},
		{workspace.PhaseStandby, run, workspace.OpStarting, true, verdictStarting},
		{workspace.PhaseStandby, archive, workspace.OpArchiving, true, verdictStarting},
		{workspace.PhaseArchived, archive, workspace.OpNone, true, verdictArchived},
		{workspace.PhaseArchived, archive, workspace.OpNone, false, verdictArchived},
		{workspace.PhaseArchived, run, workspace.OpNone, true, verdictStarting},
		{workspace.PhaseArchived, run, workspace.OpRestoring, true, verdictStarting},
		{workspace.PhasePending, standby, workspace.OpNone, true, verdictNotStarted},
		{workspace.PhasePending, run, workspace.OpNone, true, verdictStarting},
		{workspace.PhasePending, run, workspace.OpProvisioning, true, verdictStarting},
		{workspace.PhaseError, run, workspace.OpNone, true, verdictError},
		{workspace.PhaseDeleting, workspace.DesiredDeleted, workspace.OpDeleting, true, verdictGone},
		{workspace.PhaseDeleted, workspace.DesiredDeleted, workspace.OpNone, true, verdictGone},
	}
	for _, tc := range cases {
		if got := decide(tc.phase, tc.desired, tc.op, tc.navigate); got != tc.want {
			t.Errorf("decide(%s, %s, %s, navigate=%v) = %d, want %d", tc.phase, tc.desired, tc.op, tc.navigate, got, tc.want)
		}
	}
}

// Header sets as Chromium sends them (measured on code-server's workbench).
var (
	browserNavigation = map[string]string{"Accept": "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8",
		"Sec-Fetch-Mode": "navigate", "Sec-Fetch-Dest": "document", "Sec-Fetch-Site": "none", "Upgrade-Insecure-Requests": "1"}
	// A page load from a plain-http host other than localhost: no Fetch
	// Metadata.
	plainHTTPNavigation = map[string]string{"Accept": "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8", "Upgrade-Insecure-Requests": "1"}
	webviewFrame        = map[string]string{"Accept": "text/html,application/xhtml+xml", "Sec-Fetch-Mode": "navigate",
		"Sec-Fetch-Dest": "iframe", "Upgrade-Insecure-Requests": "1"}
	socketHandshake = map[string]string{"Connection": "Upgrade", "Upgrade": "websocket", "Sec-WebSocket-Version": "13"}
)

func TestIsNavigation(t *testing.T) {
	cases := []struct {
		name    string
		headers map[string]string
		want    bool
	}{
		{"page navigation", browserNavigation, true},
		{"page navigation on a plain-http host", plainHTTPNavigation, true},
		{"navigation without a destination", map[string]string{"Sec-Fetch-Mode": "navigate"}, true},
		{"webview frame", webviewFrame, false},
		{"service worker update", map[string]string{"Sec-Fetch-Mode": "same-origin", "Sec-Fetch-Dest": "serviceworker"}, false},
		{"websocket", map[string]string{"Sec-Fetch-Mode": "websocket", "Sec-Fetch-Dest": "empty"}, false},
		{"websocket reconnect (no fetch metadata)", socketHandshake, false},
		{"websocket reconnect on a plain-http host asking for HTML", merge(socketHandshake, plainHTTPNavigation), false},
		{"fetch from a page", map[string]string{"Sec-Fetch-Mode": "cors", "Sec-Fetch-Dest": "empty"}, false},
		{"fetch on a plain-http host", map[string]string{"Accept": "*/*"}, false},
		{"fetch of HTML on a plain-http host", map[string]string{"Accept": "text/html"}, false},
		{"client without fetch metadata", nil, false},
		{"dest without mode", map[string]string{"Sec-Fetch-Dest": "script", "Accept": "text/html", "Upgrade-Insecure-Requests": "1"}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := isNavigation(requestWith(http.MethodGet, tc.headers)); got != tc.want {
				t.Errorf("isNavigation = %v, want %v", got, tc.want)
			}
		})
	}
}

// requestWith is a request for a workspace page with these headers.
func requestWith(method string, headers map[string]string) *http.Request {
	r := httptest.NewRequest(method, "/w/x/", nil)
	for k, v := range headers {
		r.Header.Set(k, v)
	}
	return r
}

func merge(sets ...map[string]string) map[string]string {
	m := map[string]string{}
	for _, s := range sets {
		for k, v := range s {
			m[k] = v
		}
	}
	return m
}

func TestIsActivity(t *testing.T) {
	cases := []struct {
		name    string
		method  string
		headers map[string]string
		want    bool
	}{
		{"opening the workbench", http.MethodGet, browserNavigation, true},
		{"form post", http.MethodPost, map[string]string{"Sec-Fetch-Mode": "navigate", "Sec-Fetch-Dest": "document"}, true},
		{"upload from a script", http.MethodPut, map[string]string{"Sec-Fetch-Mode": "cors", "Sec-Fetch-Dest": "empty"}, true},
		{"delete from a script", http.MethodDelete, nil, true},
		{"webview frame an idle page loads", http.MethodGet, webviewFrame, false},
		{"image", http.MethodGet, map[string]string{"Sec-Fetch-Mode": "no-cors", "Sec-Fetch-Dest": "image"}, false},
		{"resource fetch", http.MethodGet, map[string]string{"Sec-Fetch-Mode": "cors", "Sec-Fetch-Dest": "empty"}, false},
		{"websocket handshake", http.MethodGet, socketHandshake, false},
		{"HEAD", http.MethodHead, nil, false},
		{"preflight", http.MethodOptions, map[string]string{"Sec-Fetch-Mode": "cors"}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := isActivity(requestWith(tc.method, tc.headers)); got != tc.want {
				t.Errorf("isActivity = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestStripCredentials(t *testing.T) {
	cases := []struct {
		name    string
		cookies []string
		want    string
	}{
		{"only ours", []string{"codehub_session=abc"}, ""},
		{"ours among others", []string{"a=1; codehub_session=abc; b=2"}, "a=1; b=2"},
		{"several headers", []string{"codehub_session=abc", "vscode-tkn=x"}, "vscode-tkn=x"},
		{"prefix is not ours", []string{"codehub_session_x=1; xcodehub_session=2"}, "codehub_session_x=1; xcodehub_session=2"},
		{"spaces", []string{" codehub_session = abc ;  a=1 "}, "a=1"},
		{"none", nil, ""},
		{"code-server's too", []string{"code-server-session=forged; a=1; codehub_session=abc"}, "a=1"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := http.Header{"Authorization": {"Bearer x"}}
			for _, c := range tc.cookies {
				h.Add("Cookie", c)
			}
			stripCredentials(h, func(name string) bool { return name == "codehub_session" || name == CodeServerCookie })
			if got := h.Get("Cookie"); got != tc.want {
				t.Fatalf("Cookie = %q, want %q", got, tc.want)
			}
			if len(h.Values("Cookie")) > 1 {
				t.Fatalf("several Cookie headers left: %q", h.Values("Cookie"))
			}
			if h.Get("Authorization") != "" {
				t.Fatal("Authorization kept")
			}
		})
	}
}

func TestTrustedPeer(t *testing.T) {
	trusted := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("::1/128")}
	cases := map[string]bool{
		"10.1.2.3:4444":        true,
		"[::ffff:10.1.2.3]:1":  true,
		"[::1]:80":             true,
		"11.0.0.1:80":          false,
		"garbage":              false,
		"127.0.0.1:80":         false,
		"[2001:db8::1]:443":    false,
		"10.0.0.1":             true,
		"[fe80::1%eth0]:12345": false,
	}
	for addr, want := range cases {
		if got := trustedPeer(addr, trusted); got != want {
			t.Errorf("trustedPeer(%q) = %v, want %v", addr, got, want)
		}
	}
	if trustedPeer("10.0.0.1:1", nil) {
		t.Error("no trusted proxies configured, yet a peer was trusted")
	}
}

func TestSites(t *testing.T) {
	const id = "01jb3x7k9q2m5n8p4r6s0t1v2w"
	path, err := NewSites("https://code.example.com/", "")
	if err != nil {
		t.Fatal(err)
	}
	if got := path.WorkspaceURL(id); got != "https://code.example.com/w/"+id+"/" {
		t.Errorf("path mode url %q", got)
	}
	if _, ok := path.WorkspaceFromHost(id + ".ws.example.com"); ok {
		t.Error("path mode resolved a subdomain")
	}
	sub, err := NewSites("https://code.example.com", "ws.example.com")
	if err != nil {
		t.Fatal(err)
	}
	if got := sub.WorkspaceURL(id); got != "https://"+id+".ws.example.com/" {
		t.Errorf("subdomain url %q", got)
	}
	hosts := map[string]bool{
		id + ".ws.example.com":       true,
		id + ".WS.example.com:443":   true,
		"x" + id + ".ws.example.com": false,
		id + ".ws.example.com.evil":  false,
		"ws.example.com":             false,
		"01JB.ws.example.com":        false,
		id + ".other.example.com":    false,
	}
	for host, want := range hosts {
		got, ok := sub.WorkspaceFromHost(host)
		if ok != want || (ok && got != id) {
			t.Errorf("WorkspaceFromHost(%q) = %q, %v", host, got, ok)
		}
	}
	ported, err := NewSites("http://localhost:8080", "localhost")
	if err != nil {
		t.Fatal(err)
	}
	if got := ported.WorkspaceURL(id); got != "http://"+id+".localhost:8080/" {
		t.Errorf("subdomain url with the public url's port %q", got)
	}
	if got, ok := ported.WorkspaceFromHost(id + ".localhost:8080"); !ok || got != id {
		t.Errorf("WorkspaceFromHost with port = %q, %v", got, ok)
	}
	for _, bad := range []string{"ftp://x", "code.example.com", "https://code.example.com/sub"} {
		if _, err := NewSites(bad, ""); err == nil {
			t.Errorf("NewSites(%q) accepted", bad)
		}
	}
}

func TestValidID(t *testing.T) {
	cases := map[string]bool{
		"01m8bwqc8xhegwnzfrq3ms93np":  true,
		"0123456789abcdefghjkmnpqrs":  true,
		"tvwxyz0123456789abcdefghjk":  true,
		"01M8BWQC8XHEGWNZFRQ3MS93NP":  false, // ids are lower case
		"01m8bwqc8xhegwnzfrq3ms93n":   false,
		"01m8bwqc8xhegwnzfrq3ms93npq": false,
		"01m8bwqc8xhegwnzfrq3ms93ni":  false, // i, l, o and u are not base32
		"01m8bwqc8xhegwnzfrq3ms93nl":  false,
		"01m8bwqc8xhegwnzfrq3ms93no":  false,
		"01m8bwqc8xhegwnzfrq3ms93nu":  false,
		"01m8bwqc8xhegwnzfrq3ms93n/":  false,
		"01m8bwqc8xhegwnzfrq3ms93n.":  false,
		"":                            false,
	}
	for id, want := range cases {
		if got := ValidID(id); got != want {
			t.Errorf("ValidID(%q) = %v, want %v", id, got, want)
		}
	}
}

// A proxied request whose browser went away is logged at DEBUG, a real
// fault at ERROR.
func TestAbortedProxyRequestsAreNotErrors(t *testing.T) {
	sites, err := NewSites("http://127.0.0.1:8080", "")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		err   error
		level string
	}{
		{fmt.Errorf("select session: %w", context.Canceled), "[DEBUG]"},
		{errors.New("connection refused"), "[ERROR]"},
	} {
		var buf bytes.Buffer
		logger := hclog.New(&hclog.LoggerOptions{Output: &buf, Level: hclog.Trace})
		p, err := New(logger, Options{Sites: sites}, nil, nil, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		p.internal(httptest.NewRecorder(), httptest.NewRequest("GET", "/w/x/", nil), "authenticate", tc.err)
		if !strings.Contains(buf.String(), tc.level) {
			t.Errorf("%v logged as %q, want %s", tc.err, buf.String(), tc.level)
		}
	}
}

// TestLocalTarget: after a handoff the browser goes to a path on the
// workspace's own host, never to another site, whichever way next is
// written.
func TestLocalTarget(t *testing.T) {
	const origin = "https://01hzzzzzzzzzzzzzzzzzzzzzzz.ws.example.com"
	for in, want := range map[string]string{
		"/":                        "/",
		"/echo/a%2Fb?x=1":          "/echo/a%2Fb?x=1",
		"/?folder=/home/coder":     "/?folder=/home/coder",
		"/x#frag":                  "/x#frag",
		origin + "/x":              "/x",
		"":                         "/",
		"//evil.example/":          "/",
		"///evil.example/":         "/",
		"/\\evil.example/":         "/",
		"/\t/evil.example/":        "/",
		" //evil.example/":         "/",
		origin + "//evil.example/": "/",
		"http://evil.example/":     "/",
		"https://user@" + origin[len("https://"):] + "/": "/",
		"javascript:alert(1)":                            "/",
		"evil.example/x":                                 "/evil.example/x",
		"/%09/evil.example":                              "/%09/evil.example",
		"/%zz":                                           "/",
	} {
		if got := LocalTarget(origin, in); got != want {
			t.Errorf("LocalTarget(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestEndFor(t *testing.T) {
	down := errors.New("database unreachable")
	missing := fmt.Errorf("get workspace: %w", workspace.ErrNotFound)
	cases := []struct {
		name string
		s    sessionCheck
		o    ownerCheck
		want endReason
	}{
		{"session and owner hold", sessionCheck{user: "u", ok: true}, ownerCheck{owner: "u"}, 0},
		{"session check failed", sessionCheck{err: down}, ownerCheck{}, 0},
		{"session ended", sessionCheck{}, ownerCheck{owner: "u"}, endSession},
		{"session of another user", sessionCheck{user: "v", ok: true}, ownerCheck{owner: "u"}, endSession},
		{"owner check failed", sessionCheck{user: "u", ok: true}, ownerCheck{err: down}, 0},
		{"workspace deleted", sessionCheck{user: "u", ok: true}, ownerCheck{err: missing}, endDeleted},
		{"another owner", sessionCheck{user: "u", ok: true}, ownerCheck{owner: "v"}, endOwner},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, end := endFor("u", tc.s, tc.o)
			if got != tc.want || end != (tc.want != 0) {
				t.Fatalf("endFor = %d, %v; want %d", got, end, tc.want)
			}
		})
	}
}

// TestFrameCursor: the cursor over the workspace's frames knows, at every
// split of the bytes, whether a frame of the proxy's may follow.
func TestFrameCursor(t *testing.T) {
	frame := func(n int, masked bool) []byte {
		f := clientFrame(opBinary, true, 0, bytes.Repeat([]byte{'a'}, n))
		if !masked {
			// A server's frame: the same without the mask bit and key.
			f[1] &^= 0x80
			size := frameHeaderSize(f[1] | 0x80)
			f = append(f[:size-4:size-4], bytes.Repeat([]byte{'a'}, n)...)
		}
		return f
	}
	stream := join(frame(0, false), frame(5, false), frame(300, false), frame(70000, false), frame(3, true))
	ends := map[int]bool{0: true}
	at := 0
	for _, f := range [][]byte{frame(0, false), frame(5, false), frame(300, false), frame(70000, false), frame(3, true)} {
		at += len(f)
		ends[at] = true
	}
	for _, chunk := range []int{1, 2, 3, 7, 100, 4096, len(stream)} {
		var c frameCursor
		for i := 0; i < len(stream); i += chunk {
			j := min(i+chunk, len(stream))
			c.advance(stream[i:j])
			if c.atBoundary() != ends[j] {
				t.Fatalf("chunks of %d: after %d bytes atBoundary = %v", chunk, j, c.atBoundary())
			}
		}
	}
}

func TestCloseFrame(t *testing.T) {
	f := closeFrame(closePolicyViolation, "session ended")
	h := parseFrameHeader(f)
	if !h.fin || h.opcode != opClose || h.masked || int(h.length) != len(f)-2 || string(f[4:]) != "session ended" || f[2] != 0x03 || f[3] != 0xf0 {
		t.Fatalf("close frame % x", f)
	}
	if long := closeFrame(closePolicyViolation, strings.Repeat("x", 200)); len(long) != 2+125 {
		t.Fatalf("a long reason makes a frame of %d bytes", len(long))
	}
}
