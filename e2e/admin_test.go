package e2e

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/cookiejar"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// TestBrowserAdminStopsAWorkspace: an administrator stops another user's
// running workspace from the admin page's list, after confirming; the
// owner's API and pages then say an administrator stopped it, and the
// audit log names the administrator.
func TestBrowserAdminStopsAWorkspace(t *testing.T) {
	chromium := program(t, envChromium, "/usr/bin/chromium", "Chromium", "apt-get install chromium")
	srv := startServer(t, localConfig(t))
	admin := login(t, srv)
	var alice struct {
		ID string `json:"id"`
	}
	if code := admin.do("POST", "/api/v1/admin/users", map[string]any{"username": "alice", "password": "alice-password-1"}, &alice); code != http.StatusCreated {
		t.Fatalf("create alice: %d", code)
	}
	jar, err := cookiejar.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	owner := &apiClient{tb: t, base: srv.url, http: &http.Client{Jar: jar, Timeout: 30 * time.Second}}
	if code := owner.do("POST", "/api/v1/login", map[string]string{"username": "alice", "password": "alice-password-1"}, nil); code != http.StatusOK {
		t.Fatalf("alice's login: %d", code)
	}
	var ws apiWorkspace
	if code := owner.do("POST", "/api/v1/workspaces", map[string]string{"name": "e2e-left-running"}, &ws); code != http.StatusCreated {
		t.Fatalf("create: %d", code)
	}
	owner.settle(ws.ID, "RUNNING", time.Now())

	b := newBrowser(t, chromium, srv)
	b.step("log in", b.logIn(srv.url+"/", "app-view"))
	row := `document.querySelector('#all-ws-body tr[data-id="` + ws.ID + `"]')`
	b.step("the admin list shows alice's workspace", func(ctx context.Context) error {
		if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS(`#admin-nav a[href="/admin/workspaces"]`)), chromedp.WaitVisible(chromedp.ID("admin-workspaces"))); err != nil {
			return err
		}
		return b.waitJS(ctx, 30*time.Second, `(r => r && r.cells[1].textContent === "alice" && r.cells[2].textContent === "RUNNING" &&
			[...r.querySelectorAll("button")].some(b => b.textContent === "Stop"))(`+row+`)`)
	})
	t.Logf("admin list: %s", b.screenshot("admin list"))
	b.step("stop it from the list", func(ctx context.Context) error {
		return b.acceptDialogsWhile(ctx, "e2e-left-running", func() error {
			if _, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`[...`+row+`.querySelectorAll("button")].find(b => b.textContent === "Stop").click() || true`)); err != nil {
				return err
			}
			return waitUntil(ctx, time.Minute, func() bool {
				var w struct {
					Desired string `json:"desired_state"`
					By      string `json:"desired_by"`
				}
				return owner.do("GET", "/api/v1/workspaces/"+ws.ID, nil, &w) == http.StatusOK && w.Desired == "STANDBY" && w.By == "admin"
			})
		})
	})
	owner.settle(ws.ID, "STANDBY", time.Now())

	// A request that is not a page load gets the workspace's state, in
	// the owner's words.
	req, err := http.NewRequest("GET", srv.url+"/w/"+ws.ID+"/", nil)
	if err != nil {
		t.Fatal(err)
	}
	res, err := owner.http.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var answer struct {
		Error struct{ Code, Message string }
	}
	err = json.NewDecoder(res.Body).Decode(&answer)
	res.Body.Close()
	if err != nil || res.StatusCode != http.StatusServiceUnavailable || !strings.HasPrefix(answer.Error.Message, "An administrator stopped it") {
		t.Fatalf("the owner's request: %d %+v %v", res.StatusCode, answer, err)
	}
	var trail struct {
		Events []struct {
			Action string `json:"action"`
			Actor  struct {
				Username string `json:"username"`
			} `json:"actor"`
		} `json:"events"`
	}
	if code := admin.do("GET", "/api/v1/admin/audit?workspace_id="+ws.ID, nil, &trail); code != http.StatusOK || len(trail.Events) == 0 ||
		trail.Events[0].Action != "workspace.stop" || trail.Events[0].Actor.Username != "admin" {
		t.Fatalf("audit: %d %+v", code, trail)
	}
}
