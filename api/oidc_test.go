package api_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/codehub-io/codehub/api"
	"github.com/codehub-io/codehub/api/apitest"
	"github.com/codehub-io/codehub/internal/oidctest"
	"github.com/codehub-io/codehub/store"
)

const (
	ssoClientID     = "codehub"
	ssoClientSecret = "codehub-client-secret"
	callbackPath    = "/api/v1/auth/oidc/callback"
)

// startSSO runs a CodeHub surface signing users in through a real OpenID
// Provider on loopback; tune changes the settings from their defaults
// (members of "dev" allowed, of "ops" admins).
func startSSO(t *testing.T, tune func(*api.OIDCOptions)) (*apitest.Env, *oidctest.Provider) {
	t.Helper()
	return startSSOWith(t, oidctest.ClaimsInIDToken, tune)
}

// startSSOWith is startSSO with a provider that puts the claims where
// claims says.
func startSSOWith(t *testing.T, claims oidctest.Claims, tune func(*api.OIDCOptions)) (*apitest.Env, *oidctest.Provider) {
	t.Helper()
	var p *oidctest.Provider
	env := apitest.New(t, apitest.Config{OIDC: func(publicURL string) *api.OIDCOptions {
		p = oidctest.Start(t, oidctest.Client{ID: ssoClientID, Secret: ssoClientSecret, RedirectURI: publicURL + callbackPath,
			PostLogoutRedirectURI: publicURL + "/", Claims: claims})
		o := &api.OIDCOptions{
			Issuer: p.Issuer, ClientID: ssoClientID, ClientSecret: ssoClientSecret,
			Scopes: []string{"openid", "profile"}, UsernameClaim: "preferred_username", GroupsClaim: "groups",
			AllowedGroups: []string{"dev"}, AdminGroups: []string{"ops"}, Label: "Test IdP",
		}
		if tune != nil {
			tune(o)
		}
		return o
	}})
	return env, p
}

// ssoLogin signs u in through the provider in client c and returns the
// callback's answer, with its body read.
func ssoLogin(t *testing.T, env *apitest.Env, p *oidctest.Provider, c *http.Client, u oidctest.User, rewrite func(*url.URL)) (*http.Response, string) {
	t.Helper()
	validate(t, c)
	res := p.Login(t, c, env.URL+"/api/v1/auth/oidc/login", u, rewrite)
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatalf("read callback answer: %v", err)
	}
	if res.Request.URL.Path != callbackPath {
		t.Fatalf("login ended at %s, not the callback", res.Request.URL)
	}
	return res, string(body)
}

type sessionJSON struct {
	User struct {
		ID       string `json:"id"`
		Username string `json:"username"`
		IsAdmin  bool   `json:"is_admin"`
	} `json:"user"`
}

func session(t *testing.T, env *apitest.Env, c *http.Client) (sessionJSON, int) {
	t.Helper()
	res := env.Do(c, "GET", "/api/v1/session", nil)
	var s sessionJSON
	if res.StatusCode == http.StatusOK {
		res.Decode(t, &s)
	}
	return s, res.StatusCode
}

func mustSSOLogin(t *testing.T, env *apitest.Env, p *oidctest.Provider, u oidctest.User) (*http.Client, sessionJSON) {
	t.Helper()
	c := env.Client()
	res, body := ssoLogin(t, env, p, c, u, nil)
	if res.StatusCode != http.StatusFound || res.Header.Get("Location") != "/" {
		t.Fatalf("login of %s: status %d, location %q\n%s", u.Username, res.StatusCode, res.Header.Get("Location"), body)
	}
	s, status := session(t, env, c)
	if status != http.StatusOK {
		t.Fatalf("session after login of %s: status %d", u.Username, status)
	}
	return c, s
}

