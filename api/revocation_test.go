package api_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sort"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/codehub-io/codehub/api/apitest"
	"github.com/codehub-io/codehub/internal/oidctest"
)

// revocationBound is how long a replica may keep trusting a credential it
// looked up: the credential cache's lifetime, with room for the request.
const revocationBound = 2*time.Second + 500*time.Millisecond

// refusedWithin fails the test unless the request with the bearer secret
// is answered 401 within revocationBound.
func refusedWithin(t *testing.T, do func(secret string) apitest.Response, secret, what string) {
	t.Helper()
	deadline := time.Now().Add(revocationBound)
	for {
		res := do(secret)
		if res.StatusCode == http.StatusUnauthorized {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s still answered %d %s after %v", what, res.StatusCode, res.Body, revocationBound)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// tokenRevocations returns the ids of the tokens whose revocation is
// recorded with that detail, sorted.
func tokenRevocations(t *testing.T, env *apitest.Env, detail string) []string {
	t.Helper()
	return queryIDs(t, env, `SELECT target_id FROM audit_events
		WHERE action = 'token.revoke' AND outcome = 'success' AND detail = $1 ORDER BY target_id`, detail)
}

func tokenIDs(t *testing.T, env *apitest.Env, userID string) []string {
	t.Helper()
	return queryIDs(t, env, `SELECT id FROM api_tokens WHERE user_id = $1 ORDER BY id`, userID)
}

// queryIDs returns the one text column of query's rows.
func queryIDs(t *testing.T, env *apitest.Env, query string, args ...any) []string {
	t.Helper()
	rows, err := env.Pool.Query(context.Background(), query, args...)
	if err != nil {
		t.Fatal(err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return ids
}

// TestDisabledAdminLosesEveryCredential: once an administrator is disabled
// by another, their admin token, read token and pending CLI code stop
// working everywhere within the session cache's 2 s, on a replica that had
// the token cached too; the admin token cannot re-enable its user; the
// tokens are gone and each revocation is recorded.
func TestDisabledAdminLosesEveryCredential(t *testing.T) {
	env := apitest.New(t, apitest.Config{})
	root := env.CreateUser("root", true)
	eve := env.CreateUser("eve", true)
	admin := env.Token(eve, map[string]any{"name": "admin", "scope": "read-write", "admin": true})
	read := env.Token(eve, map[string]any{"name": "reader", "scope": "read", "admin": true})
	before := tokenIDs(t, env, eve.ID)
	verifier, code := approveGrant(t, env, env.Login(eve))

	replica := httptest.NewServer(env.NewReplica(apitest.Config{}))
	t.Cleanup(replica.Close)
	anon := env.Client()
	on := func(base string) func(string) apitest.Response {
		return func(secret string) apitest.Response {
			req, err := http.NewRequest(http.MethodGet, base+"/api/v1/admin/users", nil)
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Authorization", "Bearer "+secret)
			res, err := anon.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			res.Body.Close()
			return apitest.Response{StatusCode: res.StatusCode}
		}
	}
	// Both replicas have looked the tokens up, and cache them.
	for _, base := range []string{env.URL, replica.URL} {
		if res := on(base)(admin); res.StatusCode != http.StatusOK {
			t.Fatalf("admin token before: %d", res.StatusCode)
		}
		if res := on(base)(read); res.StatusCode != http.StatusOK {
			t.Fatalf("read token before: %d", res.StatusCode)
		}
	}

	if res := env.Do(env.Login(root), "PATCH", "/api/v1/admin/users/"+eve.ID, map[string]any{"disabled": true}); res.StatusCode != http.StatusOK {
		t.Fatalf("disable eve: %d %s", res.StatusCode, res.Body)
	}
	for _, base := range []string{env.URL, replica.URL} {
		refusedWithin(t, on(base), admin, "the admin token of a disabled admin on "+base)
		refusedWithin(t, on(base), read, "the read token of a disabled admin on "+base)
	}
	res := env.Do(anon, "PATCH", "/api/v1/admin/users/"+eve.ID, map[string]any{"disabled": false}, bearer(admin)...)
	if res.StatusCode != http.StatusUnauthorized {
		t.Fatalf("a disabled admin's token re-enabling its user: %d %s", res.StatusCode, res.Body)
	}
	var disabled bool
	if err := env.Pool.QueryRow(context.Background(), `SELECT disabled FROM users WHERE id = $1`, eve.ID).Scan(&disabled); err != nil || !disabled {
		t.Fatalf("eve disabled = %v (err %v), want still disabled", disabled, err)
	}
	if res := env.Do(anon, "POST", "/api/v1/token-grants/redeem", map[string]string{"code": code, "code_verifier": verifier}); res.StatusCode != http.StatusUnauthorized {
		t.Fatalf("a disabled user's pending code: %d %s", res.StatusCode, res.Body)
	}
	if left := tokenIDs(t, env, eve.ID); len(left) != 0 {
		t.Errorf("tokens left after the disable: %v", left)
	}
	if got := tokenRevocations(t, env, "user disabled"); !equalIDs(got, before) {
		t.Errorf("recorded revocations %v, want %v", got, before)
	}
}

func equalIDs(a, b []string) bool {
	a, b = append([]string(nil), a...), append([]string(nil), b...)
	sort.Strings(a)
	sort.Strings(b)
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// approveGrant approves a CLI login in the dashboard session c and
// returns the CLI's verifier and the code.
func approveGrant(t *testing.T, env *apitest.Env, c *http.Client) (verifier, code string) {
	t.Helper()
	verifier, challenge := pkce(t)
	res := env.Do(c, "POST", "/api/v1/token-grants", map[string]string{"name": "codehub CLI", "code_challenge": challenge})
	if res.StatusCode != http.StatusCreated {
		t.Fatalf("approve a CLI login: %d %s", res.StatusCode, res.Body)
	}
	var g struct {
		Code string `json:"code"`
	}
	res.Decode(t, &g)
	return verifier, g.Code
}

// TestPasswordResetEndsTokens: an administrator's reset of a password ends
// the user's tokens and pending CLI codes with their sessions.
func TestPasswordResetEndsTokens(t *testing.T) {
	env := apitest.New(t, apitest.Config{})
	root := env.CreateUser("root", true)
	alice := env.CreateUser("alice", false)
	secret := env.Token(alice, map[string]any{"name": "ci", "scope": "read-write"})
	ids := tokenIDs(t, env, alice.ID)
	verifier, code := approveGrant(t, env, env.Login(alice))
	anon := env.Client()
	if res := env.Do(anon, "GET", "/api/v1/session", nil, bearer(secret)...); res.StatusCode != http.StatusOK {
		t.Fatalf("token before: %d", res.StatusCode)
	}
	if res := env.Do(env.Login(root), "PATCH", "/api/v1/admin/users/"+alice.ID, map[string]any{"password": "a-new-password"}); res.StatusCode != http.StatusOK {
		t.Fatalf("reset: %d %s", res.StatusCode, res.Body)
	}
	refusedWithin(t, func(s string) apitest.Response { return env.Do(anon, "GET", "/api/v1/session", nil, bearer(s)...) }, secret, "a token after a password reset")
	if res := env.Do(anon, "POST", "/api/v1/token-grants/redeem", map[string]string{"code": code, "code_verifier": verifier}); res.StatusCode != http.StatusUnauthorized {
		t.Fatalf("a pending code after a password reset: %d %s", res.StatusCode, res.Body)
	}
	if got := tokenRevocations(t, env, "password reset"); !equalIDs(got, ids) {
		t.Errorf("recorded revocations %v, want %v", got, ids)
	}
}

// TestPasswordChange: a user changes their own password with the current
// one. Every other session ends, the changing browser keeps a fresh one,
// and the tokens end unless the user keeps them.
func TestPasswordChange(t *testing.T) {
	env := apitest.New(t, apitest.Config{})
	alice := env.CreateUser("alice", false)
	c := env.Login(alice)
	validate(t, c)
	other := env.Login(alice)
	secret := env.Token(alice, map[string]any{"name": "ci", "scope": "read-write"})
	anon := env.Client()
	tokenStatus := func() int { return env.Do(anon, "GET", "/api/v1/session", nil, bearer(secret)...).StatusCode }

	for name, body := range map[string]map[string]any{
		"wrong current password": {"current_password": "not-the-password", "new_password": "a-new-password"},
		"short new password":     {"current_password": apitest.Password, "new_password": "short"},
		"no current password":    {"new_password": "a-new-password"},
	} {
		res := env.Do(c, "POST", "/api/v1/password", body)
		if res.StatusCode != http.StatusBadRequest && res.StatusCode != http.StatusForbidden {
			t.Errorf("%s: %d %s", name, res.StatusCode, res.Body)
		}
	}
	if res := env.Do(anon, "POST", "/api/v1/password", map[string]any{"current_password": apitest.Password, "new_password": "a-new-password"}, bearer(secret)...); res.StatusCode != http.StatusForbidden {
		t.Errorf("a token changing the password: %d %s", res.StatusCode, res.Body)
	}
	if tokenStatus() != http.StatusOK {
		t.Fatal("refused changes ended the token")
	}

	// Keeping the tokens: the other session ends, the token lives.
	res := env.Do(c, "POST", "/api/v1/password", map[string]any{"current_password": apitest.Password, "new_password": "second-password", "keep_tokens": true})
	if res.StatusCode != http.StatusNoContent {
		t.Fatalf("change keeping tokens: %d %s", res.StatusCode, res.Body)
	}
	if res := env.Do(c, "GET", "/api/v1/session", nil); res.StatusCode != http.StatusOK {
		t.Fatalf("the changing browser's session after the change: %d", res.StatusCode)
	}
	refusedWithin(t, func(string) apitest.Response { return env.Do(other, "GET", "/api/v1/session", nil) }, "", "another session after a password change")
	time.Sleep(revocationBound)
	if tokenStatus() != http.StatusOK {
		t.Fatal("a kept token was ended")
	}

	// The default: the tokens end too.
	ids := tokenIDs(t, env, alice.ID)
	res = env.Do(c, "POST", "/api/v1/password", map[string]any{"current_password": "second-password", "new_password": "third-password"})
	if res.StatusCode != http.StatusNoContent {
		t.Fatalf("change: %d %s", res.StatusCode, res.Body)
	}
	refusedWithin(t, func(string) apitest.Response { return env.Do(anon, "GET", "/api/v1/session", nil, bearer(secret)...) }, secret, "a token after a password change")
	if got := tokenRevocations(t, env, "password changed"); !equalIDs(got, ids) {
		t.Errorf("recorded revocations %v, want %v", got, ids)
	}
	login := env.Do(env.Client(), "POST", "/api/v1/login", map[string]string{"username": "alice", "password": "third-password"})
	if login.StatusCode != http.StatusOK {
		t.Fatalf("login with the new password: %d", login.StatusCode)
	}
}

// TestSSORefusalEndsTokens: a user refused at a single sign-on login (here
// taken out of allowed_groups) loses their API tokens with their sessions,
// and each revocation is recorded.
func TestSSORefusalEndsTokens(t *testing.T) {
	env, p := startSSO(t, nil)
	bob := oidctest.User{Subject: "sub-bob", Username: "bob", Password: "bob-at-idp", Groups: []string{"dev"}}
	p.AddUser(bob)
	c, s := mustSSOLogin(t, env, p, bob)
	res := env.Do(c, "POST", "/api/v1/tokens", map[string]any{"name": "ci", "scope": "read"})
	if res.StatusCode != http.StatusCreated {
		t.Fatalf("token of an SSO user: %d %s", res.StatusCode, res.Body)
	}
	var created createdJSON
	res.Decode(t, &created)
	anon := env.Client()
	if res := env.Do(anon, "GET", "/api/v1/session", nil, bearer(created.Secret)...); res.StatusCode != http.StatusOK {
		t.Fatalf("token before: %d", res.StatusCode)
	}

	p.SetGroups(bob.Subject, []string{"sales"})
	if res, body := ssoLogin(t, env, p, env.Client(), bob, nil); res.StatusCode != http.StatusForbidden {
		t.Fatalf("login out of allowed_groups: %d\n%s", res.StatusCode, body)
	}
	refusedWithin(t, func(secret string) apitest.Response {
		return env.Do(anon, "GET", "/api/v1/session", nil, bearer(secret)...)
	}, created.Secret, "the token of a user refused at sign-on")
	if left := tokenIDs(t, env, s.User.ID); len(left) != 0 {
		t.Errorf("tokens left: %v", left)
	}
	if got := tokenRevocations(t, env, "sign-in refused"); !equalIDs(got, []string{created.Token.ID}) {
		t.Errorf("recorded revocations %v, want %v", got, []string{created.Token.ID})
	}
}
