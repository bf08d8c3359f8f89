package api_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/codehub-io/codehub/api/apitest"
)

type tokenJSON struct {
	ID         string     `json:"id"`
	Name       string     `json:"name"`
	Scope      string     `json:"scope"`
	Admin      bool       `json:"admin"`
	ExpiresAt  time.Time  `json:"expires_at"`
	LastUsedAt *time.Time `json:"last_used_at"`
}

type createdJSON struct {
	Token  tokenJSON `json:"token"`
	Secret string    `json:"secret"`
}

func bearer(secret string) []string { return []string{"Authorization", "Bearer " + secret} }

// TestTokenLifecycle: a token is made with a session, its secret is shown
// once and stored only as a keyed hash, it opens the API as its user
// without a cookie and without the cross-origin check, and it stops
// working when revoked or expired.
func TestTokenLifecycle(t *testing.T) {
	env := apitest.New(t, apitest.Config{})
	alice := env.CreateUser("alice", false)
	c := env.Login(alice)
	v := validate(t, c)
	res := env.Do(c, "POST", "/api/v1/tokens", map[string]any{"name": "laptop", "scope": "read-write", "expires_in_days": 7})
	if res.StatusCode != 201 {
		t.Fatalf("create token: %d %s", res.StatusCode, res.Body)
	}
	var created createdJSON
	res.Decode(t, &created)
	tok := created.Token
	if !strings.HasPrefix(created.Secret, "codehub_") || tok.Name != "laptop" || tok.Scope != "read-write" || tok.Admin || tok.LastUsedAt != nil {
		t.Fatalf("created %s", res.Body)
	}
	if d := time.Until(tok.ExpiresAt); d < 7*24*time.Hour-time.Minute || d > 7*24*time.Hour+time.Minute {
		t.Fatalf("expires_at %v, want in 7 days", tok.ExpiresAt)
	}
	if res.Header.Get("Cache-Control") != "no-store" {
		t.Errorf("the answer holding the secret may be cached: %q", res.Header.Get("Cache-Control"))
	}
	var stored []byte
	if err := env.Pool.QueryRow(context.Background(), `SELECT secret_hash FROM api_tokens WHERE id = $1`, tok.ID).Scan(&stored); err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(stored, []byte(created.Secret)) || len(stored) != 32 {
		t.Fatalf("stored %x, want a 32-byte hash", stored)
	}
	list := env.Do(c, "GET", "/api/v1/tokens", nil)
	if list.StatusCode != 200 || strings.Contains(string(list.Body), created.Secret) || !strings.Contains(string(list.Body), tok.ID) {
		t.Fatalf("list: %d %s", list.StatusCode, list.Body)
	}

	anon := env.Client()
	validate(t, anon)
	var sess struct {
		User struct{ Username string } `json:"user"`
	}
	res = env.Do(anon, "GET", "/api/v1/session", nil, bearer(created.Secret)...)
	res.Decode(t, &sess)
	if res.StatusCode != 200 || sess.User.Username != "alice" {
		t.Fatalf("session by token: %d %s", res.StatusCode, res.Body)
	}
	// No cookie, so no cross-origin check: a page cannot make a browser
	// send the header.
	res = env.Do(anon, "POST", "/api/v1/workspaces", map[string]string{"name": "api"}, append(bearer(created.Secret), "Origin", "http://elsewhere.example")...)
	if res.StatusCode != 201 {
		t.Fatalf("create workspace by token: %d %s", res.StatusCode, res.Body)
	}
	var ws wsJSON
	res.Decode(t, &ws)
	if ws.OwnerID != alice.ID {
		t.Fatalf("workspace made by alice's token belongs to %s", ws.OwnerID)
	}
	// The cookie still needs the check.
	if res := env.Do(c, "POST", "/api/v1/workspaces", map[string]string{"name": "evil"}, "Origin", "http://elsewhere.example"); res.StatusCode != 403 || res.ErrorCode() != "CROSS_ORIGIN" {
		t.Fatalf("cross-origin with a cookie: %d %s", res.StatusCode, res.Body)
	}
	// An Authorization header is judged alone: a wrong one is not rescued
	// by the session cookie beside it.
	for _, h := range []string{"Bearer codehub_wrong", "Bearer " + created.Secret + "x", "Basic YWxpY2U6eA==", "Bearer"} {
		if res := env.Do(c, "GET", "/api/v1/workspaces", nil, "Authorization", h); res.StatusCode != 401 || res.ErrorCode() != "UNAUTHENTICATED" {
			t.Fatalf("Authorization %q with a good cookie: %d %s", h, res.StatusCode, res.Body)
		}
	}

	var listed struct{ Tokens []tokenJSON }
	env.Do(c, "GET", "/api/v1/tokens", nil).Decode(t, &listed)
	if len(listed.Tokens) != 1 || listed.Tokens[0].LastUsedAt == nil {
		t.Fatalf("after use: %+v", listed.Tokens)
	}

	if res := env.Do(anon, "DELETE", "/api/v1/tokens/"+tok.ID, nil, bearer(created.Secret)...); res.StatusCode != 204 {
		t.Fatalf("revoke by the token itself: %d %s", res.StatusCode, res.Body)
	}
	if res := env.Do(anon, "GET", "/api/v1/workspaces", nil, bearer(created.Secret)...); res.StatusCode != 401 {
		t.Fatalf("revoked token: %d %s", res.StatusCode, res.Body)
	}
	if res := env.Do(c, "DELETE", "/api/v1/tokens/"+tok.ID, nil); res.StatusCode != 404 {
		t.Fatalf("revoke twice: %d %s", res.StatusCode, res.Body)
	}

	expiring := env.Token(alice, map[string]any{"name": "short", "scope": "read"})
	if res := env.Do(anon, "GET", "/api/v1/workspaces", nil, bearer(expiring)...); res.StatusCode != 200 {
		t.Fatalf("fresh token: %d %s", res.StatusCode, res.Body)
	}
	env.Exec(`UPDATE api_tokens SET expires_at = now() - interval '1 second'`)
	// A replica trusts a lookup for two seconds; a fresh one asks the table.
	fresh := env.NewReplica(apitest.Config{})
	req, _ := http.NewRequest("GET", "/api/v1/workspaces", nil)
	req.Header.Set("Authorization", "Bearer "+expiring)
	rec := recordTo(fresh, req)
	if rec.Code != 401 {
		t.Fatalf("expired token: %d %s", rec.Code, rec.Body)
	}
	if v.seen[201] == 0 || v.seen[200] == 0 {
		t.Fatalf("responses were not validated: %v", v.seen)
	}
}