func TestSSOLoginCreatesTheUserOnce(t *testing.T) {
	env, p := startSSO(t, nil)
	alice := oidctest.User{Subject: "sub-alice", Username: "Alice", Password: "alice-at-idp", Groups: []string{"dev"}}
	p.AddUser(alice)

	c := env.Client()
	v := validate(t, c)
	var methods struct {
		Password bool `json:"password"`
		OIDC     *struct {
			Label    string `json:"label"`
			LoginURL string `json:"login_url"`
		} `json:"oidc"`
	}
	env.Do(c, "GET", "/api/v1/auth/methods", nil).Decode(t, &methods)
	if !methods.Password || methods.OIDC == nil || methods.OIDC.Label != "Test IdP" || methods.OIDC.LoginURL != "/api/v1/auth/oidc/login" {
		t.Errorf("auth methods = %+v", methods)
	}
	if v.seen[http.StatusOK] == 0 {
		t.Error("the validator saw no response")
	}

	_, first := mustSSOLogin(t, env, p, alice)
	if first.User.Username != "alice" || first.User.IsAdmin {
		t.Errorf("first login: %+v, want alice (lower-cased), not admin", first.User)
	}
	var issuer, subject string
	if err := env.Pool.QueryRow(context.Background(), `SELECT oidc_issuer, oidc_subject FROM users WHERE id = $1`, first.User.ID).Scan(&issuer, &subject); err != nil {
		t.Fatal(err)
	}
	if issuer != p.Issuer || subject != alice.Subject {
		t.Errorf("user keyed by (%s, %s), want (%s, %s)", issuer, subject, p.Issuer, alice.Subject)
	}

	// A renamed account at the provider is still the same user here.
	alice.Username = "alice2"
	p.AddUser(alice)
	_, second := mustSSOLogin(t, env, p, alice)
	if second.User.ID != first.User.ID || second.User.Username != "alice" {
		t.Errorf("second login: %+v, want the user of the first (%s)", second.User, first.User.ID)
	}
	var users int
	if err := env.Pool.QueryRow(context.Background(), `SELECT count(*) FROM users WHERE id <> $1`, store.PrebuildOwnerID).Scan(&users); err != nil || users != 1 {
		t.Errorf("users = %d, %v; want 1", users, err)
	}

	// An SSO user has no password to log in with.
	res := env.Do(env.Client(), "POST", "/api/v1/login", map[string]string{"username": "alice", "password": alice.Password})
	if res.StatusCode != http.StatusUnauthorized {
		t.Errorf("password login of an SSO user: %d %s", res.StatusCode, res.Body)
	}
	if n := countAudit(t, env, "user.login", "success"); n != 2 {
		t.Errorf("audited successful logins = %d, want 2", n)
	}
	if n := countAudit(t, env, "user.create", "success"); n != 1 {
		t.Errorf("audited user creations = %d, want 1", n)
	}
}

func TestSSOGroupMapping(t *testing.T) {
	env, p := startSSO(t, nil)
	bob := oidctest.User{Subject: "sub-bob", Username: "bob", Password: "bob-at-idp", Groups: []string{"dev", "ops"}}
	p.AddUser(bob)

	first, s := mustSSOLogin(t, env, p, bob)
	if !s.User.IsAdmin {
		t.Fatalf("member of admin_groups: %+v, want admin", s.User)
	}

	groupsOf := func() []string {
		t.Helper()
		var groups []string
		if err := env.Pool.QueryRow(context.Background(), `SELECT groups FROM users WHERE username = 'bob'`).Scan(&groups); err != nil {
			t.Fatal(err)
		}
		return groups
	}
	if got := groupsOf(); !slices.Equal(got, []string{"dev", "ops"}) {
		t.Errorf("groups recorded at login: %q", got)
	}
	p.SetGroups(bob.Subject, []string{"dev"})
	if _, s = mustSSOLogin(t, env, p, bob); s.User.IsAdmin {
		t.Errorf("after leaving admin_groups: %+v, want no admin", s.User)
	}
	if got := groupsOf(); !slices.Equal(got, []string{"dev"}) {
		t.Errorf("groups after the next login: %q", got)
	}
	eventually(t, "the older session loses its admin rights", func() bool {
		s, _ := session(t, env, first)
		return !s.User.IsAdmin
	})

	// Out of allowed_groups: refused, and the live sessions end within
	// the session cache's time.
	p.SetGroups(bob.Subject, []string{"sales"})
	res, body := ssoLogin(t, env, p, env.Client(), bob, nil)
	if res.StatusCode != http.StatusForbidden || !strings.Contains(body, "not in a group allowed") {
		t.Errorf("login out of allowed_groups: status %d\n%s", res.StatusCode, body)
	}
	eventually(t, "the refused user's session ends", func() bool {
		_, status := session(t, env, first)
		return status == http.StatusUnauthorized
	})
	if n := countAudit(t, env, "user.login", "failure"); n != 1 {
		t.Errorf("audited failed logins = %d, want 1", n)
	}
}

