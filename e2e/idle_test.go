package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/input"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"

	"github.com/codehub-io/codehub/activity"
)

// Timers of the server TestBrowserIdle starts.
const (
	idleStandbyTTL  = time.Minute
	idleTTLInterval = 5 * time.Second
	// stopAllowance is how long a stop itself may take once the TTL
	// runner asked for it, on a loaded machine.
	stopAllowance = 45 * time.Second
	// userIdleAfter is the longest the workbench waits after a key press or
	// click before it tells its extensions that the user is idle (VS Code's
	// DomActivityTracker: two to three 30 s intervals).
	userIdleAfter = 90 * time.Second
)

// TestBrowserIdle holds the activity and wake rules (docs/lifecycle.md,
// "Activity") to code-server's workbench in Chromium, against a server
// with a one-minute standby_ttl. Each subtest has its own workspace and
// browser; they run in parallel.
func TestBrowserIdle(t *testing.T) {
	chromium := program(t, envChromium, "/usr/bin/chromium", "Chromium", "apt-get install chromium")
	cfg := localConfig(t)
	cfg.maxRunning = 3
	cfg.standbyTTL, cfg.ttlInterval = idleStandbyTTL.String(), idleTTLInterval.String()
	srv := startServer(t, cfg)

	t.Run("an idle workbench stops", func(t *testing.T) {
		t.Parallel()
		wb := openIdleWorkbench(t, chromium, srv, "idle")
		var idleAt time.Time
		wb.step("the workbench tells its user is idle", func(ctx context.Context) error {
			var err error
			idleAt, err = wb.userState(ctx, false, userIdleAfter+time.Minute)
			return err
		})
		t.Logf("the workbench reported its user idle %s after it opened", idleAt.Sub(wb.opened).Round(time.Second))
		// The owner's dashboard, in a tab of its own, says when it stops:
		// the card's line and, on hover, the exact time.
		dash, closeDash := chromedp.NewContext(wb.ctx)
		defer closeDash()
		// The tab lives as long as the context of its first action.
		if err := chromedp.Do(dash); err != nil {
			t.Fatalf("open a dashboard tab: %v", err)
		}
		card := cardSelector(wb.id)
		wb.step("the dashboard shows the workspace", func(ctx context.Context) error {
			ctx, cancel := context.WithTimeout(dash, time.Minute)
			defer cancel()
			return chromedp.Do(ctx, chromedp.Navigate(srv.url+"/"), chromedp.WaitVisible(`article[data-id="`+wb.id+`"] .timers`))
		})
		dashboardStop := func() (said string, at time.Time) {
			ctx, cancel := context.WithTimeout(dash, 10*time.Second)
			defer cancel()
			timers := card + `.querySelector(".timers")`
			said, _ = chromedp.Run(ctx, chromedp.Evaluate[string](timers+`.textContent`))
			ms, err := chromedp.Run(ctx, chromedp.Evaluate[float64](`Date.parse((`+timers+`.title.split("\n").find(l => l.startsWith("Stops ")) || "").slice(6)) || 0`))
			if err != nil || ms == 0 {
				return said, time.Time{}
			}
			return said, time.UnixMilli(int64(ms))
		}
		// Idle means standby_ttl past the last mark, judged at the next runner
		// pass from marks flushed at most one flush interval late.
		deadline := idleAt.Add(idleStandbyTTL + activity.FlushInterval + idleTTLInterval + stopAllowance)
		var stopAsked, shown time.Time
		var promised *time.Time
		var said string
		wb.step("the workspace stops", func(ctx context.Context) error {
			return waitUntil(ctx, time.Until(deadline), func() bool {
				ws := wb.get()
				if stopAsked.IsZero() && ws.Desired == "STANDBY" {
					stopAsked = time.Now()
				}
				if stopAsked.IsZero() {
					promised = ws.StopsAt
					said, shown = dashboardStop()
				}
				return ws.Phase == "STANDBY" && ws.Operation == "NONE"
			})
		})
		// The API and the dashboard said when it would stop; the runner
		// asks for the stop at its first pass after that.
		if promised == nil {
			t.Fatal("the API gave no stops_at before the stop")
		}
		if shown.IsZero() {
			t.Fatalf("the dashboard showed no stop time before the stop (its line: %q)", said)
		}
		t.Logf("stops_at said %s, the dashboard %q and, on hover, %s; stop asked at %s", promised.Format(time.TimeOnly),
			said, shown.Format(time.TimeOnly), stopAsked.Format(time.TimeOnly))
		for who, at := range map[string]time.Time{"the API's stops_at": *promised, "the dashboard": shown} {
			if stopAsked.Before(at.Add(-time.Second)) || stopAsked.After(at.Add(idleTTLInterval+5*time.Second)) {
				t.Errorf("stop asked at %s; %s said %s", stopAsked.Format(time.TimeOnly), who, at.Format(time.TimeOnly))
			}
		}
		if !strings.Contains(said, "tops in under a minute if unused") {
			t.Errorf("the dashboard's line just before the stop: %q", said)
		}
		t.Logf("stop asked %s after the workbench reported its user idle, STANDBY %s after",
			stopAsked.Sub(idleAt).Round(time.Second), time.Since(idleAt).Round(time.Second))
		// Until then the workbench said its user was active, and that kept
		// the workspace running: it stopped one standby_ttl after, not
		// earlier (give or take one keepalive).
		if early := idleAt.Add(idleStandbyTTL - 10*time.Second); stopAsked.Before(early) {
			t.Fatalf("stop asked at %s, before %s", stopAsked.Format(time.TimeOnly), early.Format(time.TimeOnly))
		}
		// Opening it again, a page load, wakes a workspace that stopped for
		// idleness.
		wb.step("a page load wakes it", func(ctx context.Context) error {
			if err := chromedp.Do(ctx, chromedp.Navigate(srv.url+"/w/"+wb.id+"/")); err != nil {
				return err
			}
			if err := waitUntil(ctx, time.Minute, func() bool { return wb.get().Desired == "RUNNING" }); err != nil {
				return fmt.Errorf("the page load did not wake it: %w", err)
			}
			return wb.waitJS(ctx, 3*time.Minute, `document.querySelector(".explorer-folders-view .monaco-list-row")`)
		})
		wb.api.settle(wb.id, "RUNNING", time.Now())
	})

	t.Run("stop with the tab open", func(t *testing.T) {
		t.Parallel()
		wb := openIdleWorkbench(t, chromium, srv, "stopped")
		// The workbench starts watching its connection in the last phase
		// of its startup, some seconds after it shows; a connection lost
		// before that is never reported.
		time.Sleep(20 * time.Second)
		wb.api.setDesired(wb.id, "STANDBY")
		// CodeHub's bar says why, from the moment the stop is asked.
		wb.step("the workbench says who stopped it", func(ctx context.Context) error {
			return wb.waitJS(ctx, 30*time.Second, `(n => n && n.innerText.includes("Stopped") &&
				n.innerText.includes("You stopped it") && n.innerText.includes("Reload"))(document.getElementById("codehub-notice"))`)
		})
		wb.api.settle(wb.id, "STANDBY", time.Now())
		wb.step("the workbench is told why and stops reconnecting", func(ctx context.Context) error {
			select {
			case r := <-wb.refusals:
				if !strings.Contains(r, "This workspace was stopped.") {
					return fmt.Errorf("refused with %s", r)
				}
			case <-time.After(time.Minute):
				return errors.New("the reconnecting workbench was not refused")
			}
			return wb.waitJS(ctx, time.Minute, `(d => d && d.innerText.includes("Cannot reconnect"))(document.querySelector(".monaco-dialog-box"))`)
		})
		t.Logf("reconnect refused: %s", wb.screenshot("reconnect refused"))
		wb.step("it stays stopped for 30 s", func(ctx context.Context) error {
			for end := time.Now().Add(30 * time.Second); time.Now().Before(end); time.Sleep(time.Second) {
				if ws := wb.get(); ws.Desired != "STANDBY" || ws.Phase != "STANDBY" || ws.Operation != "NONE" {
					return fmt.Errorf("the open tab changed it: %+v", ws)
				}
			}
			return nil
		})
		// The dialog's button reloads the page: a top-level navigation,
		// which wakes it and says who had stopped it.
		wb.step("reloading the window wakes it", func(ctx context.Context) error {
			clicked, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`(b => b ? (b.click(), true) : false)(
				[...document.querySelectorAll(".monaco-dialog-box .monaco-button")].find(b => b.innerText.includes("Reload")))`))
			if err != nil || !clicked {
				return fmt.Errorf("no reload button (%v)", err)
			}
			if err := wb.waitJS(ctx, time.Minute, `(d => d && d.innerText.startsWith("You stopped it"))(document.querySelector(".detail"))`); err != nil {
				return fmt.Errorf("the starting page did not say who stopped it: %w", err)
			}
			if err := waitUntil(ctx, time.Minute, func() bool { return wb.get().Desired == "RUNNING" }); err != nil {
				return fmt.Errorf("the reload did not wake it: %w", err)
			}
			return wb.waitJS(ctx, 3*time.Minute, `document.querySelector(".explorer-folders-view .monaco-list-row")`)
		})
		wb.api.settle(wb.id, "RUNNING", time.Now())
	})

	t.Run("typing in the terminal keeps it running", func(t *testing.T) {
		t.Parallel()
		wb := openIdleWorkbench(t, chromium, srv, "typing")
		wb.step("open a terminal", wb.openTerminal)
		// Longer than an idle workbench takes to stop, counted from the
		// moment it opened.
		until := wb.opened.Add(userIdleAfter + idleStandbyTTL + activity.FlushInterval + idleTTLInterval + 15*time.Second)
		n := 0
		wb.step("type a command every few seconds", func(ctx context.Context) error {
			for time.Now().Before(until) {
				n++
				if err := wb.runInTerminal(ctx, fmt.Sprintf("tick %d", n)); err != nil {
					return fmt.Errorf("command %d: %w", n, err)
				}
				if ws := wb.get(); ws.Desired != "RUNNING" || ws.Phase != "RUNNING" {
					return fmt.Errorf("after %d commands: %+v", n, ws)
				}
				time.Sleep(5 * time.Second)
			}
			return nil
		})
		if ws := wb.get(); ws.Phase != "RUNNING" || ws.Desired != "RUNNING" {
			t.Fatalf("after %s of typing: %+v", time.Since(wb.opened).Round(time.Second), ws)
		}
	})
}

