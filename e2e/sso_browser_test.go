package e2e

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/codehub-io/codehub/internal/oidctest"
	"github.com/codehub-io/codehub/internal/testenv"
)

// Single sign-on in a real browser: the dashboard's login page offers the
// provider, the provider's own form signs the user in, the dashboard opens
// with the rights admin_groups give, the admin pages show the new user and
// the login in the audit log, signing out offers to end the provider's
// session too and goes through the provider's end-session endpoint back to
// the dashboard, and a user out of allowed_groups gets the refusal page.
func TestBrowserSingleSignOn(t *testing.T) {
	chromium := program(t, envChromium, "/usr/bin/chromium", "Chromium", "apt-get install chromium")
	cfg := localConfig(t)
	cfg.port = testenv.FreePort(t)
	const secret = "e2e-oidc-client-secret"
	p := oidctest.Start(t, oidctest.Client{ID: "codehub", Secret: secret,
		RedirectURI:           fmt.Sprintf("http://127.0.0.1:%d/api/v1/auth/oidc/callback", cfg.port),
		PostLogoutRedirectURI: fmt.Sprintf("http://127.0.0.1:%d/", cfg.port)})
	alice := oidctest.User{Subject: "sub-alice", Username: "alice", Password: "alice-at-idp", Groups: []string{"dev", "ops"}}
	p.AddUser(alice)
	cfg.oidc = fmt.Sprintf(`  oidc {
    issuer         = %q
    client_id      = "codehub"
    client_secret  = %q
    allowed_groups = ["dev"]
    admin_groups   = ["ops"]
    label          = "Test IdP"
  }
`, p.Issuer, secret)
	srv := startServer(t, cfg)
	b := newBrowser(t, chromium, srv)

	signIn := func(ctx context.Context, u oidctest.User) error {
		return chromedp.Do(ctx,
			chromedp.Navigate(srv.url+"/"),
			chromedp.WaitVisible(chromedp.ID("login-sso-link")),
			chromedp.Click(chromedp.ID("login-sso-link")),
			chromedp.WaitVisible(chromedp.ID("idp-username")),
			chromedp.SendKeys(chromedp.ID("idp-username"), u.Username),
			chromedp.SendKeys(chromedp.ID("idp-password"), u.Password),
			chromedp.Click(chromedp.ID("idp-submit")),
		)
	}

	b.step("login page offers the provider", func(ctx context.Context) error {
		if err := chromedp.Do(ctx, chromedp.Navigate(srv.url+"/"), chromedp.WaitVisible(chromedp.ID("login-sso-link"))); err != nil {
			return err
		}
		return b.waitJS(ctx, 5*time.Second, `document.getElementById("login-sso-link").textContent === "Sign in with Test IdP" && !document.getElementById("login-password-fields").hidden`)
	})
	b.step("sign in at the provider", func(ctx context.Context) error {
		if err := signIn(ctx, alice); err != nil {
			return err
		}
		if err := chromedp.Do(ctx, chromedp.WaitVisible(chromedp.ID("app-view"))); err != nil {
			return err
		}
		return b.waitJS(ctx, 10*time.Second, `location.pathname === "/" && document.getElementById("user-name").textContent === "alice" && !document.getElementById("user-admin").hidden && !document.getElementById("admin-nav").hidden`)
	})
	b.step("users page lists the new user", func(ctx context.Context) error {
		if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS(`#admin-nav a[href="/admin/users"]`)), chromedp.WaitVisible(chromedp.ID("admin-users"))); err != nil {
			return err
		}
		return b.waitJS(ctx, 10*time.Second, `(r => r && r.cells[1].textContent === "single sign-on" && r.cells[2].textContent === "administrator")(document.querySelector('#users-body tr[data-user="alice"]'))`)
	})
	b.step("audit log shows the login", func(ctx context.Context) error {
		if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS(`#admin-nav a[href="/admin/audit"]`)), chromedp.WaitVisible(chromedp.ID("admin-audit"))); err != nil {
			return err
		}
		return b.waitJS(ctx, 10*time.Second, `[...document.querySelectorAll("#audit-body tr")].some(r => r.cells[1].textContent === "alice" && r.cells[3].textContent === "user.login" && r.cells[5].textContent === "success")`)
	})
	b.step("sign out here and at the provider", func(ctx context.Context) error {
		if err := chromedp.Do(ctx, chromedp.Click(chromedp.ID("logout")), chromedp.WaitVisible(chromedp.ID("signout-provider"))); err != nil {
			return err
		}
		if err := b.waitJS(ctx, 5*time.Second, `document.getElementById("signout-provider").textContent === "Sign out of CodeHub and Test IdP"`); err != nil {
			return err
		}
		visited, err := b.pages()
		if err != nil {
			return err
		}
		if err := chromedp.Do(ctx, chromedp.Click(chromedp.ID("signout-provider")), chromedp.WaitVisible(chromedp.ID("login-view"))); err != nil {
			return err
		}
		var end *url.URL
		for _, v := range visited() {
			if u, err := url.Parse(v); err == nil && strings.HasPrefix(v, p.Issuer+"/end_session?") {
				end = u
			}
		}
		if end == nil {
			return fmt.Errorf("never went to the provider's end_session_endpoint; pages requested: %q", visited())
		}
		if q := end.Query(); q.Get("client_id") != "codehub" || q.Get("post_logout_redirect_uri") != srv.url+"/" || q.Get("id_token_hint") == "" || q.Get("state") == "" {
			return fmt.Errorf("end-session parameters %v", q)
		}
		// Back on the dashboard from the provider, with the state it kept.
		return b.waitJS(ctx, 5*time.Second, `location.origin === `+fmt.Sprintf("%q", srv.url)+` && new URLSearchParams(location.search).get("state") !== null`)
	})
	b.step("refused outside allowed_groups", func(ctx context.Context) error {
		p.SetGroups(alice.Subject, []string{"sales"})
		if err := signIn(ctx, alice); err != nil {
			return err
		}
		if err := chromedp.Do(ctx, chromedp.WaitVisible(chromedp.ID("refusal-reason"))); err != nil {
			return err
		}
		return b.waitJS(ctx, 5*time.Second, `document.getElementById("refusal-reason").textContent.includes("not in a group allowed")`)
	})
}