// The admin flag admin_groups changes at a login is recorded, with where
// it came from; a user created already an admin is not granted again.
func TestSSOAdminGroupsRecorded(t *testing.T) {
	env, p := startSSO(t, nil)
	dora := oidctest.User{Subject: "sub-dora", Username: "dora", Password: "dora-at-idp", Groups: []string{"dev", "ops"}}
	p.AddUser(dora)
	_, s := mustSSOLogin(t, env, p, dora)
	p.SetGroups(dora.Subject, []string{"dev"})
	mustSSOLogin(t, env, p, dora)
	p.SetGroups(dora.Subject, []string{"dev", "ops"})
	mustSSOLogin(t, env, p, dora)
	rows, err := env.Pool.Query(context.Background(), `SELECT action, actor_user_id, target_id, detail FROM audit_events
		WHERE action IN ('user.admin_grant', 'user.admin_revoke') ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var got []string
	for rows.Next() {
		var action, actor, target, detail string
		if err := rows.Scan(&action, &actor, &target, &detail); err != nil {
			t.Fatal(err)
		}
		if actor != s.User.ID || target != s.User.ID || detail != "from admin_groups at login" {
			t.Errorf("%s recorded by %s on %s with %q", action, actor, target, detail)
		}
		got = append(got, action)
	}
	if want := []string{"user.admin_revoke", "user.admin_grant"}; !slices.Equal(got, want) {
		t.Errorf("recorded %v, want %v", got, want)
	}
}

// A provider's username another user already has is refused with 409,
// and nothing is created.
func TestSSORefusesTakenUsername(t *testing.T) {
	env, p := startSSO(t, nil)
	env.CreateUser("erin", false)
	erin := oidctest.User{Subject: "sub-erin", Username: "erin", Password: "erin-at-idp", Groups: []string{"dev"}}
	p.AddUser(erin)
	res, body := ssoLogin(t, env, p, env.Client(), erin, nil)
	if res.StatusCode != http.StatusConflict || !strings.Contains(body, "is already used by another account. Ask an administrator.") {
		t.Errorf("login with a taken username: status %d\n%s", res.StatusCode, body)
	}
	var detail string
	if err := env.Pool.QueryRow(context.Background(), `SELECT detail FROM audit_events WHERE action = 'user.login' AND outcome = 'failure'`).Scan(&detail); err != nil || !strings.Contains(detail, "username erin taken") {
		t.Errorf("recorded refusal %q, %v", detail, err)
	}
	if n := countAudit(t, env, "user.create", "success"); n != 0 {
		t.Errorf("audited user creations = %d, want 0", n)
	}
}

func TestSSORefusesMissingAndWrongClaims(t *testing.T) {
	env, p := startSSO(t, nil)
	for _, tc := range []struct {
		name string
		user oidctest.User
		want string
	}{
		{"no groups claim", oidctest.User{Subject: "s1", Username: "carol", Password: "pw-carol"}, `claim &#34;groups&#34; is missing`},
		{"username not valid here", oidctest.User{Subject: "s2", Username: "dave@example.com", Password: "pw-dave", Groups: []string{"dev"}}, "not a valid username"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p.AddUser(tc.user)
			c := env.Client()
			res, body := ssoLogin(t, env, p, c, tc.user, nil)
			if res.StatusCode != http.StatusForbidden || !strings.Contains(body, tc.want) || !strings.Contains(body, "Sign-in refused") {
				t.Errorf("status %d, want 403 saying %q\n%s", res.StatusCode, tc.want, body)
			}
			if _, status := session(t, env, c); status != http.StatusUnauthorized {
				t.Errorf("session after a refused login: %d", status)
			}
		})
	}
	var users int
	if err := env.Pool.QueryRow(context.Background(), `SELECT count(*) FROM users WHERE id <> $1`, store.PrebuildOwnerID).Scan(&users); err != nil || users != 0 {
		t.Errorf("users = %d, %v; want none created", users, err)
	}
}

