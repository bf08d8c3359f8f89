package proxy_test

import (
	"context"
	"encoding/json"
	htmlpkg "html"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/codehub-io/codehub/api/apitest"
	"github.com/codehub-io/codehub/workspace"
)

// workbench is a program that serves a VS Code workbench page at its
// root and records the Accept-Encoding of each request it gets.
type workbench struct {
	mu       sync.Mutex
	encoding map[string]string
}

func (wb *workbench) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	wb.mu.Lock()
	wb.encoding[r.URL.Path] = r.Header.Get("Accept-Encoding")
	wb.mu.Unlock()
	w.Header().Set("Content-Type", "text/html")
	_, _ = io.WriteString(w, `<!DOCTYPE html><html><head><meta id="vscode-workbench-web-configuration" data-settings="`+
		htmlpkg.EscapeString(`{"remoteAuthority":"remote"}`)+`"></head><body></body></html>`)
}

func (wb *workbench) acceptEncoding(path string) string {
	wb.mu.Lock()
	defer wb.mu.Unlock()
	return wb.encoding[path]
}

// TestProxyWorkbenchNotice: a workbench page the user opens is branded
// (the workspace's name as its window title, the notice script), nothing
// else is; the script and the status it reads come from the proxy, never
// from the workspace, and reading the status neither wakes the workspace
// nor tells another user anything.
func TestProxyWorkbenchNotice(t *testing.T) {
	env := apitest.New(t, apitest.Config{})
	alice, bob := env.CreateUser("alice", false), env.CreateUser("bob", false)
	wb := &workbench{encoding: map[string]string{}}
	up := httptest.NewServer(wb)
	t.Cleanup(up.Close)
	w := runningWorkspace(t, env, alice, "my-project", strings.TrimPrefix(up.URL, "http://"))
	c := env.Login(alice)
	base := env.URL + "/w/" + w.ID + "/"

	res := get(t, c, base+"?folder=/home/coder", "Sec-Fetch-Mode", "navigate", "Sec-Fetch-Dest", "document", "Accept-Encoding", "gzip, br")
	body := string(res.Body)
	if res.StatusCode != 200 || !strings.Contains(body, `<script defer src="/w/`+w.ID+`/_codehub/workbench.js"></script>`) ||
		!strings.Contains(body, htmlpkg.EscapeString(`"configurationDefaults":{"window.title":"${dirty}${activeEditorShort}${separator}my-project"}`)) {
		t.Fatalf("page load: %d %s", res.StatusCode, body)
	}
	if got := res.Header.Get("Content-Length"); got != strconv.Itoa(len(res.Body)) {
		t.Errorf("Content-Length %s for %d bytes", got, len(res.Body))
	}
	if got := wb.acceptEncoding("/"); got != "" {
		t.Errorf("the page to brand was asked for with Accept-Encoding %q", got)
	}
	res = get(t, c, base+"page", "Sec-Fetch-Mode", "cors", "Sec-Fetch-Dest", "empty", "Accept-Encoding", "gzip")
	if strings.Contains(string(res.Body), "workbench.js") || wb.acceptEncoding("/page") != "gzip" {
		t.Errorf("a fetch was branded: %s (Accept-Encoding %q)", res.Body, wb.acceptEncoding("/page"))
	}

	res = get(t, c, base+"_codehub/workbench.js")
	if res.StatusCode != 200 || !strings.HasPrefix(res.Header.Get("Content-Type"), "text/javascript") || !strings.Contains(string(res.Body), "codehub-notice") {
		t.Fatalf("script: %d %s", res.StatusCode, res.Body)
	}
	status := func(c *http.Client) (int, map[string]any) {
		t.Helper()
		res := get(t, c, base+"_codehub/status")
		var n map[string]any
		_ = json.Unmarshal(res.Body, &n)
		return res.StatusCode, n
	}
	if code, n := status(c); code != 200 || n["running"] != true || n["title"] != nil {
		t.Fatalf("running: %d %v", code, n)
	}
	if wb.acceptEncoding("/_codehub/status") != "" || wb.acceptEncoding("/_codehub/workbench.js") != "" {
		t.Fatal("the workspace was asked for the proxy's own paths")
	}

	if _, err := env.Service.SetDesired(context.Background(), w.ID, workspace.DesiredStandby, workspace.CauseUser); err != nil {
		t.Fatal(err)
	}
	env.SetPhase(w.ID, workspace.PhaseStandby, workspace.OpNone)
	code, n := status(c)
	if code != 200 || n["running"] != false || n["title"] != "Stopped" ||
		n["message"] != "This workspace was stopped. You stopped it less than a minute ago. Reload the window to start it again." {
		t.Fatalf("stopped: %d %v", code, n)
	}
	if got := env.Workspace(w.ID).DesiredState; got != workspace.DesiredStandby {
		t.Fatalf("reading the status changed the desired state to %s", got)
	}
	if code, n := status(env.Login(bob)); code != http.StatusForbidden || n["running"] != nil {
		t.Fatalf("another user: %d %v", code, n)
	}
	if code, _ := status(env.Client()); code != http.StatusUnauthorized {
		t.Fatalf("no session: %d", code)
	}
	if res := get(t, c, base+"_codehub/other"); res.StatusCode != http.StatusNotFound {
		t.Fatalf("unknown own path: %d", res.StatusCode)
	}
}
