package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
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

// The browser test's server allows two images, so the dashboard offers a
// choice. The local backend runs code-server whatever the image says.
const (
	defaultImage = "codercom/code-server:4.100.3"
	secondImage  = "codercom/code-server:4.99.4"
)

func TestBrowserWorkspaceLifecycle(t *testing.T) {
	chromium := program(t, envChromium, "/usr/bin/chromium", "Chromium", "apt-get install chromium")
	cfg := localConfig(t)
	cfg.workspace = fmt.Sprintf("workspace {\n  image          = %q\n  allowed_images = [%[1]q, %q]\n}\n", defaultImage, secondImage)
	srv := startServer(t, cfg)
	b := newBrowser(t, chromium, srv)

	b.step("log in", b.logIn(srv.url+"/", "app-view"))

	var id string
	created := time.Now()
	b.step("create", func(ctx context.Context) error {
		// Two images are allowed: the form offers them, the default first.
		if err := b.waitJS(ctx, 10*time.Second, fmt.Sprintf(`(s => !s.hidden && s.options.length === 2 && s.value === %q)(document.getElementById("create-image"))`, defaultImage)); err != nil {
			return fmt.Errorf("image picker: %w", err)
		}
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
	b.step("keep running", func(ctx context.Context) error {
		// The card tells when an unused workspace stops; keeping it running
		// moves that to two hours from now.
		if err := b.waitJS(ctx, 10*time.Second, cardSelector(id)+`.querySelector(".timers").textContent.startsWith("Stops in ")`); err != nil {
			return err
		}
		if err := b.clickAction(ctx, id, "extend"); err != nil {
			return err
		}
		return b.waitJS(ctx, 10*time.Second, cardSelector(id)+`.querySelector(".timers").textContent.startsWith("Kept running for 2 h ·")`)
	})
	b.step("autostart schedule", func(ctx context.Context) error {
		card := fmt.Sprintf(`article[data-id="%s"]`, id)
		if err := chromedp.Do(ctx,
			chromedp.Click(chromedp.CSS(card+" .schedule summary")),
			chromedp.WaitVisible(chromedp.CSS(card+" .act-schedule-save")),
			chromedp.Click(chromedp.CSS(card+" .act-schedule-save")),
		); err != nil {
			return err
		}
		// Weekdays are offered first, in the browser's own time zone.
		return b.waitJS(ctx, 10*time.Second, cardSelector(id)+`.querySelector(".timers").textContent.toLowerCase().includes("starts weekdays at 09:00 (")`)
	})
	t.Logf("create to RUNNING in the dashboard: %s", time.Since(created).Round(time.Millisecond))

	home := filepath.Join(srv.dataDir, "volumes", "ws-"+id+"-home")
	if err := os.WriteFile(filepath.Join(home, markerFile), []byte("written before archiving\n"), 0o644); err != nil {
		t.Fatalf("write marker into the home: %v", err)
	}

	// At the running limit a new workspace is made stopped, with the
	// image picked, and the page says why.
	var two string
	b.step("create at the running limit", func(ctx context.Context) error {
		if err := chromedp.Do(ctx,
			chromedp.SetValue(chromedp.ID("create-image"), secondImage),
			chromedp.SendKeys(chromedp.ID("create-name"), "e2e-two"),
			chromedp.Click(chromedp.ID("create-submit")),
			chromedp.WaitVisible(chromedp.ID("create-notice")),
		); err != nil {
			return err
		}
		notice, err := chromedp.Run(ctx, chromedp.Text(chromedp.ID("create-notice")))
		if err != nil {
			return err
		}
		if !strings.HasPrefix(notice, "Created stopped") {
			return fmt.Errorf("notice %q", notice)
		}
		if err := b.waitJS(ctx, 10*time.Second, `document.querySelectorAll("#list article").length === 2`); err != nil {
			return err
		}
		two, err = chromedp.Run(ctx, chromedp.Evaluate[string](`[...document.querySelectorAll("#list article")].find(c => c.querySelector(".ws-name").textContent === "e2e-two").dataset.id`))
		if err != nil {
			return err
		}
		got, err := b.apiWorkspace(ctx, two)
		if err != nil {
			return err
		}
		if got.Desired != "STANDBY" || got.Image != secondImage {
			return fmt.Errorf("workspace created at the limit: desired %s, image %s", got.Desired, got.Image)
		}
		return b.waitPhase(ctx, two, "STANDBY", 2*time.Minute)
	})
	b.step("rename", func(ctx context.Context) error {
		card := fmt.Sprintf(`article[data-id="%s"]`, two)
		if err := chromedp.Do(ctx,
			chromedp.Click(chromedp.CSS(card+" .act-rename")),
			chromedp.WaitVisible(chromedp.CSS(card+" .rename-input")),
			chromedp.SetValue(chromedp.CSS(card+" .rename-input"), "e2e-second"),
			chromedp.Click(chromedp.CSS(card+` .rename-form button[type="submit"]`)),
		); err != nil {
			return err
		}
		if err := b.waitJS(ctx, 10*time.Second, cardSelector(two)+`.querySelector(".ws-name").textContent === "e2e-second" && `+cardSelector(two)+`.querySelector(".rename-form").hidden`); err != nil {
			return err
		}
		got, err := b.apiWorkspace(ctx, two)
		if err != nil {
			return err
		}
		if got.Name != "e2e-second" {
			return fmt.Errorf("name after renaming: %q", got.Name)
		}
		return nil
	})
	b.step("start at the running limit", func(ctx context.Context) error {
		if err := b.startAtLimit(ctx, two); err != nil {
			return err
		}
		text, err := chromedp.Run(ctx, chromedp.Text(chromedp.ID("limit")))
		if err != nil {
			return err
		}
		// The banner lists the running workspace with its Stop, and offers
		// the refused start again.
		if !strings.Contains(text, "Stop e2e") || !strings.Contains(text, "Start e2e-second") {
			return fmt.Errorf("limit banner: %q", text)
		}
		return nil
	})
	b.step("a retried start explains itself", func(ctx context.Context) error {
		// The card as the event stream would show a start that failed
		// and waits for its retry.
		failing := fmt.Sprintf(`(() => {
			const ws = state.workspaces.get(%q);
			upsert({...ws, version: ws.version + 1, phase: "STANDBY", desired_state: "RUNNING", operation: "NONE",
				error_reason: "StartFailed", error_message: "exited with code 1: Cannot find module './cli'", error_count: 1,
				next_attempt_at: new Date(Date.now() + 40000).toISOString()});
			return true;
		})()`, two)
		if _, err := chromedp.Run(ctx, chromedp.Evaluate[bool](failing)); err != nil {
			return err
		}
		card := cardSelector(two)
		err := b.waitJS(ctx, 5*time.Second, card+`.querySelector(".phase").textContent === "Retrying…" && `+
			card+`.querySelector(".error-box").innerText.includes("Cannot find module") && `+
			card+`.querySelector(".error-retry").textContent.startsWith("Attempt 1 of 3 failed. Next attempt in ")`)
		if err != nil {
			return err
		}
		if err := b.narrow(ctx, "retrying-375", func() error { return nil }); err != nil {
			return err
		}
		// Back to what the server holds.
		real, err := b.apiJSON(ctx, "/api/v1/workspaces/"+two)
		if err != nil {
			return err
		}
		_, err = chromedp.Run(ctx, chromedp.Evaluate[bool](fmt.Sprintf(`(ws => { state.workspaces.delete(ws.id); upsert(ws); return true; })(%s)`, real)))
		return err
	})
	b.step("dashboard layout", func(ctx context.Context) error {
		// Every relative time tells the exact one on hover.
		if err := b.waitJS(ctx, 5*time.Second, `[...document.querySelectorAll(".meta .created, .meta .used")].every(e => e.textContent && e.title)`); err != nil {
			return fmt.Errorf("times without their exact value: %w", err)
		}
		b.t.Logf("dashboard at 1280 px: %s", b.screenshot("dashboard-1280"))
		return b.narrow(ctx, "dashboard-375", func() error {
			return chromedp.Do(ctx, chromedp.Click(chromedp.ID("limit-close")))
		})
	})

	b.step("open the workbench", func(ctx context.Context) error { return b.openWorkbench(ctx, id, true) })
	b.step("the workbench names the home after the workspace", func(ctx context.Context) error {
		// The workspace sees its home as /home/{name}: the explorer's
		// folder is the workspace's name and the address shows no path of
		// the host's.
		if err := b.waitJS(ctx, 30*time.Second, `new URLSearchParams(location.search).get("folder") === "/home/e2e" && [...document.querySelectorAll(".explorer-viewlet .pane-header .title")].some(e => e.textContent.trim() === "e2e")`); err != nil {
			return err
		}
		b.t.Logf("workbench: %s", b.screenshot("workbench"))
		return nil
	})

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
		if err := b.waitPhase(ctx, id, "STANDBY", 2*time.Minute); err != nil {
			return err
		}
		// The card says why it stopped and when it will be archived.
		return b.waitJS(ctx, 10*time.Second, cardSelector(id)+`.querySelector(".timers").textContent.startsWith("Stopped by you · starts weekdays") && `+cardSelector(id)+`.querySelector(".timers").textContent.includes(" · archived in ")`)
	})

	woke := time.Now()
	b.step("open wakes the workspace", func(ctx context.Context) error { return b.openWorkbench(ctx, id, false) })
	t.Logf("open of a STANDBY workspace to workbench with the home listed: %s", time.Since(woke).Round(time.Millisecond))

	b.step("stop from the limit banner", func(ctx context.Context) error {
		if err := b.toDashboard(ctx); err != nil {
			return err
		}
		if err := b.waitPhase(ctx, id, "RUNNING", time.Minute); err != nil {
			return err
		}
		if err := b.startAtLimit(ctx, two); err != nil {
			return err
		}
		stop := fmt.Sprintf(`#limit-running li[data-id="%s"] button`, id)
		if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS(stop))); err != nil {
			return err
		}
		if err := b.waitPhase(ctx, id, "STANDBY", 2*time.Minute); err != nil {
			return err
		}
		// With room made, the refused start is offered again.
		if err := b.waitJS(ctx, 10*time.Second, `!document.getElementById("limit-retry").hidden && !document.querySelector('#limit-running li[data-id="`+id+`"]')`); err != nil {
			return err
		}
		return chromedp.Do(ctx, chromedp.Click(chromedp.ID("limit-close")))
	})

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
	b.step("archives on the card", func(ctx context.Context) error {
		card := fmt.Sprintf(`article[data-id="%s"]`, id)
		if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS(card+" .archives summary"))); err != nil {
			return err
		}
		// One archive, with its date, its size, the mark that a
		// restore reads it and its download.
		list := cardSelector(id) + `.querySelector(".archive-list")`
		if err := b.waitJS(ctx, 30*time.Second, list+`.children.length === 1 && `+list+`.textContent.includes("current") && /\d (bytes|KB|MB)/.test(`+list+`.textContent) && `+list+`.querySelector("time").title && /\/archives\/[0-9a-z]{26}\/home\.tar\.zst$/.test(`+list+`.querySelector("a.archive-download[download]").href)`); err != nil {
			return err
		}
		return b.narrow(ctx, "archives-375", func() error { return nil })
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

	b.step("stop from the proxy's limit page", func(ctx context.Context) error {
		if err := chromedp.Do(ctx, chromedp.Navigate(srv.url+"/w/"+two+"/")); err != nil {
			return err
		}
		if err := b.waitJS(ctx, 30*time.Second, `document.title.startsWith("Too many running workspaces") && document.querySelector(".running a.button")`); err != nil {
			return err
		}
		if err := b.narrow(ctx, "limit-page-375", func() error { return nil }); err != nil {
			return err
		}
		// Stop leads to the dashboard, which shows the workspace and asks.
		if err := chromedp.Do(ctx,
			chromedp.Click(chromedp.CSS(".running a.button")),
			chromedp.WaitVisible(chromedp.ID("stop-ask")),
		); err != nil {
			return err
		}
		if err := b.waitJS(ctx, 10*time.Second, cardSelector(id)+`.classList.contains("highlight") && document.getElementById("stop-ask-confirm").textContent === "Stop e2e"`); err != nil {
			return err
		}
		if got, _ := b.apiWorkspace(ctx, id); got.Desired != "RUNNING" {
			return fmt.Errorf("following the link alone stopped the workspace: desired %s", got.Desired)
		}
		if err := b.narrow(ctx, "stop-asked-375", func() error { return nil }); err != nil {
			return err
		}
		if err := chromedp.Do(ctx, chromedp.Click(chromedp.ID("stop-ask-confirm"))); err != nil {
			return err
		}
		// Once stopped, the page offers the workspace the user meant to open.
		return b.waitJS(ctx, time.Minute, `(a => !a.hidden && a.textContent === "Open e2e-second" && a.href.includes("`+two+`"))(document.getElementById("stop-ask-open"))`)
	})

	b.step("unknown page", func(ctx context.Context) error {
		if err := chromedp.Do(ctx, chromedp.Navigate(srv.url+"/no/such/page"), chromedp.WaitVisible(chromedp.ID("not-found"))); err != nil {
			return err
		}
		status, err := chromedp.Run(ctx, chromedp.Evaluate[int](`fetch(location.href).then(r => r.status)`, chromedp.EvalAwaitPromise))
		if err != nil {
			return err
		}
		if status != http.StatusNotFound {
			return fmt.Errorf("unknown page: HTTP %d, want 404", status)
		}
		// The page is styled: the dashboard's stylesheet laid it out.
		if err := b.waitJS(ctx, 5*time.Second, `getComputedStyle(document.querySelector(".login-card")).borderRadius === "14px"`); err != nil {
			return err
		}
		return b.narrow(ctx, "not-found-375", func() error { return nil })
	})

	b.step("delete", func(ctx context.Context) error {
		if err := b.acceptDialogsWhile(ctx, "e2e", func() error { return b.clickAction(ctx, two, "delete") }); err != nil {
			return err
		}
		if err := b.acceptDialogsWhile(ctx, "e2e", func() error { return b.clickAction(ctx, id, "delete") }); err != nil {
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

// pages records the address of every page the browser requests from now
// on; the function it returns gives those requested so far.
func (b *browser) pages() (func() []string, error) {
	var mu sync.Mutex
	var visited []string
	err := chromedp.Listen(b.ctx, func(ev any) {
		if e, ok := ev.(*network.EventRequestWillBeSent); ok && e.Type == network.ResourceTypeDocument {
			mu.Lock()
			visited = append(visited, e.Request.URL)
			mu.Unlock()
		}
	})
	return func() []string {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(visited)
	}, err
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

// logIn is the step of logging in as the admin on the login form that
// address shows, until the element id appears.
func (b *browser) logIn(address, id string) func(ctx context.Context) error {
	return func(ctx context.Context) error {
		return chromedp.Do(ctx,
			chromedp.Navigate(address),
			chromedp.WaitVisible(chromedp.ID("login-form")),
			chromedp.SendKeys(chromedp.ID("login-username"), "admin"),
			chromedp.SendKeys(chromedp.ID("login-password"), adminPassword),
			chromedp.Click(chromedp.ID("login-submit")),
			chromedp.WaitVisible(chromedp.ID(id)),
		)
	}
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

// phaseWords are the dashboard's words for the steady phases, as a
// workspace that reached the one it is wanted in shows them.
var phaseWords = map[string]string{"RUNNING": "Running", "STANDBY": "Stopped", "ARCHIVED": "Archived"}

// waitPhase waits on the dashboard until the card shows phase with no
// operation running, as the event stream delivers it, and says so in a
// user's words.
func (b *browser) waitPhase(ctx context.Context, id, phase string, timeout time.Duration) error {
	expr := fmt.Sprintf(`(c => c && c.dataset.phase === %q && c.dataset.operation === "NONE" && c.dataset.desired === %[1]q)(%s)`, phase, cardSelector(id))
	if err := b.waitJS(ctx, timeout, expr); err != nil {
		got, _ := chromedp.Run(ctx, chromedp.Evaluate[string](fmt.Sprintf(`(c => c ? c.dataset.phase + "/" + c.dataset.operation + ": " + c.innerText : "no card")(%s)`, cardSelector(id))))
		return fmt.Errorf("waiting for %s: %w; card: %s", phase, err, got)
	}
	label, err := chromedp.Run(ctx, chromedp.Evaluate[string](cardSelector(id)+`.querySelector(".phase").textContent`))
	if err != nil {
		return err
	}
	if label != phaseWords[phase] {
		return fmt.Errorf("card of a %s workspace says %q, want %q", phase, label, phaseWords[phase])
	}
	return nil
}

// startAtLimit clicks Start on workspace id while the running limit is
// reached and waits for the limit banner.
func (b *browser) startAtLimit(ctx context.Context, id string) error {
	sel := fmt.Sprintf(`article[data-id="%s"] .act-start`, id)
	if err := b.waitJS(ctx, time.Minute, fmt.Sprintf(`(e => e && !e.hidden && !e.disabled)(document.querySelector('%s'))`, sel)); err != nil {
		return fmt.Errorf("start button never enabled: %w", err)
	}
	return chromedp.Do(ctx, chromedp.Click(chromedp.CSS(sel)), chromedp.WaitVisible(chromedp.ID("limit")))
}

// narrow shows the current page 375 px wide, as a phone does, checks that
// nothing sticks out sideways, saves a screenshot named name, runs fn
// there, and goes back to the desktop width.
func (b *browser) narrow(ctx context.Context, name string, fn func() error) error {
	if err := chromedp.Do(ctx, chromedp.EmulateViewport(375, 812, chromedp.EmulateMobile, chromedp.EmulatePortrait)); err != nil {
		return err
	}
	defer func() { _ = chromedp.Do(ctx, chromedp.EmulateViewport(1280, 900)) }()
	err := b.waitJS(ctx, 5*time.Second, `window.innerWidth === 375 && document.documentElement.scrollWidth <= 375`)
	b.t.Logf("%s: %s", name, b.screenshot(name))
	if err != nil {
		wide, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`[...document.querySelectorAll("body *")].filter(e => e.getBoundingClientRect().right > 375).map(e => e.tagName + "." + e.className).slice(0, 8).join(", ")`))
		return fmt.Errorf("page wider than 375 px: %w (too wide: %s)", err, wide)
	}
	return fn()
}

// apiWorkspace reads a workspace over the API with the page's session.
func (b *browser) apiWorkspace(ctx context.Context, id string) (apiWorkspace, error) {
	var w apiWorkspace
	raw, err := b.apiJSON(ctx, "/api/v1/workspaces/"+id)
	if err != nil {
		return w, err
	}
	return w, json.Unmarshal([]byte(raw), &w)
}

// apiJSON GETs path with the page's session and returns the body.
func (b *browser) apiJSON(ctx context.Context, path string) (string, error) {
	return chromedp.Run(ctx, chromedp.Evaluate[string](fmt.Sprintf(`fetch(%q).then(r => r.ok ? r.text() : Promise.reject(new Error("HTTP " + r.status)))`, path), chromedp.EvalAwaitPromise))
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
		"delete": `false`, "extend": `c.querySelector(".timers").textContent.startsWith("Kept running")`,
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

// acceptDialogsWhile accepts every JavaScript dialog (a confirmation)
// that opens while fn runs; one of them must name what it asks about.
func (b *browser) acceptDialogsWhile(ctx context.Context, naming string, fn func() error) error {
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
	if err == nil && !strings.Contains(accepted.String(), naming) {
		err = fmt.Errorf("no confirmation named %q (dialogs: %q)", naming, accepted.String())
	}
	return err
}