// Each common way a provider hands out the claims works with the default
// settings: in the ID token, only from UserInfo (OpenID Connect Core 5.4),
// and the groups only from UserInfo.
func TestSSOClaimsFromIDTokenOrUserinfo(t *testing.T) {
	for _, tc := range []struct {
		name   string
		claims oidctest.Claims
	}{
		{"in the ID token", oidctest.ClaimsInIDToken},
		{"only from UserInfo", oidctest.ClaimsInUserinfo},
		{"groups only from UserInfo", oidctest.GroupsInUserinfo},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env, p := startSSOWith(t, tc.claims, nil)
			kim := oidctest.User{Subject: "sub-kim", Username: "Kim", Password: "pw-kim", Groups: []string{"dev", "ops"}}
			p.AddUser(kim)
			_, s := mustSSOLogin(t, env, p, kim)
			if s.User.Username != "kim" || !s.User.IsAdmin {
				t.Errorf("logged in as %+v, want kim, admin from admin_groups", s.User)
			}
			var groups []string
			if err := env.Pool.QueryRow(context.Background(), `SELECT groups FROM users WHERE id = $1`, s.User.ID).Scan(&groups); err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(groups, []string{"dev", "ops"}) {
				t.Errorf("groups recorded: %q", groups)
			}
			// Out of allowed_groups is refused here as everywhere.
			p.SetGroups(kim.Subject, []string{"sales"})
			if res, body := ssoLogin(t, env, p, env.Client(), kim, nil); res.StatusCode != http.StatusForbidden || !strings.Contains(body, "not in a group allowed") {
				t.Errorf("login out of allowed_groups: status %d\n%s", res.StatusCode, body)
			}
		})
	}
}

// A UserInfo answer about another subject than the ID token's is refused
// (Core 5.3.2), even though it would name an allowed user, and the refusal
// is recorded with its reason.
func TestSSORefusesUserinfoOfAnotherSubject(t *testing.T) {
	env, p := startSSOWith(t, oidctest.ClaimsInUserinfo, nil)
	lee := oidctest.User{Subject: "sub-lee", Username: "lee", Password: "pw-lee", Groups: []string{"dev"}}
	boss := oidctest.User{Subject: "sub-boss", Username: "boss", Password: "pw-boss", Groups: []string{"dev", "ops"}}
	p.AddUser(lee)
	p.AddUser(boss)
	p.AnswerUserinfoAs(lee.Subject, boss.Subject)
	c := env.Client()
	res, body := ssoLogin(t, env, p, c, lee, nil)
	if res.StatusCode != http.StatusForbidden || !strings.Contains(body, "UserInfo") || !strings.Contains(body, "another user") {
		t.Errorf("UserInfo of another subject: status %d\n%s", res.StatusCode, body)
	}
	if _, status := session(t, env, c); status != http.StatusUnauthorized {
		t.Errorf("session after the refusal: %d", status)
	}
	var detail string
	if err := env.Pool.QueryRow(context.Background(), `SELECT detail FROM audit_events WHERE action = 'user.login' AND outcome = 'failure'`).Scan(&detail); err != nil {
		t.Fatalf("no refused login recorded: %v", err)
	}
	if !strings.Contains(detail, "sub-boss") || !strings.Contains(detail, "sub-lee") {
		t.Errorf("recorded reason %q names neither subject", detail)
	}
	var users int
	if err := env.Pool.QueryRow(context.Background(), `SELECT count(*) FROM users WHERE id <> $1`, store.PrebuildOwnerID).Scan(&users); err != nil || users != 0 {
		t.Errorf("users = %d, %v; want none created", users, err)
	}
	// The same provider answering truthfully again lets lee in.
	p.AnswerUserinfoAs(lee.Subject, "")
	if _, s := mustSSOLogin(t, env, p, lee); s.User.Username != "lee" || s.User.IsAdmin {
		t.Errorf("logged in as %+v, want lee", s.User)
	}
}