// TestTokenScopes: a read token reads and is refused every change with
// 403 READ_ONLY_TOKEN, which changes nothing.
func TestTokenScopes(t *testing.T) {
	env := apitest.New(t, apitest.Config{})
	alice := env.CreateUser("alice", false)
	w := env.CreateWorkspace(alice, "one")
	read := env.Token(alice, map[string]any{"name": "ci", "scope": "read"})
	c := env.Client()
	validate(t, c)
	for _, path := range []string{"/api/v1/workspaces", "/api/v1/workspaces/" + w.ID, "/api/v1/tokens", "/api/v1/images"} {
		if res := env.Do(c, "GET", path, nil, bearer(read)...); res.StatusCode != 200 {
			t.Fatalf("read token GET %s: %d %s", path, res.StatusCode, res.Body)
		}
	}
	var listed struct{ Tokens []tokenJSON }
	env.Do(c, "GET", "/api/v1/tokens", nil, bearer(read)...).Decode(t, &listed)
	for _, tc := range []struct {
		method, path string
		body         any
	}{
		{"POST", "/api/v1/workspaces", map[string]string{"name": "two"}},
		{"PATCH", "/api/v1/workspaces/" + w.ID, map[string]string{"desired_state": "STANDBY"}},
		{"DELETE", "/api/v1/workspaces/" + w.ID, nil},
		{"POST", "/api/v1/workspaces/" + w.ID + "/extend", map[string]float64{"hours": 1}},
		{"DELETE", "/api/v1/tokens/" + listed.Tokens[0].ID, nil},
	} {
		res := env.Do(c, tc.method, tc.path, tc.body, bearer(read)...)
		if res.StatusCode != 403 || res.ErrorCode() != "READ_ONLY_TOKEN" {
			t.Fatalf("read token %s %s: %d %s", tc.method, tc.path, res.StatusCode, res.Body)
		}
	}
	if row := env.Workspace(w.ID); row.DesiredState != "RUNNING" || row.DeletedAt != nil {
		t.Fatalf("a refused change was applied: %+v", row)
	}
	if n := countWorkspaces(t, env); n != 1 {
		t.Fatalf("%d workspaces after refused creates", n)
	}
	write := env.Token(alice, map[string]any{"name": "deploy", "scope": "read-write"})
	if res := env.Do(c, "PATCH", "/api/v1/workspaces/"+w.ID, map[string]string{"desired_state": "STANDBY"}, bearer(write)...); res.StatusCode != 200 {
		t.Fatalf("read-write token PATCH: %d %s", res.StatusCode, res.Body)
	}
}

