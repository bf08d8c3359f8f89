package local

import (
	"context"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/codehub-io/codehub/controller"
)

// envCodeServer names the code-server executable for tests that run the
// real one (scripts/test.sh sets it after scripts/install-code-server.sh).
const envCodeServer = "CODEHUB_TEST_CODE_SERVER"

func codeServerBackend(tb testing.TB) *Backend {
	tb.Helper()
	path := os.Getenv(envCodeServer)
	if path == "" {
		tb.Skipf("real code-server not available: set %s (scripts/install-code-server.sh installs it)", envCodeServer)
	}
	b, err := New(hclog.NewNullLogger(), Options{DataDir: tb.TempDir(), CodeServer: path, UpstreamToken: testToken})
	if err != nil {
		tb.Fatalf("New: %v", err)
	}
	return b
}

// testToken stands in for the proxy's upstream tokens.
func testToken(id, run string) string { return "token-of-" + id + "-" + run }

// untilReady observes until the workspace answers its health check and
// returns how long that took from start.
func untilReady(tb testing.TB, b *Backend, start time.Time) time.Duration {
	tb.Helper()
	deadline := start.Add(2 * time.Minute)
	for {
		snap, err := b.Observe(context.Background())
		if err != nil {
			tb.Fatalf("Observe: %v", err)
		}
		o := snap.Workspaces[testID]
		if o.UpstreamReady {
			return time.Since(start)
		}
		if o.Failure != nil {
			tb.Fatalf("code-server failed: %v", o.Failure)
		}
		if time.Now().After(deadline) {
			tb.Fatalf("code-server never became ready; last observed %+v", o)
		}
		time.Sleep(25 * time.Millisecond)
	}
}

func TestCodeServerServesWorkbench(t *testing.T) {
	b := codeServerBackend(t)
	ctx := context.Background()
	stopOnCleanup(t, b)
	provisionAndStart(ctx, t, b)
	untilReady(t, b, time.Now())
	addr, err := b.Resolve(ctx, testID)
	if err != nil {
		t.Fatalf("Resolve: %v", err)
	}
	if !strings.HasPrefix(addr, "127.0.0.1:") {
		t.Fatalf("code-server bound to %s, want loopback", addr)
	}
	// Without the workspace's token code-server sends everyone to its login
	// page (a login that no password passes), and refuses WebSockets.
	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	for _, cookie := range []string{"", "code-server-session=" + testToken("01jb3x7k9q2m5n8p4r6s0t1zzz", "")} {
		req, _ := http.NewRequest(http.MethodGet, "http://"+addr+"/", nil)
		if cookie != "" {
			req.Header.Set("Cookie", cookie)
		}
		res, err := noRedirect.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if loc := res.Header.Get("Location"); res.StatusCode != http.StatusFound || !strings.HasSuffix(loc, "/login") {
			t.Fatalf("GET / with cookie %q: %d to %q, want 302 to the login page", cookie, res.StatusCode, loc)
		}
	}
	ws, _ := http.NewRequest(http.MethodGet, "http://"+addr+"/?reconnectionToken=x&reconnection=false&skipWebSocketFrames=false", nil)
	ws.Header.Set("Connection", "Upgrade")
	ws.Header.Set("Upgrade", "websocket")
	ws.Header.Set("Sec-WebSocket-Version", "13")
	ws.Header.Set("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ==")
	res, err := noRedirect.Do(ws)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusUnauthorized {
		t.Fatalf("WebSocket without the token: %d, want 401", res.StatusCode)
	}
	// With it, the root leads to the workbench page.
	req, _ := http.NewRequest(http.MethodGet, "http://"+addr+"/", nil)
	req.Header.Set("Cookie", "code-server-session="+testToken(testID, ""))
	res, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	page, err := io.ReadAll(res.Body)
	res.Body.Close()
	if err != nil || res.StatusCode != http.StatusOK || !strings.Contains(string(page), "workbench") {
		t.Fatalf("GET / with the token: %d, %v, want the workbench page:\n%.500s", res.StatusCode, err, page)
	}
	// Settings live in the home, so they travel with archives.
	if _, err := os.Stat(b.HomeDir(testID) + "/.local/share/code-server"); err != nil {
		t.Fatalf("user data dir not in the home: %v", err)
	}
}

