package e2e

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/codehub-io/codehub/internal/nomadtest"
	"github.com/codehub-io/codehub/internal/testenv"
)

// TestBrowserPorts: the dashboard's workspace card lists the port a dev
// server in the workspace listens on, with its program, address and a
// share control that offers no level above the operator's cap; the owner
// opens the port's address in Chromium (its host gets a session of its
// own) and a WebSocket from that page reaches the dev server; a browser
// without a session is sent to the login page.
func TestBrowserPorts(t *testing.T) {
	browserPorts(t, localConfig(t), localHome)
}

// TestNomadBrowserPorts is TestBrowserPorts on real Nomad under raw_exec,
// where the agent relays the port's connections.
func TestNomadBrowserPorts(t *testing.T) {
	agent := nomadtest.Start(t, "")
	browserPorts(t, nomadConfig(t, agent), func(_ *server, id string) string { return volumePath(t, agent, id) })
}

func browserPorts(t *testing.T, cfg serverConfig, homeOf func(srv *server, id string) string) {
	chromium := program(t, envChromium, "/usr/bin/chromium", "Chromium", "apt-get install chromium")
	cfg.publicHost, cfg.subdomainBase, cfg.maxPortShare = "localhost", "localhost", "authenticated"
	srv := startServer(t, cfg)
	admin := login(t, srv)
	web := createRunning(t, admin, "web")
	run := shellIn(t, srv, newSSHUser(t, srv, admin), web, homeOf(srv, web.ID), true)
	port := testenv.FreePort(t)
	run(fmt.Sprintf("nohup %s --bind-addr 127.0.0.1:%d </dev/null >/dev/null 2>&1 & echo $! > dev.pid", devServer(t), port), "")
	address := portAddress(srv, web.ID, port)
	origin := strings.TrimSuffix(address, "/")
	item := fmt.Sprintf(`%s.querySelector('.port-list li[data-port="%d"]')`, cardSelector(web.ID), port)

	b := newBrowser(t, chromium, srv)
	b.step("log in", b.logIn(srv.url+"/", "app-view"))
	b.step("the card lists the port", func(ctx context.Context) error {
		if err := b.waitJS(ctx, time.Minute, cardSelector(web.ID)); err != nil {
			return err
		}
		if _, err := chromedp.Run(ctx, chromedp.Evaluate[bool](fmt.Sprintf(`%s.querySelector(".ports").open = true`, cardSelector(web.ID)))); err != nil {
			return err
		}
		// The list is read when the details open; refresh until the
		// server has started listening.
		return waitUntil(ctx, time.Minute, func() bool {
			ok, err := chromedp.Run(ctx, chromedp.Evaluate[bool](fmt.Sprintf(
				`(() => { const li = %s; if (!li) { %s.querySelector(".act-ports-refresh").click(); return false; }
				  return li.querySelector(".port-process").textContent === "devserver" &&
				    li.querySelector(".port-link").href === %q && li.querySelector(".port-share").value === "owner" &&
				    li.querySelector('option[value="public"]').disabled && !li.querySelector('option[value="authenticated"]').disabled; })()`,
				item, cardSelector(web.ID), address)))
			return err == nil && ok
		})
	})
	b.step("share it with logged-in users", func(ctx context.Context) error {
		if _, err := chromedp.Run(ctx, chromedp.Evaluate[bool](fmt.Sprintf(
			`(s => { s.value = "authenticated"; s.dispatchEvent(new Event("change")); return true; })(%s.querySelector(".port-share"))`, item))); err != nil {
			return err
		}
		return waitUntil(ctx, 30*time.Second, func() bool {
			var list struct {
				Ports []struct {
					Port  int    `json:"port"`
					Share string `json:"share"`
				} `json:"ports"`
			}
			if code := admin.do("GET", "/api/v1/workspaces/"+web.ID+"/ports", nil, &list); code != http.StatusOK {
				return false
			}
			for _, p := range list.Ports {
				if p.Port == port {
					return p.Share == "authenticated"
				}
			}
			return false
		})
	})
	b.step("the owner opens the port and talks to it over a WebSocket", func(ctx context.Context) error {
		if err := chromedp.Do(ctx, chromedp.Navigate(address+"echo")); err != nil {
			return err
		}
		if err := b.waitJS(ctx, time.Minute, fmt.Sprintf(`location.origin === %q && document.body.innerText.includes('"path":"/echo"')`, origin)); err != nil {
			return err
		}
		got, err := chromedp.Run(ctx, chromedp.Evaluate[string](`new Promise((resolve, reject) => {
			const ws = new WebSocket("ws://" + location.host + "/ws");
			ws.onopen = () => ws.send("from-the-browser");
			ws.onmessage = (e) => { resolve(e.data); ws.close(); };
			ws.onerror = () => reject(new Error("websocket failed"));
		})`, chromedp.EvalAwaitPromise))
		if err != nil {
			return err
		}
		if got != "from-the-browser" {
			return fmt.Errorf("the dev server echoed %q", got)
		}
		return nil
	})

	anon := newBrowser(t, chromium, srv)
	anon.step("a browser without a session is asked to log in", func(ctx context.Context) error {
		if err := chromedp.Do(ctx, chromedp.Navigate(address)); err != nil {
			return err
		}
		return anon.waitJS(ctx, time.Minute, fmt.Sprintf(`location.origin === %q && location.pathname === "/login" && !!document.getElementById("login-form")`, srv.url))
	})
}
