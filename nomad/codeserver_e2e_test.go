package nomad

import (
	"context"
	"crypto/rand"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/nomad/api"

	"github.com/codehub-io/codehub/controller"
	"github.com/codehub-io/codehub/internal/nomadtest"
)

// envCodeServer names the code-server executable for the test that runs
// the real one (scripts/install-code-server.sh installs it).
const envCodeServer = "CODEHUB_TEST_CODE_SERVER"

// TestE2ECodeServerUpstreamAuth runs the real code-server as a workspace
// job under raw_exec with its upstream token from the job's variable: only
// requests carrying that token as the session cookie reach the workbench,
// and the token never appears in the job's source.
func TestE2ECodeServerUpstreamAuth(t *testing.T) {
	nomadtest.Binary(t)
	codeServer := os.Getenv(envCodeServer)
	if codeServer == "" {
		t.Skipf("real code-server not available: set %s (scripts/install-code-server.sh installs it)", envCodeServer)
	}
	a := nomadtest.Start(t, "")
	token := "tok-" + rand.Text()
	// Neither archive nor restore runs here: no codehub binary, no S3.
	b := e2eBackend(t, a, t.TempDir(), e2eConfig{
		command: codeServer,
		args: []string{
			"--bind-addr", "127.0.0.1:%PORT%",
			"--auth", "password",
			"--disable-telemetry",
			"--disable-update-check",
			"--disable-workspace-trust",
			"--user-data-dir", "%HOME%/.local/share/code-server",
			"--extensions-dir", "%HOME%/.local/share/code-server/extensions",
			"%HOME%",
		},
		cpu: 500, memory: 2048,
		upstreamToken: func(string, string) string { return token },
	})
	ctx := t.Context()
	// Workspace ids are lower-case ULIDs: no i, l, o or u.
	const wsID = "01jb3x7k9q2m5n8p4r6s0tcsrv"

	if err := b.ProvisionVolume(ctx, controller.VolumeSpec{WorkspaceID: wsID, UID: os.Getuid(), GID: os.Getgid()}); err != nil {
		t.Fatal(err)
	}
	observeUntil(t, b, wsID, "volume ready", func(o controller.Observed) bool { return o.VolumeReady })
	if err := b.StartWorkspace(ctx, controller.WorkspaceSpec{WorkspaceID: wsID, OwnerID: "01owner0000000000000000000"}); err != nil {
		t.Fatal(err)
	}
	o := observeUntil(t, b, wsID, "code-server ready or failed", func(o controller.Observed) bool {
		return o.UpstreamReady || o.Failure != nil
	})
	if o.Failure != nil {
		t.Fatalf("code-server failed: %+v\n%s", o.Failure, taskLogs(t, a.Client, jobID(wsID)))
	}
	addr, err := NewServiceResolver(hclog.NewNullLogger(), a.Client, ResolverOptions{Namespace: "default"}).Resolve(ctx, wsID)
	if err != nil {
		t.Fatal(err)
	}
	root := "http://" + addr + "/"

	// Without the token code-server sends everyone to its login page.
	for name, cookie := range map[string]string{"no cookie": "", "wrong cookie": "tok-wrong"} {
		res := doWithoutRedirect(t, newRequest(t, root, cookie))
		if loc := res.Header.Get("Location"); res.StatusCode != http.StatusFound || !strings.HasSuffix(loc, "/login") {
			t.Errorf("GET / with %s: %d to %q, want 302 to the login page", name, res.StatusCode, loc)
		}
	}
	ws := newRequest(t, root+"?reconnectionToken=x&reconnection=false&skipWebSocketFrames=false", "")
	ws.Header.Set("Connection", "Upgrade")
	ws.Header.Set("Upgrade", "websocket")
	ws.Header.Set("Sec-WebSocket-Version", "13")
	ws.Header.Set("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ==")
	if res := doWithoutRedirect(t, ws); res.StatusCode != http.StatusUnauthorized {
		t.Errorf("WebSocket upgrade without the token: %d, want 401", res.StatusCode)
	}
	// With it, the root leads to the workbench.
	if code, page := get(t, root, token); code != http.StatusOK || !strings.Contains(string(page), "workbench") {
		t.Errorf("GET / with the token: %d, want 200 with the workbench:\n%.500s", code, page)
	}
	if src := submittedSource(t, b, jobID(wsID)); !strings.Contains(src, "HASHED_PASSWORD") || strings.Contains(src, token) {
		t.Errorf("job source must set HASHED_PASSWORD from the variable and never hold the token:\n%s", src)
	}

	if err := b.StopWorkspace(ctx, wsID, controller.StopSave); err != nil {
		t.Fatal(err)
	}
	observeUntil(t, b, wsID, "container gone", func(o controller.Observed) bool { return !o.ContainerLive })
	if err := b.PurgeJob(ctx, wsID, controller.JobWorkspace); err != nil {
		t.Fatal(err)
	}
	deleteVolume(t, b, wsID)
}

// newRequest is a GET of url, with token as code-server's session cookie
// when it is not empty.
func newRequest(t *testing.T, url, token string) *http.Request {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.AddCookie(&http.Cookie{Name: "code-server-session", Value: token})
	}
	return req
}

// doWithoutRedirect sends req and returns the first response, its body
// drained and closed.
func doWithoutRedirect(t *testing.T, req *http.Request) *http.Response {
	t.Helper()
	client := &http.Client{
		Timeout:       10 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	res, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, res.Body)
	res.Body.Close()
	return res
}

// taskLogs is the output of the workspace task in every allocation of job
// id, for the failure message.
func taskLogs(t *testing.T, client *api.Client, id string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	q := (&api.QueryOptions{}).WithContext(ctx)
	allocs, _, err := client.Jobs().Allocations(id, true, q)
	if err != nil {
		return "list allocations: " + err.Error()
	}
	var out strings.Builder
	for _, stub := range allocs {
		alloc, _, err := client.Allocations().Info(stub.ID, q)
		if err != nil {
			out.WriteString("allocation " + stub.ID + ": " + err.Error() + "\n")
			continue
		}
		for _, stream := range []string{"stdout", "stderr"} {
			r, err := client.AllocFS().Cat(alloc, "alloc/logs/workspace."+stream+".0", q)
			if err != nil {
				out.WriteString(stream + ": " + err.Error() + "\n")
				continue
			}
			b, _ := io.ReadAll(io.LimitReader(r, 16<<10))
			r.Close()
			out.WriteString("allocation " + stub.ID + " " + stream + ":\n" + string(b) + "\n")
		}
	}
	return out.String()
}
