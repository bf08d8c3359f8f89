package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"
)

// Variables the test reads; scripts/test.sh sets the code-server one.
const (
	envChromium      = "CODEHUB_TEST_CHROMIUM"       // default /usr/bin/chromium
	envCodeServer    = "CODEHUB_TEST_CODE_SERVER"    // code-server executable
	envCodehubBinary = "CODEHUB_TEST_CODEHUB_BINARY" // prebuilt codehub; built otherwise
	envScreenshots   = "CODEHUB_TEST_SCREENSHOTS"    // default e2e/screenshots
)

// The marker file proves three things when the workbench lists it: the
// home is the workspace's, the editor's WebSocket works (the explorer reads
// the folder through it), and archive + restore kept the data.
const markerFile = "hello-e2e.txt"

const adminPassword = "e2e-admin-password-1"

func TestBrowserWorkspaceLifecycle(t *testing.T) {
	chromium := program(t, envChromium, "/usr/bin/chromium", "Chromium", "apt-get install chromium")
	srv := startServer(t, localConfig(t))
	b := newBrowser(t, chromium, srv)

	b.step("log in", func(ctx context.Context) error {
		return chromedp.Do(ctx,
			chromedp.Navigate(srv.url+"/"),
			chromedp.WaitVisible(chromedp.ID("login-form")),
			chromedp.SendKeys(chromedp.ID("login-username"), "admin"),
			chromedp.SendKeys(chromedp.ID("login-password"), adminPassword),
			chromedp.Click(chromedp.ID("login-submit")),
			chromedp.WaitVisible(chromedp.ID("app-view")),
		)
	})

	var id string
	created := time.Now()
	b.step("create", func(ctx context.Context) error {
		if err := chromedp.Do(ctx,
			chromedp.SendKeys(chromedp.ID("create-name"), "e2e"),
			chromedp.SendKeys(chromedp.ID("create-description"), "browser test"),
			chromedp.Click(chromedp.ID("create-submit")),
		); err != nil {
			return err
		}
		if err := b.waitJS(ctx, time.Minute, `document.querySelectorAll("#list article").length === 1`); err != nil {
			return err
		}
		var err error
		id, err = chromedp.Run(ctx, chromedp.Evaluate[string](`document.querySelector("#list article").dataset.id`))
		return err
	})
	b.step("wait for RUNNING", func(ctx context.Context) error { return b.waitPhase(ctx, id, "RUNNING", 3*time.Minute) })
	t.Logf("create to RUNNING in the dashboard: %s", time.Since(created).Round(time.Millisecond))

	home := filepath.Join(srv.dataDir, "volumes", "ws-"+id+"-home")
	if err := os.WriteFile(filepath.Join(home, markerFile), []byte("written before archiving\n"), 0o644); err != nil {
		t.Fatalf("write marker into the home: %v", err)
	}

	b.step("running limit", func(ctx context.Context) error {
		if err := chromedp.Do(ctx,
			chromedp.SendKeys(chromedp.ID("create-name"), "e2e-two"),
			chromedp.Click(chromedp.ID("create-submit")),
			chromedp.WaitVisible(chromedp.ID("limit")),
		); err != nil {
			return err
		}
		text, err := chromedp.Run(ctx, chromedp.Text(chromedp.ID("limit")))
		if err != nil {
			return err
		}
		if !strings.Contains(text, "e2e") {
			return fmt.Errorf("limit message does not list the running workspace: %q", text)
		}
		return chromedp.Do(ctx, chromedp.Click(chromedp.ID("limit-close")))
	})

	b.step("open the workbench", func(ctx context.Context) error { return b.openWorkbench(ctx, id, true) })

	b.step("stop", func(ctx context.Context) error {
		if err := b.clickAction(ctx, id, "stop"); err != nil {
			return err
		}
		// Until the engine answers, the page must not offer the same change again.
		disabled, err := chromedp.Run(ctx, chromedp.Evaluate[bool](cardSelector(id)+`.querySelector(".act-stop").disabled`))
		if err != nil {
			return err
		}
		if !disabled {
			return errors.New("stop button still enabled right after stopping")
		}
		return b.waitPhase(ctx, id, "STANDBY", 2*time.Minute)
	})

	woke := time.Now()
	b.step("open wakes the workspace", func(ctx context.Context) error { return b.openWorkbench(ctx, id, false) })
	t.Logf("open of a STANDBY workspace to workbench with the home listed: %s", time.Since(woke).Round(time.Millisecond))

	b.step("archive", func(ctx context.Context) error {
		if err := b.clickAction(ctx, id, "archive"); err != nil {
			return err
		}
		if err := b.waitPhase(ctx, id, "ARCHIVED", 5*time.Minute); err != nil {
			return err
		}
		if _, err := os.Stat(home); !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("home still on disk after archiving: %v", err)
		}
		return nil
	})

	b.step("restore", func(ctx context.Context) error {
		if err := b.clickAction(ctx, id, "restore"); err != nil {
			return err
		}
		return b.waitPhase(ctx, id, "RUNNING", 5*time.Minute)
	})
	b.step("restored file is there", func(ctx context.Context) error { return b.openWorkbench(ctx, id, false) })

	// code-server's "Sign out" (password auth) navigates to ./logout with
	// base and href parameters.
	signOut := srv.url + "/w/" + id + "/logout?base=.&href=" + url.QueryEscape(srv.url+"/w/"+id+"/")
	b.step("workspace sign out asks first", func(ctx context.Context) error {
		return chromedp.Do(ctx,
			chromedp.Navigate(signOut),
			chromedp.WaitVisible(chromedp.ID("signout-view")),
			chromedp.Click(chromedp.ID("signout-cancel")),
			chromedp.WaitVisible(chromedp.ID("app-view")),
		)
	})

	b.step("delete", func(ctx context.Context) error {
		if err := b.acceptDialogsWhile(ctx, func() error { return b.clickAction(ctx, id, "delete") }); err != nil {
			return err
		}
		if err := b.waitJS(ctx, time.Minute, `!`+cardSelector(id)); err != nil {
			return err
		}
		return waitUntil(ctx, 3*time.Minute, func() bool {
			_, err := os.Stat(home)
			return errors.Is(err, os.ErrNotExist)
		})
	})

	b.step("workspace sign out ends the session", func(ctx context.Context) error {
		if err := chromedp.Do(ctx,
			chromedp.Navigate(signOut),
			chromedp.WaitVisible(chromedp.ID("signout-view")),
			chromedp.Click(chromedp.ID("signout-confirm")),
			chromedp.WaitVisible(chromedp.ID("login-view")),
		); err != nil {
			return err
		}
		status, err := chromedp.Run(ctx, chromedp.Evaluate[int](`fetch("/api/v1/session").then(r => r.status)`, chromedp.EvalAwaitPromise))
		if err != nil {
			return err
		}
		if status != http.StatusUnauthorized {
			return fmt.Errorf("session after signing out: HTTP %d, want 401", status)
		}
		return nil
	})
}