// A username claim neither the ID token nor UserInfo has is refused with
// the claim named.
func TestSSORefusesUsernameMissingEverywhere(t *testing.T) {
	env, p := startSSOWith(t, oidctest.ClaimsInUserinfo, func(o *api.OIDCOptions) { o.UsernameClaim = "nickname" })
	max := oidctest.User{Subject: "sub-max", Username: "max", Password: "pw-max", Groups: []string{"dev"}}
	p.AddUser(max)
	res, body := ssoLogin(t, env, p, env.Client(), max, nil)
	if res.StatusCode != http.StatusForbidden || !strings.Contains(body, `claim &#34;nickname&#34; is missing`) {
		t.Errorf("status %d, want 403 naming the claim\n%s", res.StatusCode, body)
	}
}

// A nonce changed on the way to the provider comes back in the ID token,
// which the callback then refuses: it answers another login.
func TestSSORefusesBadNonce(t *testing.T) {
	env, p := startSSO(t, nil)
	erin := oidctest.User{Subject: "sub-erin", Username: "erin", Password: "pw-erin", Groups: []string{"dev"}}
	p.AddUser(erin)
	c := env.Client()
	res, body := ssoLogin(t, env, p, c, erin, func(u *url.URL) {
		q := u.Query()
		q.Set("nonce", "chosen-by-someone-else")
		u.RawQuery = q.Encode()
	})
	if res.StatusCode != http.StatusForbidden || !strings.Contains(body, "answers another login") {
		t.Errorf("status %d, want 403 for the nonce\n%s", res.StatusCode, body)
	}
	if _, status := session(t, env, c); status != http.StatusUnauthorized {
		t.Errorf("session after a bad nonce: %d", status)
	}
}

// A callback reached in another browser than the one that started the
// login (without its state cookie) is refused, and so is one used twice.
func TestSSORefusesForeignOrReplayedCallback(t *testing.T) {
	env, p := startSSO(t, nil)
	frank := oidctest.User{Subject: "sub-frank", Username: "frank", Password: "pw-frank", Groups: []string{"dev"}}
	p.AddUser(frank)
	c := env.Client()
	callback := p.CallbackURL(t, c, env.URL+"/api/v1/auth/oidc/login", frank, nil).String()
	get := func(client *http.Client) int {
		t.Helper()
		res, err := client.Get(callback)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		return res.StatusCode
	}
	if status := get(env.Client()); status != http.StatusBadRequest {
		t.Errorf("callback in another browser: status %d, want 400", status)
	}
	if status := get(c); status != http.StatusFound {
		t.Fatalf("callback in the browser that started: status %d, want 302", status)
	}
	if status := get(c); status != http.StatusBadRequest {
		t.Errorf("callback used twice: status %d, want 400", status)
	}
}

