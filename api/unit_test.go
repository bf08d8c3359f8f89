package api

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
	"time"

	"github.com/codehub-io/codehub/audit"
	"github.com/codehub-io/codehub/proxy"
	"github.com/codehub-io/codehub/workspace"
)

func TestRetryAfterSeconds(t *testing.T) {
	for d, want := range map[time.Duration]int{time.Millisecond: 1, time.Second: 1, 1001 * time.Millisecond: 2, 0: 1} {
		if got := retryAfterSeconds(d); got != want {
			t.Errorf("retryAfterSeconds(%v) = %d, want %d", d, got, want)
		}
	}
}

func TestCrossOrigin(t *testing.T) {
	allowed := []string{"https://code.example.com"}
	cases := []struct {
		headers map[string]string
		cross   bool
	}{
		{map[string]string{}, false},
		{map[string]string{"Origin": "https://code.example.com"}, false},
		{map[string]string{"Origin": "HTTPS://CODE.EXAMPLE.COM"}, false},
		{map[string]string{"Origin": "https://evil.example"}, true},
		{map[string]string{"Origin": "null"}, true},
		{map[string]string{"Origin": "http://code.example.com"}, true},
		{map[string]string{"Sec-Fetch-Site": "same-origin"}, false},
		{map[string]string{"Sec-Fetch-Site": "none"}, false},
		{map[string]string{"Sec-Fetch-Site": "same-site"}, true},
		{map[string]string{"Sec-Fetch-Site": "cross-site", "Origin": "https://code.example.com"}, true},
		{map[string]string{"Sec-Fetch-Site": "same-origin", "Origin": "https://evil.example"}, true},
	}
	for _, tc := range cases {
		h := http.Header{}
		for k, v := range tc.headers {
			h.Set(k, v)
		}
		if got := crossOrigin(h, allowed); got != tc.cross {
			t.Errorf("crossOrigin(%v) = %v, want %v", tc.headers, got, tc.cross)
		}
	}
}

func TestClientAddress(t *testing.T) {
	trusted := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("127.0.0.1/32")}
	cases := []struct {
		remote, xff, want string
	}{
		{"198.51.100.2:5000", "", "198.51.100.2"},
		{"198.51.100.2:5000", "203.0.113.9", "198.51.100.2"},                // not a trusted peer
		{"127.0.0.1:5000", "203.0.113.9", "203.0.113.9"},                    // trusted proxy
		{"127.0.0.1:5000", "203.0.113.9, 10.1.2.3", "203.0.113.9"},          // through two proxies
		{"127.0.0.1:5000", "spoofed, 203.0.113.9, 10.1.2.3", "203.0.113.9"}, // the client's own claim is not read
		{"127.0.0.1:5000", "", "127.0.0.1"},
		{"[2001:db8:1:2:3:4:5:6]:5000", "", "2001:db8:1:2::/64"},
		{"[::ffff:198.51.100.2]:5000", "", "198.51.100.2"},
	}
	for _, tc := range cases {
		r := &http.Request{RemoteAddr: tc.remote, Header: http.Header{}}
		if tc.xff != "" {
			r.Header.Set("X-Forwarded-For", tc.xff)
		}
		if got := clientAddress(r, trusted); got != tc.want {
			t.Errorf("clientAddress(%s, %q) = %q, want %q", tc.remote, tc.xff, got, tc.want)
		}
	}
}

