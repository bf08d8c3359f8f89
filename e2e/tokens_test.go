package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"
)

// TestBrowserCLILoginAndTokens: "codehub login" hands over to the
// dashboard, where the user logs in and approves, and the browser brings
// the approval back to the command, which can then work with workspaces;
// the dashboard makes a token whose secret it shows once, and revokes it.
func TestBrowserCLILoginAndTokens(t *testing.T) {
	chromium := program(t, envChromium, "/usr/bin/chromium", "Chromium", "apt-get install chromium")
	srv := startServer(t, localConfig(t))
	b := newBrowser(t, chromium, srv)
	home := t.TempDir()
	cliEnv := append(os.Environ(), "HOME="+home, "XDG_CONFIG_HOME="+home, "CODEHUB_TOKEN=")

	var stdout bytes.Buffer
	login := exec.Command(srv.bin, "login", "-no-browser", "-name", "e2e laptop", srv.url)
	login.Env, login.Stdout = cliEnv, &stdout
	stderr, err := login.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := login.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	approval := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			if line := strings.TrimSpace(sc.Text()); strings.HasPrefix(line, srv.url+"/cli-login?") {
				approval <- line
			}
		}
		exited <- login.Wait()
	}()
	t.Cleanup(func() { _ = login.Process.Kill() })
	var address string
	select {
	case address = <-approval:
	case err := <-exited:
		t.Fatalf("codehub login ended before asking for approval: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("codehub login printed no approval address")
	}

	b.step("log in on the approval page", b.logIn(address, "cli-view"))
	b.step("approve", func(ctx context.Context) error {
		asked, err := chromedp.Run(ctx, chromedp.Text(chromedp.ID("cli-name")))
		if err != nil {
			return err
		}
		if !strings.Contains(asked, "e2e laptop") {
			return fmt.Errorf("the page asks for %q", asked)
		}
		if err := chromedp.Do(ctx, chromedp.Click(chromedp.ID("cli-allow"))); err != nil {
			return err
		}
		return b.waitJS(ctx, 30*time.Second, `location.host.startsWith("127.0.0.1:") && document.body.innerText.includes("Login approved")`)
	})
	select {
	case err := <-exited:
		if err != nil || !strings.Contains(stdout.String(), "as admin") {
			t.Fatalf("codehub login: %v: %s", err, stdout.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("codehub login did not finish after the approval")
	}
	ws := exec.Command(srv.bin, "ws", "create", "-json", "from-cli")
	ws.Env = cliEnv
	out, err := ws.Output()
	var created struct {
		ID   string `json:"id"`
		Name string `json:"name"`
	}
	if err != nil || json.Unmarshal(out, &created) != nil || created.Name != "from-cli" {
		t.Fatalf("codehub ws create after the browser login: %v: %s", err, out)
	}

	var secret string
	b.step("make a read token in the dashboard", func(ctx context.Context) error {
		if err := chromedp.Do(ctx,
			chromedp.Navigate(srv.url+"/"),
			chromedp.WaitVisible(chromedp.ID("app-view")),
		); err != nil {
			return err
		}
		// The panels sit below the workspace list, and a click lands by
		// coordinates: let the CLI's workspace settle before clicking, or
		// its card's last re-render may move the button under the press.
		if err := b.waitPhase(ctx, created.ID, "RUNNING", 2*time.Minute); err != nil {
			return err
		}
		if err := chromedp.Do(ctx,
			chromedp.Click(chromedp.CSS(`#tokens > summary`)),
			chromedp.WaitVisible(chromedp.ID("token-form")),
		); err != nil {
			return err
		}
		if err := b.waitJS(ctx, 10*time.Second, `document.getElementById("token-rows").innerText.includes("e2e laptop")`); err != nil {
			return fmt.Errorf("the CLI's token is not listed: %w", err)
		}
		if err := chromedp.Do(ctx,
			chromedp.SendKeys(chromedp.ID("token-name"), "e2e script"),
			chromedp.SetValue(chromedp.ID("token-scope"), "read"),
			chromedp.Click(chromedp.ID("token-submit")),
			chromedp.WaitVisible(chromedp.ID("token-secret-box")),
		); err != nil {
			return err
		}
		var err error
		secret, err = chromedp.Run(ctx, chromedp.Text(chromedp.ID("token-secret")))
		return err
	})
	t.Logf("token panel: %s", b.screenshot("token panel"))
	if code := bearerStatus(t, srv, "GET", secret); code != http.StatusOK {
		t.Fatalf("the dashboard's token reads: %d", code)
	}
	if code := bearerStatus(t, srv, "POST", secret); code != http.StatusForbidden {
		t.Fatalf("the dashboard's read token writes: %d", code)
	}
	b.step("the secret is shown once", func(ctx context.Context) error {
		if err := chromedp.Do(ctx, chromedp.Click(chromedp.ID("token-secret-close"))); err != nil {
			return err
		}
		return b.waitJS(ctx, 10*time.Second, `document.getElementById("token-secret-box").hidden && !document.body.innerText.includes(`+jsString(secret)+`)`)
	})
	b.step("revoke it", func(ctx context.Context) error {
		return b.acceptDialogsWhile(ctx, "e2e script", func() error {
			row := `[...document.querySelectorAll("#token-rows tr")].find(r => r.innerText.includes("e2e script"))`
			if _, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`(r => { r.querySelector(".act-revoke").click(); return true; })(`+row+`)`)); err != nil {
				return err
			}
			return b.waitJS(ctx, 10*time.Second, `!(`+row+`)`)
		})
	})
	if code := bearerStatus(t, srv, "GET", secret); code != http.StatusUnauthorized {
		t.Fatalf("the revoked token: %d", code)
	}

	// The first-start settings: a dotfiles repository and a git token,
	// which is stored and never shown again.
	const dotfiles = "https://git.example.com/me/dotfiles.git"
	b.step("save the first-start settings", func(ctx context.Context) error {
		if err := chromedp.Do(ctx,
			chromedp.Click(chromedp.CSS(`#settings > summary`)),
			chromedp.WaitVisible(chromedp.ID("settings-form")),
		); err != nil {
			return err
		}
		if err := b.waitJS(ctx, 10*time.Second, `document.getElementById("settings-token-state").innerText === "No git token is stored."`); err != nil {
			return err
		}
		if err := chromedp.Do(ctx,
			chromedp.SendKeys(chromedp.ID("settings-dotfiles"), dotfiles),
			// Enter submits, as a click on Save does; a click lands by
			// coordinates, which the live workspace list above may shift
			// between the lookup and the press.
			chromedp.SendKeys(chromedp.ID("settings-token"), "glpat-e2e-secret"+kb.Enter),
		); err != nil {
			return err
		}
		return b.waitJS(ctx, 10*time.Second, `document.getElementById("settings-token-state").innerText === "A git token is stored." &&
			document.getElementById("settings-token").value === "" && !document.body.innerHTML.includes("glpat-e2e-secret")`)
	})
	t.Logf("settings panel: %s", b.screenshot("first-start settings"))
	b.step("the API holds them", func(ctx context.Context) error {
		settings, err := b.apiJSON(ctx, "/api/v1/settings")
		if err != nil || !strings.Contains(settings, `"dotfiles_repository":"`+dotfiles+`"`) || !strings.Contains(settings, `"git_credential_set":true`) {
			return fmt.Errorf("settings after saving: %v %s", err, settings)
		}
		return nil
	})
	b.step("remove the git token", func(ctx context.Context) error {
		if err := chromedp.Do(ctx, chromedp.Click(chromedp.ID("settings-token-remove"))); err != nil {
			return err
		}
		return b.waitJS(ctx, 10*time.Second, `document.getElementById("settings-token-state").innerText === "No git token is stored." &&
			document.getElementById("settings-dotfiles").value === `+jsString(dotfiles))
	})

	// A password change in the dashboard keeps this browser signed in and,
	// by default, ends the CLI's token.
	b.step("change the password", func(ctx context.Context) error {
		if err := chromedp.Do(ctx,
			chromedp.Click(chromedp.CSS(`#password > summary`)),
			chromedp.WaitVisible(chromedp.ID("password-form")),
			chromedp.SendKeys(chromedp.ID("password-current"), adminPassword),
			chromedp.SendKeys(chromedp.ID("password-new"), "e2e-admin-password-2"),
			chromedp.Click(chromedp.ID("password-submit")),
		); err != nil {
			return err
		}
		return b.waitJS(ctx, 10*time.Second, `document.getElementById("password-current").value === "" &&
			document.getElementById("password-error").hidden && !document.getElementById("token-empty").hidden`)
	})
	b.step("the browser is still signed in", func(ctx context.Context) error {
		_, err := b.apiJSON(ctx, "/api/v1/session")
		return err
	})
	list := exec.Command(srv.bin, "ws", "list")
	list.Env = cliEnv
	if out, err := list.CombinedOutput(); err == nil || list.ProcessState.ExitCode() != 4 {
		t.Fatalf("codehub ws list after the password change: %v: %s", err, out)
	}
}

// bearerStatus sends a workspace list (GET) or creation (POST) with a
// token and returns the status.
func bearerStatus(t *testing.T, srv *server, method, secret string) int {
	t.Helper()
	var body io.Reader
	if method == http.MethodPost {
		body = strings.NewReader(`{"name":"by-token"}`)
	}
	req, err := http.NewRequest(method, srv.url+"/api/v1/workspaces", body)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+secret)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	return res.StatusCode
}

func jsString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}