func TestSSORefusesDisabledUser(t *testing.T) {
	env, p := startSSO(t, nil)
	jo := oidctest.User{Subject: "sub-jo", Username: "jo", Password: "pw-jo", Groups: []string{"dev"}}
	p.AddUser(jo)
	_, s := mustSSOLogin(t, env, p, jo)
	env.Exec(`UPDATE users SET disabled = true WHERE id = $1`, s.User.ID)
	res, body := ssoLogin(t, env, p, env.Client(), jo, nil)
	if res.StatusCode != http.StatusForbidden || !strings.Contains(body, "This account is disabled.") {
		t.Errorf("login of a disabled user: status %d\n%s", res.StatusCode, body)
	}
	var actor string
	if err := env.Pool.QueryRow(context.Background(), `SELECT actor_user_id FROM audit_events WHERE action = 'user.login' AND outcome = 'failure'`).Scan(&actor); err != nil || actor != s.User.ID {
		t.Errorf("refused login recorded for %q, %v; want %s", actor, err, s.User.ID)
	}
}

func TestSSOLogout(t *testing.T) {
	env, p := startSSO(t, nil)
	gina := oidctest.User{Subject: "sub-gina", Username: "gina", Password: "pw-gina", Groups: []string{"dev"}}
	p.AddUser(gina)
	c, _ := mustSSOLogin(t, env, p, gina)
	if res := env.Do(c, "POST", "/api/v1/logout", nil); res.StatusCode != http.StatusNoContent {
		t.Fatalf("logout: %d %s", res.StatusCode, res.Body)
	}
	if _, status := session(t, env, c); status != http.StatusUnauthorized {
		t.Errorf("session after logout: %d", status)
	}
	if n := countAudit(t, env, "user.logout", "success"); n != 1 {
		t.Errorf("audited logouts = %d, want 1", n)
	}
	// Logging in again goes through the provider again.
	mustSSOLogin(t, env, p, gina)
}

// Logging out of a single sign-on session offers to end the provider's
// session too (RP-Initiated Logout): the browser is sent to the provider's
// end_session_endpoint with the login's ID token, our client id, the
// registered post-logout address and a state, and the provider ends its
// session and sends the browser back there.
func TestSSOLogoutAtTheProvider(t *testing.T) {
	env, p := startSSO(t, nil)
	pia := oidctest.User{Subject: "sub-pia", Username: "pia", Password: "pw-pia", Groups: []string{"dev"}}
	p.AddUser(pia)
	c, _ := mustSSOLogin(t, env, p, pia)
	var offer struct {
		Offered bool   `json:"offered"`
		Label   string `json:"label"`
	}
	env.Do(c, "GET", "/api/v1/auth/oidc/logout", nil).Decode(t, &offer)
	if !offer.Offered || offer.Label != "Test IdP" {
		t.Errorf("logout offer = %+v, want offered by Test IdP", offer)
	}

	res := env.Do(c, "POST", "/api/v1/auth/oidc/logout", nil)
	if res.StatusCode != http.StatusOK {
		t.Fatalf("logout: %d %s", res.StatusCode, res.Body)
	}
	if strings.Contains(res.Header.Get("Set-Cookie"), "eyJ") {
		t.Errorf("the ID token went into a cookie: %s", res.Header.Get("Set-Cookie"))
	}
	var out struct {
		EndSessionURL string `json:"end_session_url"`
	}
	res.Decode(t, &out)
	end, err := url.Parse(out.EndSessionURL)
	if err != nil {
		t.Fatal(err)
	}
	q := end.Query()
	if got := end.Scheme + "://" + end.Host + end.Path; got != p.Issuer+"/end_session" {
		t.Errorf("sent to %s, want the provider's end_session_endpoint", got)
	}
	if q.Get("client_id") != ssoClientID || q.Get("post_logout_redirect_uri") != env.URL+"/" || q.Get("state") == "" {
		t.Errorf("end-session parameters %v", q)
	}
	if sub := jwtSubject(t, q.Get("id_token_hint")); sub != pia.Subject {
		t.Errorf("id_token_hint is for %q, want %q", sub, pia.Subject)
	}
	if _, status := session(t, env, c); status != http.StatusUnauthorized {
		t.Errorf("session after logout: %d", status)
	}
	var detail string
	if err := env.Pool.QueryRow(context.Background(), `SELECT detail FROM audit_events WHERE action = 'user.logout' AND outcome = 'success'`).Scan(&detail); err != nil || detail != "and at the identity provider" {
		t.Errorf("recorded logout %q, %v", detail, err)
	}

	// The provider ends its session and sends the browser back to the
	// registered address, with the state.
	back, err := c.Get(out.EndSessionURL)
	if err != nil {
		t.Fatal(err)
	}
	back.Body.Close()
	if loc, _ := back.Location(); back.StatusCode != http.StatusFound || loc == nil ||
		loc.Scheme+"://"+loc.Host+loc.Path != env.URL+"/" || loc.Query().Get("state") != q.Get("state") {
		t.Errorf("provider's end-session: status %d, location %v", back.StatusCode, loc)
	}

	// A password session has no provider session to end.
	quin := env.CreateUser("quin", false)
	pc := env.Login(quin)
	env.Do(pc, "GET", "/api/v1/auth/oidc/logout", nil).Decode(t, &offer)
	if offer.Offered {
		t.Errorf("a password session is offered the provider's logout")
	}
	res = env.Do(pc, "POST", "/api/v1/auth/oidc/logout", nil)
	res.Decode(t, &out)
	if res.StatusCode != http.StatusOK || out.EndSessionURL != "" {
		t.Errorf("password session logout: %d %+v", res.StatusCode, out)
	}
	if _, status := session(t, env, pc); status != http.StatusUnauthorized {
		t.Errorf("password session after logout: %d", status)
	}
}