// TestWorkspacePathAgreesWithServeMux checks the proxy's shortcut past the
// route table (Sites.Proxies, in path mode): every request it takes, ServeMux would have handed to the
// proxy unchanged, and the paths it leaves to ServeMux are those ServeMux
// cleans and redirects.
func TestWorkspacePathAgreesWithServeMux(t *testing.T) {
	sites, err := proxy.NewSites("http://127.0.0.1:8080", "")
	if err != nil {
		t.Fatal(err)
	}
	target := &sentinel{}
	mux := http.NewServeMux()
	mux.Handle(sites.PathPrefix(""), target)
	cases := []struct {
		method, target string
		shortcut       bool
	}{
		{"GET", "/w/01m8bwqc8xhegwnzfrq3ms93np/", true},
		{"GET", "/w/01m8bwqc8xhegwnzfrq3ms93np/static/a.js?v=1", true},
		{"POST", "/w/01m8bwqc8xhegwnzfrq3ms93np/upload", true},
		{"GET", "/w/01m8bwqc8xhegwnzfrq3ms93np/a%2Fb", true},
		{"GET", "/w/01m8bwqc8xhegwnzfrq3ms93np/a.b/.c/..d", true},
		{"GET", "/w/not-an-id/", true},
		{"GET", "/w/", true},
		{"GET", "/w", false},
		{"GET", "/w/01m8bwqc8xhegwnzfrq3ms93np//a", false},
		{"GET", "/w/01m8bwqc8xhegwnzfrq3ms93np/./a", false},
		{"GET", "/w/01m8bwqc8xhegwnzfrq3ms93np/../a", false},
		{"GET", "/w/01m8bwqc8xhegwnzfrq3ms93np/a/..", false},
		{"GET", "/w/01m8bwqc8xhegwnzfrq3ms93np/a/.", false},
		{"GET", "/w/../api/v1/session", false},
		{"GET", "/api/v1/session", false},
		{"CONNECT", "/w/01m8bwqc8xhegwnzfrq3ms93np/", false},
	}
	for _, c := range cases {
		r := httptest.NewRequest(c.method, c.target, nil)
		got := sites.Proxies(r)
		if got != c.shortcut {
			t.Errorf("%s %s: Proxies = %v, want %v", c.method, c.target, got, c.shortcut)
		}
		h, _ := mux.Handler(r)
		if got && h != target {
			t.Errorf("%s %s: shortcut taken, but ServeMux answers with %T", c.method, c.target, h)
		}
		if !got && c.method != "CONNECT" && strings.HasPrefix(c.target, "/w/") && h == target {
			t.Errorf("%s %s: ServeMux hands it to the proxy unchanged; the shortcut should too", c.method, c.target)
		}
	}
}

type sentinel struct{}

func (*sentinel) ServeHTTP(http.ResponseWriter, *http.Request) {}

// A request whose client went away is no operator's problem: it is logged
// at DEBUG, while a real fault stays at ERROR.
func TestAbortedRequestsAreNotErrors(t *testing.T) {
	for _, tc := range []struct {
		err   error
		level string
	}{
		{fmt.Errorf("select session: %w", context.Canceled), "[DEBUG]"},
		{errors.New("connection refused"), "[ERROR]"},
	} {
		var buf bytes.Buffer
		logger := hclog.New(&hclog.LoggerOptions{Output: &buf, Level: hclog.Trace})
		serviceError(logger, tc.err)
		if !strings.Contains(buf.String(), tc.level) {
			t.Errorf("%v logged as %q, want %s", tc.err, buf.String(), tc.level)
		}
	}
}

func TestDesiredAction(t *testing.T) {
	for _, tc := range []struct {
		phase   workspace.Phase
		was     workspace.DesiredState
		desired workspace.DesiredState
		want    string
	}{
		{workspace.PhaseStandby, workspace.DesiredStandby, workspace.DesiredRunning, audit.ActionWorkspaceStart},
		{workspace.PhaseArchived, workspace.DesiredArchived, workspace.DesiredRunning, audit.ActionWorkspaceRestore},
		{workspace.PhaseStandby, workspace.DesiredArchived, workspace.DesiredRunning, audit.ActionWorkspaceRestore},
		{workspace.PhaseRunning, workspace.DesiredRunning, workspace.DesiredStandby, audit.ActionWorkspaceStop},
		{workspace.PhaseRunning, workspace.DesiredRunning, workspace.DesiredArchived, audit.ActionWorkspaceArchive},
	} {
		ws := workspace.Workspace{Phase: tc.phase, DesiredState: tc.was}
		if got := desiredAction(ws, tc.desired); got != tc.want {
			t.Errorf("%s (wanted %s) -> %s: %s, want %s", tc.phase, tc.was, tc.desired, got, tc.want)
		}
	}
}
