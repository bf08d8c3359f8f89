package e2e

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// TestBrowserFailedStart: a workspace program that cannot start (here a
// broken code-server install, as an operator may leave one) explains
// itself on the dashboard card and on /w/{id}/, in the program's own
// words, with the failing step, the attempt and the next one.
func TestBrowserFailedStart(t *testing.T) {
	chromium := program(t, envChromium, "/usr/bin/chromium", "Chromium", "apt-get install chromium")
	cfg := localConfig(t)
	broken := filepath.Join(t.TempDir(), "code-server")
	script := "#!/bin/sh\necho 'node:internal/modules/cjs/loader:1228' >&2\necho \"Error: Cannot find module './cli'\" >&2\nexit 1\n"
	if err := os.WriteFile(broken, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	cfg.codeServer = broken
	srv := startServer(t, cfg)
	c := login(t, srv)
	var ws apiWorkspace
	if code := c.do("POST", "/api/v1/workspaces", map[string]string{"name": "broken"}, &ws); code != http.StatusCreated {
		t.Fatalf("create: %d", code)
	}
	b := newBrowser(t, chromium, srv)
	b.step("log in", b.logIn(srv.url+"/", "app-view"))
	card := cardSelector(ws.ID)
	b.step("the card says what failed", func(ctx context.Context) error {
		return b.waitJS(ctx, 2*time.Minute, card+`.querySelector(".error-box") && !`+card+`.querySelector(".error-box").hidden && `+
			card+`.querySelector(".error-reason").textContent === "Starting the program failed: StartFailed" && `+
			card+`.querySelector(".error-message").textContent.includes("Cannot find module './cli'") && `+
			// Retrying, the attempt is counted; after the last, the
			// workspace is in ERROR and the count is hidden.
			`(`+card+`.querySelector(".error-retry").hidden || /^Attempt [12] of 3 failed/.test(`+card+`.querySelector(".error-retry").textContent))`)
	})
	t.Logf("failed start on the dashboard: %s", b.screenshot("failed start"))
	var got apiWorkspace
	if code := c.do("GET", "/api/v1/workspaces/"+ws.ID, nil, &got); code != http.StatusOK || got.ErrorStep != "start" {
		t.Errorf("GET: %d, error_step %q, want start", code, got.ErrorStep)
	}
	b.step("opening it shows the same", func(ctx context.Context) error {
		if err := chromedp.Do(ctx, chromedp.Navigate(srv.url+"/w/"+ws.ID+"/")); err != nil {
			return err
		}
		return b.waitJS(ctx, time.Minute, fmt.Sprintf(`document.body.innerText.includes(%q) && document.body.innerText.includes("StartFailed")`, "Cannot find module './cli'"))
	})
	t.Logf("failed start on its page: %s", b.screenshot("failed start page"))
}
