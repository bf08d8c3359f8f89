package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// TestBrowserSubdomainLogin: in subdomain mode, without cookie_domain (as
// `make run` serves it on localhost), the dashboard's session cookie never
// reaches a workspace's host. A visitor who logs in with an absolute next=
// on the workspace's own host must end up in the workbench there: the
// workspace's host sends the browser to /w/{id}/… on the dashboard's host,
// which hands the session over through a one-time ticket. The login page
// must refuse any address that is not one of the user's workspaces.
// Chromium resolves every *.localhost name to loopback, so the workspace
// hosts need no DNS.
func TestBrowserSubdomainLogin(t *testing.T) {
	chromium := program(t, envChromium, "/usr/bin/chromium", "Chromium", "apt-get install chromium")
	cfg := localConfig(t)
	cfg.publicHost, cfg.subdomainBase = "localhost", "localhost"
	srv := startServer(t, cfg)
	ws := createWorkspace(t, srv, "subdomain")
	origin := strings.TrimSuffix(ws.URL, "/")
	u, err := url.Parse(origin)
	if err != nil || u.Hostname() != ws.ID+".localhost" {
		t.Fatalf("workspace url %q is not on its own host", ws.URL)
	}

	b := newBrowser(t, chromium, srv)
	visited, err := b.pages()
	if err != nil {
		t.Fatal(err)
	}
	next := origin + "/?x=1"
	b.step("log in with an absolute next", func(ctx context.Context) error {
		if err := chromedp.Do(ctx,
			chromedp.Navigate(srv.url+"/login?next="+url.QueryEscape(next)),
			chromedp.WaitVisible(chromedp.ID("login-form")),
			chromedp.SendKeys(chromedp.ID("login-username"), "admin"),
			chromedp.SendKeys(chromedp.ID("login-password"), adminPassword),
			chromedp.Click(chromedp.ID("login-submit")),
		); err != nil {
			return err
		}
		deadline := time.Now().Add(30 * time.Second)
		for time.Now().Before(deadline) {
			for _, v := range visited() {
				if v == next {
					// The workspace's host hands the browser on until its
					// own session is set; then the workbench loads there.
					err := b.waitJS(ctx, 2*time.Minute, fmt.Sprintf(`location.origin === %q && !!document.querySelector(".monaco-workbench")`, origin))
					if err != nil {
						return fmt.Errorf("%w; pages requested: %q", err, visited())
					}
					return nil
				}
			}
			time.Sleep(100 * time.Millisecond)
		}
		return fmt.Errorf("never went to %s; pages requested: %q", next, visited())
	})

	b.step("only the user's own workspace hosts", func(ctx context.Context) error {
		if err := chromedp.Do(ctx, chromedp.Navigate(srv.url+"/")); err != nil {
			return err
		}
		port := ":" + u.Port()
		cases := map[string]string{
			next:                   next,
			"/w/" + ws.ID + "/":    "/w/" + ws.ID + "/",
			"//evil.example/":      "",
			"/\t/evil.example/":    "",
			"/\\evil.example/":     "",
			"/login?next=/x":       "",
			"http://evil.example/": "",
			"javascript:alert(1)":  "",
			"http://" + ws.ID + ".localhost.evil.example" + port + "/": "",
			"http://" + ws.ID + ".evil.example" + port + "/":           "",
			"http://00000000000000000000000000.localhost" + port + "/": "",
		}
		for in, want := range cases {
			got, err := chromedp.Run(ctx, chromedp.Evaluate[string](fmt.Sprintf(
				`history.replaceState(null, "", "/login?next=" + encodeURIComponent(%q)); loginTarget()`, in),
				chromedp.EvalAwaitPromise))
			if err != nil {
				return err
			}
			if got != want {
				return fmt.Errorf("next=%q: login target %q, want %q", in, got, want)
			}
		}
		return nil
	})
}

type createdWorkspace struct {
	ID  string `json:"id"`
	URL string `json:"url"`
}

// createWorkspace creates a workspace for the admin through the API.
func createWorkspace(t *testing.T, srv *server, name string) createdWorkspace {
	t.Helper()
	jar, _ := cookiejar.New(nil)
	c := &http.Client{Jar: jar, Timeout: 30 * time.Second}
	post := func(path, body string, out any) {
		res, err := c.Post(srv.url+path, "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		if res.StatusCode/100 != 2 {
			t.Fatalf("POST %s: %s", path, res.Status)
		}
		if out != nil {
			if err := json.NewDecoder(res.Body).Decode(out); err != nil {
				t.Fatal(err)
			}
		}
	}
	post("/api/v1/login", fmt.Sprintf(`{"username":"admin","password":%q}`, adminPassword), nil)
	var ws createdWorkspace
	post("/api/v1/workspaces", fmt.Sprintf(`{"name":%q}`, name), &ws)
	return ws
}