// workbench is a workspace of its own, open in a browser of its own.
type workbench struct {
	*browser
	api  *apiClient
	id   string
	home string
	// opened is when the workbench had read the home.
	opened time.Time
	// states receives the workbench's "user is active" signals as it
	// sends them.
	states chan userState
	// refusals receives the connection refusals the workbench is sent.
	refusals chan string
}

type userState struct {
	active bool
	at     time.Time
}

// openIdleWorkbench creates a workspace and opens its workbench.
func openIdleWorkbench(t *testing.T, chromium string, srv *server, name string) *workbench {
	t.Helper()
	wb := &workbench{api: login(t, srv), states: make(chan userState, 64), refusals: make(chan string, 16)}
	var ws apiWorkspace
	if code := wb.api.do("POST", "/api/v1/workspaces", map[string]string{"name": name}, &ws); code != http.StatusCreated {
		t.Fatalf("create %s: %d", name, code)
	}
	wb.id, wb.home = ws.ID, filepath.Join(srv.dataDir, "volumes", "ws-"+ws.ID+"-home")
	wb.api.settle(ws.ID, "RUNNING", time.Now())
	wb.browser = newBrowser(t, chromium, srv)
	err := chromedp.Listen(wb.ctx, func(ev any) {
		switch f := ev.(type) {
		case *network.EventWebSocketFrameSent:
			if bytes.Contains(f.Response.PayloadData, []byte("$onDidChangeWindowActive")) {
				select {
				case wb.states <- userState{active: bytes.Contains(f.Response.PayloadData, []byte("[true]")), at: time.Now()}:
				default:
				}
			}
		case *network.EventWebSocketFrameReceived:
			// A Control message (type 2) of VS Code's protocol.
			if p := f.Response.PayloadData; len(p) > 13 && p[0] == 2 && bytes.Contains(p, []byte(`"type":"error"`)) {
				select {
				case wb.refusals <- string(p[13:]):
				default:
				}
			}
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	wb.step("log in", func(ctx context.Context) error {
		if err := chromedp.Do(ctx, chromedp.Navigate(srv.url+"/")); err != nil {
			return err
		}
		status, err := chromedp.Run(ctx, chromedp.Evaluate[int](fmt.Sprintf(`fetch("/api/v1/login", {method: "POST",
			headers: {"Content-Type": "application/json"}, body: JSON.stringify({username: "admin", password: %q})}).then(r => r.status)`, adminPassword),
			chromedp.EvalAwaitPromise))
		if err == nil && status != http.StatusOK {
			err = fmt.Errorf("login: HTTP %d", status)
		}
		return err
	})
	wb.step("open the workbench", func(ctx context.Context) error {
		if err := chromedp.Do(ctx, chromedp.Navigate(srv.url+"/w/"+wb.id+"/")); err != nil {
			return err
		}
		// The explorer lists the home once the workbench reads it over
		// its socket.
		if err := wb.waitJS(ctx, 3*time.Minute, `document.querySelector(".explorer-folders-view .monaco-list-row")`); err != nil {
			return err
		}
		// The window is titled with the workspace's name, not the home's
		// folder name.
		return wb.waitJS(ctx, 30*time.Second, fmt.Sprintf(`(t => t === %[1]q || t.endsWith(" - " + %[1]q))(document.title)`, name))
	})
	wb.opened = time.Now()
	return wb
}

func (wb *workbench) get() apiWorkspace {
	wb.t.Helper()
	var ws apiWorkspace
	if code := wb.api.do("GET", "/api/v1/workspaces/"+wb.id, nil, &ws); code != http.StatusOK {
		wb.t.Fatalf("get workspace: %d", code)
	}
	return ws
}

// userState waits until the workbench sends the user state want and
// returns when it did.
func (wb *workbench) userState(ctx context.Context, want bool, timeout time.Duration) (time.Time, error) {
	deadline := time.After(timeout)
	for {
		select {
		case s := <-wb.states:
			if s.active == want {
				return s.at, nil
			}
		case <-deadline:
			return time.Time{}, fmt.Errorf("the workbench never reported its user active=%v within %s", want, timeout)
		case <-ctx.Done():
			return time.Time{}, ctx.Err()
		}
	}
}

// openTerminal opens an integrated terminal through the command palette
// (its shortcut does nothing in headless Chromium) and focuses it.
func (wb *workbench) openTerminal(ctx context.Context) error {
	// On a loaded machine the palette may close, or its text land
	// elsewhere, before the command runs: the whole sequence is tried
	// again from a closed palette.
	var last error
	for attempt := 0; attempt < 4; attempt++ {
		if attempt > 0 {
			_ = pressKey(ctx, "Escape", "Escape", 27, "")
		}
		if last = wb.tryOpenTerminal(ctx); last == nil {
			return chromedp.Do(ctx, chromedp.Click(chromedp.CSS(".terminal-wrapper .xterm-screen")))
		}
	}
	return last
}

func (wb *workbench) tryOpenTerminal(ctx context.Context) error {
	// Keys go to the explorer, not to the welcome page's frame; the
	// workbench may take its keys only some seconds after it shows.
	palette := `(w => w && w.style.display !== "none")(document.querySelector(".quick-input-widget"))`
	err := waitUntil(ctx, 2*time.Minute, func() bool {
		if chromedp.Do(ctx, chromedp.Click(chromedp.CSS(".explorer-folders-view .monaco-list-row"))) != nil ||
			pressKey(ctx, "F1", "F1", 112, "") != nil {
			return false
		}
		return wb.waitJS(ctx, 5*time.Second, palette) == nil
	})
	if err != nil {
		return fmt.Errorf("command palette: %w", err)
	}
	if err := typeKeys(ctx, "Terminal: Create New Terminal"); err != nil {
		return err
	}
	if err := wb.waitJS(ctx, 30*time.Second, `[...document.querySelectorAll(".quick-input-list .monaco-list-row")].some(r => r.innerText.includes("Create New Terminal"))`); err != nil {
		return fmt.Errorf("palette entry: %w", err)
	}
	if err := typeKeys(ctx, "\r"); err != nil {
		return err
	}
	if err := wb.waitJS(ctx, time.Minute, `document.querySelector(".terminal-wrapper .xterm-screen")`); err != nil {
		return fmt.Errorf("terminal: %w", err)
	}
	return nil
}

// runInTerminal types a command that appends line to ~/ticks, and waits
// until the line is there. On a loaded machine the keyboard has left the
// terminal after its first command (only one of 33 ran), so it is put
// back in the terminal first, as a user would with a click, and once more
// if the line does not come.
func (wb *workbench) runInTerminal(ctx context.Context, line string) error {
	landed := func() bool {
		b, err := os.ReadFile(filepath.Join(wb.home, "ticks"))
		return err == nil && bytes.Contains(b, []byte(line+"\n"))
	}
	var last error
	for attempt := 0; attempt < 2; attempt++ {
		if err := wb.focusTerminal(ctx); err != nil {
			return err
		}
		command := "echo " + line + " >> ~/ticks\r"
		if attempt > 0 {
			// Ends whatever part of the line the first attempt left.
			command = "\r" + command
		}
		if err := typeKeys(ctx, command); err != nil {
			return err
		}
		if last = waitUntil(ctx, 20*time.Second, landed); last == nil {
			return nil
		}
		wb.t.Logf("%q did not reach the shell; clicking into the terminal again (screenshot: %s)", line, wb.screenshot("terminal lost the keyboard"))
	}
	return fmt.Errorf("the terminal did not run it: %w", last)
}

// focusTerminal clicks into the terminal unless the keyboard is there.
func (wb *workbench) focusTerminal(ctx context.Context) error {
	inside, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`!!(document.activeElement && document.activeElement.closest(".terminal-wrapper"))`))
	if err != nil || inside {
		return err
	}
	return chromedp.Do(ctx, chromedp.Click(chromedp.CSS(".terminal-wrapper .xterm-screen")))
}

// typeKeys types s with a key-down and a key-up per character (\r is
// Enter).
func typeKeys(ctx context.Context, s string) error {
	for _, r := range s {
		var err error
		if r == '\r' {
			err = pressKey(ctx, "Enter", "Enter", 13, "\r")
		} else {
			err = pressKey(ctx, string(r), "", 0, string(r))
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// pressKey sends one key press. (chromedp's KeyEvent adds a "char" event
// after the key-down, which the terminal takes as a second character.)
func pressKey(ctx context.Context, key, code string, keyCode int64, text string) error {
	down := input.DispatchKeyEventParams{Type: input.DispatchKeyEventTypeKeyDown, Key: key, Code: code,
		WindowsVirtualKeyCode: keyCode, NativeVirtualKeyCode: keyCode, Text: text}
	if _, err := chromedp.Call(ctx, input.DispatchKeyEvent, down); err != nil {
		return err
	}
	up := input.DispatchKeyEventParams{Type: input.DispatchKeyEventTypeKeyUp, Key: key, Code: code,
		WindowsVirtualKeyCode: keyCode, NativeVirtualKeyCode: keyCode}
	_, err := chromedp.Call(ctx, input.DispatchKeyEvent, up)
	return err
}