// ---------- the browser ----------

type browser struct {
	t     *testing.T
	ctx   context.Context
	srv   *server
	shots string
	n     int
}

func newBrowser(t *testing.T, chromium string, srv *server) *browser {
	t.Helper()
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(chromium),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1280, 900),
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(func() { cancel(); cancelAlloc() })
	if _, err := chromedp.Call(ctx, network.Enable, network.EnableParams{}); err != nil {
		t.Fatalf("start chromium: %v", err)
	}
	shots := os.Getenv(envScreenshots)
	if shots == "" {
		shots = "screenshots"
	}
	return &browser{t: t, ctx: ctx, srv: srv, shots: shots}
}

// step runs one stage of the flow; on failure it saves a screenshot named
// after the stage and stops the test.
func (b *browser) step(name string, fn func(ctx context.Context) error) {
	b.t.Helper()
	b.n++
	b.t.Logf("step %d: %s", b.n, name)
	if err := fn(b.ctx); err != nil {
		b.t.Fatalf("step %q: %v (screenshot: %s)", name, err, b.screenshot(name))
	}
}

var unsafeName = regexp.MustCompile(`[^a-z0-9]+`)

func (b *browser) screenshot(name string) string {
	ctx, cancel := context.WithTimeout(b.ctx, 15*time.Second)
	defer cancel()
	buf, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		return "none: " + err.Error()
	}
	if err := os.MkdirAll(b.shots, 0o755); err != nil {
		return "none: " + err.Error()
	}
	// Subtests' names hold slashes.
	test := strings.ReplaceAll(b.t.Name(), "/", "-")
	path := filepath.Join(b.shots, fmt.Sprintf("%s-%02d-%s.png", test, b.n, unsafeName.ReplaceAllString(strings.ToLower(name), "-")))
	if err := os.WriteFile(path, buf, 0o644); err != nil {
		return "none: " + err.Error()
	}
	abs, _ := filepath.Abs(path)
	return abs
}