// A restored or moved home remembers the folder code-server last opened,
// at a path that may be gone; the workspace opens its home as it is now,
// and the workbench installed as an app carries the workspace's name.
func TestCodeServerOpensTheHomeNotTheLastOpenedFolder(t *testing.T) {
	b := codeServerBackend(t)
	ctx := context.Background()
	stopOnCleanup(t, b)
	if err := b.ProvisionVolume(ctx, controller.VolumeSpec{WorkspaceID: testID}); err != nil {
		t.Fatalf("ProvisionVolume: %v", err)
	}
	settings := filepath.Join(b.HomeDir(testID), ".local", "share", "code-server")
	if err := os.MkdirAll(settings, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(settings, "coder.json"), []byte(`{"query":{"folder":"/gone/ws-old-home"}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := b.StartWorkspace(ctx, controller.WorkspaceSpec{WorkspaceID: testID, Name: "my-project"}); err != nil {
		t.Fatalf("StartWorkspace: %v", err)
	}
	untilReady(t, b, time.Now())
	addr, err := b.Resolve(ctx, testID)
	if err != nil {
		t.Fatalf("Resolve: %v", err)
	}
	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	req, _ := http.NewRequest(http.MethodGet, "http://"+addr+"/", nil)
	req.Header.Set("Cookie", "code-server-session="+testToken(testID, ""))
	res, err := noRedirect.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	loc, err := url.Parse(res.Header.Get("Location"))
	// The folder is the home as the workspace sees it, named after it.
	if want := viewedHome(b, "my-project"); err != nil || res.StatusCode != http.StatusFound || loc.Query().Get("folder") != want {
		t.Fatalf("GET /: %d to %q, want 302 to ?folder=%s", res.StatusCode, res.Header.Get("Location"), want)
	}
	// Installed as an app, the workbench is named after the workspace.
	req, _ = http.NewRequest(http.MethodGet, "http://"+addr+"/manifest.json", nil)
	req.Header.Set("Cookie", "code-server-session="+testToken(testID, ""))
	res, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	manifest, err := io.ReadAll(res.Body)
	res.Body.Close()
	if err != nil || !strings.Contains(string(manifest), `"name": "my-project"`) {
		t.Fatalf("manifest does not carry the workspace's name (%v): %.300s", err, manifest)
	}
}

// BenchmarkCodeServerWake measures STANDBY -> ready at the backend: start
// code-server on an existing home until /healthz answers, then stop it.
// Reports p50 and p90 besides the mean.
func BenchmarkCodeServerWake(b *testing.B) {
	be := codeServerBackend(b)
	ctx := context.Background()
	if err := be.ProvisionVolume(ctx, controller.VolumeSpec{WorkspaceID: testID}); err != nil {
		b.Fatalf("ProvisionVolume: %v", err)
	}
	var samples []time.Duration
	for b.Loop() {
		start := time.Now()
		if err := be.StartWorkspace(ctx, controller.WorkspaceSpec{WorkspaceID: testID}); err != nil {
			b.Fatalf("StartWorkspace: %v", err)
		}
		samples = append(samples, untilReady(b, be, start))
		b.StopTimer()
		if err := be.StopWorkspace(ctx, testID, controller.StopSave); err != nil {
			b.Fatalf("StopWorkspace: %v", err)
		}
		for {
			snap, err := be.Observe(ctx)
			if err != nil {
				b.Fatalf("Observe: %v", err)
			}
			if !snap.Workspaces[testID].ContainerLive {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		b.StartTimer()
	}
	sort.Slice(samples, func(i, k int) bool { return samples[i] < samples[k] })
	b.ReportMetric(samples[len(samples)/2].Seconds(), "p50-s")
	b.ReportMetric(samples[len(samples)*9/10].Seconds(), "p90-s")
}