// TestTokensCannotMakeTokens: making tokens and approving a CLI login
// need a dashboard session, so a leaked token cannot outlive itself.
func TestTokensCannotMakeTokens(t *testing.T) {
	env := apitest.New(t, apitest.Config{})
	alice := env.CreateUser("alice", false)
	secret := env.Token(alice, map[string]any{"name": "all", "scope": "read-write"})
	c := env.Client()
	validate(t, c)
	for _, path := range []string{"/api/v1/tokens", "/api/v1/token-grants"} {
		res := env.Do(c, "POST", path, map[string]any{"name": "more", "scope": "read-write"}, bearer(secret)...)
		if res.StatusCode != 403 || res.ErrorCode() != "SESSION_REQUIRED" {
			t.Fatalf("POST %s by token: %d %s", path, res.StatusCode, res.Body)
		}
	}
	var n int
	if err := env.Pool.QueryRow(context.Background(), `SELECT (SELECT count(*) FROM api_tokens) + (SELECT count(*) FROM api_token_grants)`).Scan(&n); err != nil || n != 1 {
		t.Fatalf("%d tokens and grants, want the one (err %v)", n, err)
	}
}

// TestAdminTokens: only administrators make admin tokens; an admin token
// opens the admin routes while its user is an administrator, and an
// administrator's ordinary token does not.
func TestAdminTokens(t *testing.T) {
	env := apitest.New(t, apitest.Config{})
	alice := env.CreateUser("alice", false)
	root := env.CreateUser("root", true)
	c := env.Login(alice)
	validate(t, c)
	if res := env.Do(c, "POST", "/api/v1/tokens", map[string]any{"name": "x", "scope": "read", "admin": true}); res.StatusCode != 403 || res.ErrorCode() != "FORBIDDEN" {
		t.Fatalf("admin token by a user: %d %s", res.StatusCode, res.Body)
	}
	plain := env.Token(root, map[string]any{"name": "plain", "scope": "read-write"})
	admin := env.Token(root, map[string]any{"name": "automation", "scope": "read-write", "admin": true})
	anon := env.Client()
	validate(t, anon)
	if res := env.Do(anon, "GET", "/api/v1/admin/workspaces", nil, bearer(plain)...); res.StatusCode != 403 {
		t.Fatalf("admin route by an administrator's ordinary token: %d %s", res.StatusCode, res.Body)
	}
	if res := env.Do(anon, "GET", "/api/v1/admin/workspaces", nil, bearer(admin)...); res.StatusCode != 200 {
		t.Fatalf("admin route by an admin token: %d %s", res.StatusCode, res.Body)
	}
	env.Exec(`UPDATE users SET is_admin = false WHERE id = $1`, root.ID)
	fresh := env.NewReplica(apitest.Config{})
	req, _ := http.NewRequest("GET", "/api/v1/admin/workspaces", nil)
	req.Header.Set("Authorization", "Bearer "+admin)
	if rec := recordTo(fresh, req); rec.Code != 403 {
		t.Fatalf("admin token of a former administrator: %d %s", rec.Code, rec.Body)
	}
}