// waitJS evaluates expr until it is true. It polls from Go, not inside the
// page, so it survives the reloads of the proxy's "starting" page.
func (b *browser) waitJS(ctx context.Context, timeout time.Duration, expr string) error {
	var last error
	err := waitUntil(ctx, timeout, func() bool {
		ectx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		ok, err := chromedp.Run(ectx, chromedp.Evaluate[bool](`!!(`+expr+`)`))
		last = err
		return err == nil && ok
	})
	if err != nil && last != nil {
		return fmt.Errorf("%w (last evaluation: %v)", err, last)
	}
	return err
}

func waitUntil(ctx context.Context, timeout time.Duration, cond func() bool) error {
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			return fmt.Errorf("condition not met within %s", timeout)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
	return nil
}

func cardSelector(id string) string {
	return fmt.Sprintf(`document.querySelector('article[data-id="%s"]')`, id)
}

// waitPhase waits on the dashboard until the card shows phase with no
// operation running, as the event stream delivers it.
func (b *browser) waitPhase(ctx context.Context, id, phase string, timeout time.Duration) error {
	expr := fmt.Sprintf(`(c => c && c.dataset.phase === %q && c.dataset.operation === "NONE")(%s)`, phase, cardSelector(id))
	if err := b.waitJS(ctx, timeout, expr); err != nil {
		got, _ := chromedp.Run(ctx, chromedp.Evaluate[string](fmt.Sprintf(`(c => c ? c.dataset.phase + "/" + c.dataset.operation + ": " + c.innerText : "no card")(%s)`, cardSelector(id))))
		return fmt.Errorf("waiting for %s: %w; card: %s", phase, err, got)
	}
	return nil
}

// toDashboard navigates to the dashboard unless the page shows it already.
func (b *browser) toDashboard(ctx context.Context) error {
	loc, err := chromedp.Run(ctx, chromedp.Location())
	if err != nil {
		return err
	}
	if strings.TrimSuffix(loc, "/") == b.srv.url {
		return nil
	}
	return chromedp.Do(ctx, chromedp.Navigate(b.srv.url+"/"), chromedp.WaitVisible(chromedp.ID("app-view")))
}