// jwtSubject reads the sub of a JWT without checking it (the provider
// did, when it took it back as a hint).
func jwtSubject(t *testing.T, raw string) string {
	t.Helper()
	parts := strings.Split(raw, ".")
	if len(parts) != 3 {
		t.Fatalf("%q is not a JWT", raw)
	}
	payload, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		t.Fatal(err)
	}
	var claims struct {
		Sub string `json:"sub"`
	}
	if err := json.Unmarshal(payload, &claims); err != nil {
		t.Fatal(err)
	}
	return claims.Sub
}

func TestPasswordLoginTurnedOff(t *testing.T) {
	env := apitest.New(t, apitest.Config{NoPasswordLogin: true})
	env.CreateUser("harry", false)
	c := env.Client()
	validate(t, c)
	res := env.Do(c, "POST", "/api/v1/login", map[string]string{"username": "harry", "password": apitest.Password})
	if res.StatusCode != http.StatusForbidden {
		t.Errorf("password login while off: %d %s", res.StatusCode, res.Body)
	}
	var methods struct {
		Password bool `json:"password"`
	}
	env.Do(c, "GET", "/api/v1/auth/methods", nil).Decode(t, &methods)
	if methods.Password {
		t.Error("auth methods offer the password login while it is off")
	}
	if res := env.Do(c, "GET", "/api/v1/auth/oidc/login", nil); res.StatusCode != http.StatusNotFound {
		t.Errorf("oidc login without oidc: %d", res.StatusCode)
	}
}

// eventually waits, longer than the session cache keeps an answer, for
// cond to hold.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 5s", what)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func countAudit(t *testing.T, env *apitest.Env, action, outcome string) int {
	t.Helper()
	var n int
	err := env.Pool.QueryRow(context.Background(), `SELECT count(*) FROM audit_events WHERE action = $1 AND outcome = $2`, action, outcome).Scan(&n)
	if err != nil {
		t.Fatal(err)
	}
	return n
}