// TestTokenRequestsChecked: a bad request for a token is 400 naming the
// field and makes nothing.
func TestTokenRequestsChecked(t *testing.T) {
	env := apitest.New(t, apitest.Config{})
	alice := env.CreateUser("alice", false)
	c := env.Login(alice)
	validate(t, c)
	for _, tc := range []struct {
		body  string
		field string
	}{
		{`{"scope":"read"}`, "name"},
		{`{"name":" padded","scope":"read"}`, "name"},
		{`{"name":"a\u0007b","scope":"read"}`, "name"},
		{`{"name":"` + strings.Repeat("n", 101) + `","scope":"read"}`, "name"},
		{`{"name":"x"}`, "scope"},
		{`{"name":"x","scope":"write"}`, "scope"},
		{`{"name":"x","scope":"read","expires_in_days":0}`, "expires_in_days"},
		{`{"name":"x","scope":"read","expires_in_days":367}`, "expires_in_days"},
		{`{"name":"x","scope":"read","expires_in_days":"7"}`, "expires_in_days"},
	} {
		res := env.Do(c, "POST", "/api/v1/tokens", tc.body)
		var e struct {
			Error struct{ Code, Field string }
		}
		res.Decode(t, &e)
		if res.StatusCode != 400 || e.Error.Code != "INVALID_INPUT" || e.Error.Field != tc.field {
			t.Fatalf("%s: %d %s, want 400 on %s", tc.body, res.StatusCode, res.Body, tc.field)
		}
	}
	if res := env.Do(c, "POST", "/api/v1/tokens", `{"name":"x","scope":"read","secret":"mine"}`); res.StatusCode != 400 || res.ErrorCode() != "INVALID_JSON" {
		t.Fatalf("unknown field: %d %s", res.StatusCode, res.Body)
	}
	if res := env.Do(c, "DELETE", "/api/v1/tokens/NOT-AN-ID", nil); res.StatusCode != 404 {
		t.Fatalf("malformed id: %d %s", res.StatusCode, res.Body)
	}
	var n int
	if err := env.Pool.QueryRow(context.Background(), `SELECT count(*) FROM api_tokens`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("%d tokens after bad requests (err %v)", n, err)
	}
}

// TestTokenOfAnotherUser: a token cannot be listed or revoked by another
// user; to them it does not exist.
func TestTokenOfAnotherUser(t *testing.T) {
	env := apitest.New(t, apitest.Config{})
	alice := env.CreateUser("alice", false)
	bob := env.CreateUser("bob", false)
	env.Token(alice, map[string]any{"name": "hers", "scope": "read"})
	var id string
	if err := env.Pool.QueryRow(context.Background(), `SELECT id FROM api_tokens`).Scan(&id); err != nil {
		t.Fatal(err)
	}
	b := env.Login(bob)
	validate(t, b)
	if res := env.Do(b, "GET", "/api/v1/tokens", nil); res.StatusCode != 200 || strings.Contains(string(res.Body), id) {
		t.Fatalf("bob's list: %d %s", res.StatusCode, res.Body)
	}
	if res := env.Do(b, "DELETE", "/api/v1/tokens/"+id, nil); res.StatusCode != 404 {
		t.Fatalf("bob revokes alice's token: %d %s", res.StatusCode, res.Body)
	}
	var n int
	if err := env.Pool.QueryRow(context.Background(), `SELECT count(*) FROM api_tokens`).Scan(&n); err != nil || n != 1 {
		t.Fatalf("%d tokens, want alice's", n)
	}
}