// clickAction waits on the dashboard for the card's button to be enabled,
// clicks it and waits until the server took the change (the card shows the
// new desired state, or is gone after a delete); an error the page shows
// instead fails the step with its text.
func (b *browser) clickAction(ctx context.Context, id, action string) error {
	if err := b.toDashboard(ctx); err != nil {
		return err
	}
	sel := fmt.Sprintf(`article[data-id="%s"] .act-%s`, id, action)
	if err := b.waitJS(ctx, time.Minute, fmt.Sprintf(`(e => e && !e.hidden && !e.disabled)(document.querySelector('%s'))`, sel)); err != nil {
		return fmt.Errorf("%s button never enabled: %w", action, err)
	}
	if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS(sel))); err != nil {
		return err
	}
	took := map[string]string{
		"start": `c.dataset.desired === "RUNNING"`, "restore": `c.dataset.desired === "RUNNING"`,
		"stop": `c.dataset.desired === "STANDBY"`, "archive": `c.dataset.desired === "ARCHIVED"`,
		"delete": `false`,
	}[action]
	state := fmt.Sprintf(`(c => !c ? "taken" : (%s) ? "taken" : !document.getElementById("toast").hidden ? "error" : "")(%s)`, took, cardSelector(id))
	var answer string
	err := waitUntil(ctx, time.Minute, func() bool {
		answer, _ = chromedp.Run(ctx, chromedp.Evaluate[string](state))
		return answer != ""
	})
	if err != nil {
		return fmt.Errorf("%s: the page never showed the change: %w", action, err)
	}
	if answer == "error" {
		msg, _ := chromedp.Run(ctx, chromedp.Text(chromedp.ID("toast")))
		return fmt.Errorf("%s: the page reported: %s", action, msg)
	}
	return nil
}

// openWorkbench follows the card's Open link and waits until code-server's
// workbench lists the marker file, which it reads over its WebSocket. When
// checkSocket is set it also requires a WebSocket to the workspace that
// received frames.
func (b *browser) openWorkbench(ctx context.Context, id string, checkSocket bool) error {
	if err := b.toDashboard(ctx); err != nil {
		return err
	}
	if err := b.waitJS(ctx, time.Minute, cardSelector(id)+`.querySelector(".act-open").href`); err != nil {
		return err
	}
	href, err := chromedp.Run(ctx, chromedp.Evaluate[string](cardSelector(id)+`.querySelector(".act-open").href`))
	if err != nil {
		return err
	}
	sctx, cancel := context.WithTimeout(ctx, 4*time.Minute)
	defer cancel()
	created := chromedp.Events(sctx, network.WebSocketCreated)
	frames := chromedp.Events(sctx, network.WebSocketFrameReceived)
	if err := chromedp.Do(ctx, chromedp.Navigate(href)); err != nil {
		return err
	}
	workbench := fmt.Sprintf(`document.querySelector(".monaco-workbench") && document.body.innerText.includes(%q)`, markerFile)
	if err := b.waitJS(ctx, 3*time.Minute, workbench); err != nil {
		return fmt.Errorf("workbench with %s: %w", markerFile, err)
	}
	if !checkSocket {
		return nil
	}
	var socket network.RequestID
	for ev, err := range created {
		if err != nil {
			return fmt.Errorf("no WebSocket to the workspace: %w", err)
		}
		if strings.Contains(ev.URL, "/w/"+id+"/") {
			socket = ev.RequestID
			break
		}
	}
	for ev, err := range frames {
		if err != nil {
			return fmt.Errorf("workspace WebSocket received nothing: %w", err)
		}
		if ev.RequestID == socket {
			return nil
		}
	}
	return errors.New("event stream ended")
}

// acceptDialogsWhile accepts every JavaScript dialog (the delete
// confirmation) that opens while fn runs.
func (b *browser) acceptDialogsWhile(ctx context.Context, fn func() error) error {
	dctx, cancel := context.WithCancel(ctx)
	dialogs := chromedp.Events(dctx, page.JavascriptDialogOpening)
	var wg sync.WaitGroup
	var accepted bytes.Buffer
	wg.Add(1)
	go func() {
		defer wg.Done()
		for ev, err := range dialogs {
			if err != nil {
				return
			}
			accepted.WriteString(ev.Message)
			if _, err := chromedp.Call(dctx, page.HandleJavaScriptDialog, page.HandleJavaScriptDialogParams{Accept: true}); err != nil {
				return
			}
		}
	}()
	err := fn()
	cancel()
	wg.Wait()
	if err == nil && !strings.Contains(accepted.String(), "e2e") {
		err = fmt.Errorf("delete asked no confirmation naming the workspace (dialogs: %q)", accepted.String())
	}
	return err
}
