package e2e

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/cookiejar"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"
)

// disableEndsWithin is how soon the workbench's sockets must close after
// its user is disabled: the proxy's recheck (2 s) and the session cache
// (2 s), with room for a loaded machine.
const disableEndsWithin = 15 * time.Second

// TestBrowserDisabledUserLosesWorkbench: a user types in the terminal of
// a workbench open in Chromium; an administrator disables the user; the
// workbench's sockets close within seconds, and what the user types after
// that never reaches the shell.
func TestBrowserDisabledUserLosesWorkbench(t *testing.T) {
	chromium := program(t, envChromium, "/usr/bin/chromium", "Chromium", "apt-get install chromium")
	srv := startServer(t, localConfig(t))
	admin := login(t, srv)
	var alice struct {
		ID string `json:"id"`
	}
	const password = "alice-password-1"
	if code := admin.do("POST", "/api/v1/admin/users", map[string]any{"username": "alice", "password": password}, &alice); code != http.StatusCreated {
		t.Fatalf("create alice: %d", code)
	}
	jar, err := cookiejar.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	owner := &apiClient{tb: t, base: srv.url, http: &http.Client{Jar: jar, Timeout: 30 * time.Second}}
	if code := owner.do("POST", "/api/v1/login", map[string]string{"username": "alice", "password": password}, nil); code != http.StatusOK {
		t.Fatalf("alice's login: %d", code)
	}
	var ws apiWorkspace
	if code := owner.do("POST", "/api/v1/workspaces", map[string]string{"name": "e2e-revoked"}, &ws); code != http.StatusCreated {
		t.Fatalf("create: %d", code)
	}
	owner.settle(ws.ID, "RUNNING", time.Now())
	home := filepath.Join(srv.dataDir, "volumes", "ws-"+ws.ID+"-home")

	wb := &workbench{browser: newBrowser(t, chromium, srv), id: ws.ID, home: home}
	sockets := watchSockets(t, wb.browser, "/w/"+ws.ID+"/")
	wb.step("log in as alice", func(ctx context.Context) error {
		if err := chromedp.Do(ctx, chromedp.Navigate(srv.url+"/")); err != nil {
			return err
		}
		status, err := chromedp.Run(ctx, chromedp.Evaluate[int](fmt.Sprintf(`fetch("/api/v1/login", {method: "POST",
			headers: {"Content-Type": "application/json"}, body: JSON.stringify({username: "alice", password: %q})}).then(r => r.status)`, password),
			chromedp.EvalAwaitPromise))
		if err == nil && status != http.StatusOK {
			err = fmt.Errorf("login: HTTP %d", status)
		}
		return err
	})
	wb.step("open the workbench", func(ctx context.Context) error {
		if err := chromedp.Do(ctx, chromedp.Navigate(srv.url+"/w/"+ws.ID+"/")); err != nil {
			return err
		}
		return wb.waitJS(ctx, 3*time.Minute, `document.querySelector(".explorer-folders-view .monaco-list-row")`)
	})
	wb.step("open a terminal", wb.openTerminal)
	wb.step("a command typed before the disable runs", func(ctx context.Context) error {
		if err := typeKeys(ctx, "touch ~/typed-before\r"); err != nil {
			return err
		}
		return waitUntil(ctx, time.Minute, func() bool { return exists(filepath.Join(home, "typed-before")) })
	})
	open := sockets.open()
	if len(open) == 0 {
		t.Fatal("the workbench has no open WebSocket to the workspace")
	}

	disabled := time.Now()
	if code := admin.do("PATCH", "/api/v1/admin/users/"+alice.ID, map[string]any{"disabled": true}, nil); code != http.StatusOK {
		t.Fatalf("disable alice: %d", code)
	}
	wb.step("the workbench's sockets close", func(ctx context.Context) error {
		err := waitUntil(ctx, disableEndsWithin, func() bool { return sockets.allClosed(open) })
		if err != nil {
			return fmt.Errorf("%d of %d sockets still open: %w", len(open)-sockets.closedOf(open), len(open), err)
		}
		t.Logf("%d sockets closed %s after the disable", len(open), time.Since(disabled).Round(100*time.Millisecond))
		return nil
	})
	t.Logf("after the disable: %s", wb.screenshot("after the disable"))
	wb.step("a command typed after the disable never runs", func(ctx context.Context) error {
		// The terminal may have lost the focus to a notice.
		_ = chromedp.Do(ctx, chromedp.Click(chromedp.CSS(".terminal-wrapper .xterm-screen")))
		if err := typeKeys(ctx, "touch ~/typed-after\r"); err != nil {
			return err
		}
		err := waitUntil(ctx, 15*time.Second, func() bool { return exists(filepath.Join(home, "typed-after")) })
		if err == nil {
			return errors.New("a command typed after the disable ran in the workspace")
		}
		return nil
	})

	var trail struct {
		Events []struct {
			Action string `json:"action"`
			Detail string `json:"detail"`
		} `json:"events"`
	}
	if code := admin.do("GET", "/api/v1/admin/audit?user_id="+alice.ID, nil, &trail); code != http.StatusOK {
		t.Fatalf("audit: %d", code)
	}
	found := false
	for _, e := range trail.Events {
		found = found || e.Action == "session.connection_end" && strings.HasPrefix(e.Detail, "session ended")
	}
	if !found {
		t.Fatalf("the audit log has no session.connection_end event for alice: %+v", trail.Events)
	}
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// socketLog follows the browser's WebSockets whose URL holds a path.
type socketLog struct {
	mu      sync.Mutex
	created map[network.RequestID]bool
	closed  map[network.RequestID]bool
}

func watchSockets(t *testing.T, b *browser, path string) *socketLog {
	t.Helper()
	l := &socketLog{created: map[network.RequestID]bool{}, closed: map[network.RequestID]bool{}}
	err := chromedp.Listen(b.ctx, func(ev any) {
		l.mu.Lock()
		defer l.mu.Unlock()
		switch e := ev.(type) {
		case *network.EventWebSocketCreated:
			if strings.Contains(e.URL, path) {
				l.created[e.RequestID] = true
			}
		case *network.EventWebSocketClosed:
			l.closed[e.RequestID] = true
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// open is the sockets created and not closed.
func (l *socketLog) open() []network.RequestID {
	l.mu.Lock()
	defer l.mu.Unlock()
	var ids []network.RequestID
	for id := range l.created {
		if !l.closed[id] {
			ids = append(ids, id)
		}
	}
	return ids
}

func (l *socketLog) closedOf(ids []network.RequestID) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, id := range ids {
		if l.closed[id] {
			n++
		}
	}
	return n
}

func (l *socketLog) allClosed(ids []network.RequestID) bool { return l.closedOf(ids) == len(ids) }