// TestTokenLastUsedIsCheap: the last use is recorded, but a token in
// steady use writes it at most once a minute.
func TestTokenLastUsedIsCheap(t *testing.T) {
	env := apitest.New(t, apitest.Config{})
	alice := env.CreateUser("alice", false)
	secret := env.Token(alice, map[string]any{"name": "busy", "scope": "read"})
	lastUsed := func() *time.Time {
		var at *time.Time
		if err := env.Pool.QueryRow(context.Background(), `SELECT last_used_at FROM api_tokens`).Scan(&at); err != nil {
			t.Fatal(err)
		}
		return at
	}
	use := func() {
		t.Helper()
		// Each replica looks the token up afresh, as the cache would let
		// it every two seconds.
		req, _ := http.NewRequest("GET", "/api/v1/session", nil)
		req.Header.Set("Authorization", "Bearer "+secret)
		if rec := recordTo(env.NewReplica(apitest.Config{}), req); rec.Code != 200 {
			t.Fatalf("use: %d %s", rec.Code, rec.Body)
		}
	}
	use()
	first := lastUsed()
	if first == nil {
		t.Fatal("last_used_at not recorded")
	}
	use()
	use()
	if again := lastUsed(); !again.Equal(*first) {
		t.Fatalf("last_used_at rewritten within a minute: %v then %v", first, again)
	}
	env.Exec(`UPDATE api_tokens SET last_used_at = now() - interval '2 minutes'`)
	stale := lastUsed()
	use()
	if now := lastUsed(); !now.After(*stale) {
		t.Fatalf("last_used_at %v not moved on from %v", now, stale)
	}
}

// pkce returns a fresh verifier and its S256 challenge, as the CLI makes
// them.
func pkce(t *testing.T) (verifier, challenge string) {
	t.Helper()
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	verifier = base64.RawURLEncoding.EncodeToString(b)
	sum := sha256.Sum256([]byte(verifier))
	return verifier, base64.RawURLEncoding.EncodeToString(sum[:])
}

// TestTokenGrant: the dashboard's approval of a CLI login makes a code,
// bound to the challenge the CLI sent, that the CLI redeems once, within a
// minute and with the challenge's verifier, for a read-write token. A
// code sent without its verifier, or with another, is refused and used up.
func TestTokenGrant(t *testing.T) {
	env := apitest.New(t, apitest.Config{})
	alice := env.CreateUser("alice", false)
	c := env.Login(alice)
	validate(t, c)
	grant := func(challenge string) string {
		t.Helper()
		res := env.Do(c, "POST", "/api/v1/token-grants", map[string]string{"name": "codehub CLI on box", "code_challenge": challenge})
		var g struct{ Code string }
		res.Decode(t, &g)
		if res.StatusCode != 201 || g.Code == "" {
			t.Fatalf("grant: %d %s", res.StatusCode, res.Body)
		}
		return g.Code
	}
	redeem := func(code, verifier string) apitest.Response {
		t.Helper()
		body := map[string]string{"code": code}
		if verifier != "" {
			body["code_verifier"] = verifier
		}
		return env.Do(cli(t, env), "POST", "/api/v1/token-grants/redeem", body)
	}
	for _, bad := range []string{"", "short", strings.Repeat("!", 43)} {
		if res := env.Do(c, "POST", "/api/v1/token-grants", map[string]string{"name": "x", "code_challenge": bad}); res.StatusCode != 400 {
			t.Fatalf("grant with challenge %q: %d %s", bad, res.StatusCode, res.Body)
		}
	}
	verifier, challenge := pkce(t)
	code := grant(challenge)
	res := redeem(code, verifier)
	var created createdJSON
	res.Decode(t, &created)
	if res.StatusCode != 201 || created.Token.Scope != "read-write" || created.Token.Name != "codehub CLI on box" || created.Token.Admin {
		t.Fatalf("redeem: %d %s", res.StatusCode, res.Body)
	}
	if d := time.Until(created.Token.ExpiresAt); d < 89*24*time.Hour {
		t.Fatalf("CLI token expires in %v", d)
	}
	if res := env.Do(env.Client(), "GET", "/api/v1/session", nil, bearer(created.Secret)...); res.StatusCode != 200 {
		t.Fatalf("redeemed token: %d %s", res.StatusCode, res.Body)
	}
	if res := redeem(code, verifier); res.StatusCode != 401 {
		t.Fatalf("second redeem: %d %s", res.StatusCode, res.Body)
	}
	// The code alone, or with another verifier, is refused and used up.
	other, _ := pkce(t)
	for _, wrong := range []string{"", other} {
		code := grant(challenge)
		if res := redeem(code, wrong); res.StatusCode != 401 {
			t.Fatalf("redeem with verifier %q: %d %s", wrong, res.StatusCode, res.Body)
		}
		if res := redeem(code, verifier); res.StatusCode != 401 {
			t.Fatalf("redeem with the right verifier after a wrong one: %d %s", res.StatusCode, res.Body)
		}
	}
	late := grant(challenge)
	env.Exec(`UPDATE api_token_grants SET expires_at = now() - interval '1 second'`)
	for _, bad := range []string{late, "codehub_nonsense", ""} {
		if res := redeem(bad, verifier); res.StatusCode != 401 {
			t.Fatalf("redeem %q: %d %s", bad, res.StatusCode, res.Body)
		}
	}
	var n int
	if err := env.Pool.QueryRow(context.Background(), `SELECT (SELECT count(*) FROM api_tokens) * 10 + (SELECT count(*) FROM api_token_grants)`).Scan(&n); err != nil || n != 10 {
		t.Fatalf("tokens*10+grants = %d, want one token and no code left (err %v)", n, err)
	}
}

// cli is a client without a session, checked against the OpenAPI
// document, as the CLI redeems.
func cli(t *testing.T, env *apitest.Env) *http.Client {
	c := env.Client()
	validate(t, c)
	return c
}

// recordTo serves req on srv directly, as a replica that has cached
// nothing yet would.
func recordTo(srv http.Handler, req *http.Request) *httptest.ResponseRecorder {
	rec := httptest.NewRecorder()
	srv.ServeHTTP(rec, req)
	return rec
}

// TestAuditOfTokens: making and revoking a token are audited, and what a
// token does is recorded as done through it.
func TestAuditOfTokens(t *testing.T) {
	env := apitest.New(t, apitest.Config{})
	root := env.CreateUser("root", true)
	alice := env.CreateUser("alice", false)
	c := env.Login(alice)
	res := env.Do(c, "POST", "/api/v1/tokens", map[string]any{"name": "ci", "scope": "read-write", "expires_in_days": 1})
	if res.StatusCode != 201 {
		t.Fatalf("create token: %d %s", res.StatusCode, res.Body)
	}
	var created createdJSON
	res.Decode(t, &created)
	anon := env.Client()
	if res := env.Do(anon, "POST", "/api/v1/workspaces", map[string]string{"name": "by-token"}, bearer(created.Secret)...); res.StatusCode != 201 {
		t.Fatalf("create through the token: %d %s", res.StatusCode, res.Body)
	}
	if res := env.Do(c, "DELETE", "/api/v1/tokens/"+created.Token.ID, nil); res.StatusCode != 204 {
		t.Fatalf("revoke: %d %s", res.StatusCode, res.Body)
	}
	// Revoking it again revokes nothing, and records nothing.
	if res := env.Do(c, "DELETE", "/api/v1/tokens/"+created.Token.ID, nil); res.StatusCode != 404 {
		t.Fatalf("revoke again: %d %s", res.StatusCode, res.Body)
	}

	var trail struct {
		Events []struct {
			Actor struct {
				UserID  string `json:"user_id"`
				TokenID string `json:"token_id"`
			} `json:"actor"`
			Action string `json:"action"`
			Target *struct {
				ID string `json:"id"`
			} `json:"target"`
			Outcome string `json:"outcome"`
		} `json:"events"`
	}
	env.Do(env.Login(root), "GET", "/api/v1/admin/audit?user_id="+alice.ID, nil).Decode(t, &trail)
	var got []string
	for _, e := range trail.Events {
		if e.Action == "user.login" {
			continue
		}
		target := ""
		if e.Target != nil && e.Target.ID == created.Token.ID {
			target = " the token"
		}
		via := ""
		if e.Actor.TokenID == created.Token.ID {
			via = " through the token"
		}
		got = append(got, e.Action+":"+e.Outcome+target+via)
	}
	want := []string{"token.revoke:success the token", "workspace.create:success through the token", "token.create:success the token"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("alice's trail %q, want %q (newest first)", got, want)
	}
}
