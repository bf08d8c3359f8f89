package api_test

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/codehub-io/codehub/api/apitest"
	"github.com/codehub-io/codehub/workspace"
)

type wsJSON struct {
	ID           string         `json:"id"`
	OwnerID      string         `json:"owner_id"`
	Name         string         `json:"name"`
	Description  string         `json:"description"`
	Image        string         `json:"image"`
	Phase        string         `json:"phase"`
	DesiredState string         `json:"desired_state"`
	Operation    string         `json:"operation"`
	URL          string         `json:"url"`
	Version      int64          `json:"version"`
	Conditions   map[string]any `json:"conditions"`
	ErrorReason  *string        `json:"error_reason"`
}

type pageJSON struct {
	Workspaces []wsJSON `json:"workspaces"`
	Next       *string  `json:"next"`
}

func TestLoginSessionLogout(t *testing.T) {
	env := apitest.New(t, apitest.Config{})
	alice := env.CreateUser("alice", false)
	c := env.Client()
	v := validate(t, c)

	if res := env.Do(c, "GET", "/api/v1/session", nil); res.StatusCode != 401 || res.ErrorCode() != "UNAUTHENTICATED" {
		t.Fatalf("session before login: %d %s", res.StatusCode, res.Body)
	}
	if res := env.Do(c, "POST", "/api/v1/login", map[string]string{"username": "alice", "password": "wrong"}); res.StatusCode != 401 {
		t.Fatalf("wrong password: %d %s", res.StatusCode, res.Body)
	}
	if res := env.Do(c, "POST", "/api/v1/login", map[string]string{"username": "nobody", "password": "x"}); res.StatusCode != 401 {
		t.Fatalf("unknown user: %d %s", res.StatusCode, res.Body)
	}
	if res := env.Do(c, "POST", "/api/v1/login", map[string]string{"username": "alice"}); res.StatusCode != 400 || res.ErrorCode() != "INVALID_INPUT" {
		t.Fatalf("missing password: %d %s", res.StatusCode, res.Body)
	}
	res := env.Do(c, "POST", "/api/v1/login", map[string]string{"username": "alice", "password": apitest.Password})
	if res.StatusCode != 200 {
		t.Fatalf("login: %d %s", res.StatusCode, res.Body)
	}
	cookie := res.Header.Get("Set-Cookie")
	for _, attr := range []string{"codehub_session=", "HttpOnly", "SameSite=Lax", "Path=/"} {
		if !strings.Contains(cookie, attr) {
			t.Errorf("session cookie %q lacks %s", cookie, attr)
		}
	}
	if strings.Contains(cookie, "Secure") {
		t.Errorf("cookie %q is Secure although public_url is http", cookie)
	}
	var sess struct {
		User struct {
			ID       string `json:"id"`
			Username string `json:"username"`
		} `json:"user"`
		ExpiresAt string `json:"expires_at"`
	}
	res.Decode(t, &sess)
	if !strings.HasSuffix(sess.ExpiresAt, "Z") {
		t.Errorf("login expires_at %q is not in UTC", sess.ExpiresAt)
	}
	res = env.Do(c, "GET", "/api/v1/session", nil)
	res.Decode(t, &sess)
	if res.StatusCode != 200 || sess.User.ID != alice.ID || sess.User.Username != "alice" {
		t.Fatalf("session: %d %s", res.StatusCode, res.Body)
	}
	if !strings.HasSuffix(sess.ExpiresAt, "Z") {
		t.Errorf("session expires_at %q is not in UTC", sess.ExpiresAt)
	}
	// The token is stored hashed: the cookie value appears nowhere in the table.
	token := strings.TrimPrefix(strings.SplitN(cookie, ";", 2)[0], "codehub_session=")
	var n int
	if err := env.Pool.QueryRow(context.Background(), `SELECT count(*) FROM sessions WHERE token_hash = $1::bytea`, []byte(token)).Scan(&n); err != nil || n != 0 {
		t.Fatalf("session token stored in the clear (count %d, err %v)", n, err)
	}
	if res := env.Do(c, "POST", "/api/v1/logout", nil); res.StatusCode != 204 {
		t.Fatalf("logout: %d %s", res.StatusCode, res.Body)
	}
	if res := env.Do(c, "GET", "/api/v1/session", nil); res.StatusCode != 401 {
		t.Fatalf("session after logout: %d %s", res.StatusCode, res.Body)
	}
	if v.seen[200] == 0 || v.seen[401] == 0 {
		t.Fatalf("responses were not validated: %v", v.seen)
	}
}

func TestSessionExpiresServerSide(t *testing.T) {
	env := apitest.New(t, apitest.Config{})
	alice := env.CreateUser("alice", false)
	c := env.Login(alice)
	env.Exec(`UPDATE sessions SET expires_at = now() - interval '1 second'`)
	// The replica caches a session for at most two seconds; a fresh replica
	// answers from the table alone.
	replica := env.NewReplica(apitest.Config{})
	req, _ := http.NewRequest("GET", env.URL+"/api/v1/session", nil)
	for _, ck := range c.Jar.Cookies(req.URL) {
		req.AddCookie(ck)
	}
	rec := httptest.NewRecorder()
	replica.ServeHTTP(rec, req)
	if rec.Code != 401 {
		t.Fatalf("expired session: %d %s", rec.Code, rec.Body.String())
	}
}

func TestLoginBackoff(t *testing.T) {
	env := apitest.New(t, apitest.Config{})
	env.CreateUser("bob", false)
	c := env.Client()
	validate(t, c)
	wrong := map[string]string{"username": "bob", "password": "nope"}
	for i := range 2 {
		if res := env.Do(c, "POST", "/api/v1/login", wrong); res.StatusCode != 401 {
			t.Fatalf("failure %d: %d %s", i+1, res.StatusCode, res.Body)
		}
	}
	var locked bool
	if err := env.Pool.QueryRow(context.Background(), `SELECT EXISTS (SELECT 1 FROM login_throttle WHERE locked_until IS NOT NULL)`).Scan(&locked); err != nil || locked {
		t.Fatalf("two mistakes locked the user (locked %v, err %v)", locked, err)
	}
	// Many failures from this address already: the next one locks for
	// minutes, so the test does not depend on how long it takes.
	env.Exec(`UPDATE login_throttle SET failures = 9`)
	if res := env.Do(c, "POST", "/api/v1/login", wrong); res.StatusCode != 401 {
		t.Fatalf("tenth failure: %d %s", res.StatusCode, res.Body)
	}
	right := map[string]string{"username": "bob", "password": apitest.Password}
	res := env.Do(c, "POST", "/api/v1/login", right)
	if res.StatusCode != 429 || res.ErrorCode() != "TOO_MANY_ATTEMPTS" {
		t.Fatalf("locked login: %d %s", res.StatusCode, res.Body)
	}
	secs, err := strconv.Atoi(res.Header.Get("Retry-After"))
	if err != nil || secs < 60 {
		t.Fatalf("Retry-After %q, want at least 60 s after ten failures", res.Header.Get("Retry-After"))
	}
	env.Exec(`UPDATE login_throttle SET locked_until = now() - interval '1 second'`)
	if res := env.Do(c, "POST", "/api/v1/login", right); res.StatusCode != 200 {
		t.Fatalf("login after the lock: %d %s", res.StatusCode, res.Body)
	}
	var failures, clients int
	if err := env.Pool.QueryRow(context.Background(), `SELECT failed_logins, (SELECT count(*) FROM login_throttle) FROM users WHERE username = 'bob'`).Scan(&failures, &clients); err != nil || failures != 0 || clients != 0 {
		t.Fatalf("after success: %d failures, %d client rows (err %v), want none", failures, clients, err)
	}
}

func TestCrossOriginRefused(t *testing.T) {
	env := apitest.New(t, apitest.Config{})
	alice := env.CreateUser("alice", false)
	c := env.Login(alice)
	validate(t, c)
	body := map[string]string{"name": "evil"}
	for _, h := range [][]string{
		{"Origin", "http://evil.example"},
		{"Sec-Fetch-Site", "cross-site"},
		{"Sec-Fetch-Site", "same-site"},
	} {
		res := env.Do(c, "POST", "/api/v1/workspaces", body, h...)
		if res.StatusCode != 403 || res.ErrorCode() != "CROSS_ORIGIN" {
			t.Fatalf("%v: %d %s", h, res.StatusCode, res.Body)
		}
	}
	if res := env.Do(c, "POST", "/api/v1/login", map[string]string{"username": "alice", "password": apitest.Password}, "Origin", "http://evil.example"); res.StatusCode != 403 {
		t.Fatalf("cross-origin login: %d", res.StatusCode)
	}
	if n := countWorkspaces(t, env); n != 0 {
		t.Fatalf("%d workspaces created by refused requests", n)
	}
	res := env.Do(c, "POST", "/api/v1/workspaces", body, "Origin", env.URL, "Sec-Fetch-Site", "same-origin")
	if res.StatusCode != 201 {
		t.Fatalf("same-origin create: %d %s", res.StatusCode, res.Body)
	}
}

func countWorkspaces(t *testing.T, env *apitest.Env) int {
	t.Helper()
	var n int
	if err := env.Pool.QueryRow(context.Background(), `SELECT count(*) FROM workspaces`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// countWantRunning counts the live workspaces whose desired state is
// RUNNING: those the running limits count.
func countWantRunning(t *testing.T, env *apitest.Env) int {
	t.Helper()
	var n int
	if err := env.Pool.QueryRow(context.Background(),
		`SELECT count(*) FROM workspaces WHERE desired_state = 'RUNNING' AND deleted_at IS NULL`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func TestWorkspaceLifecycle(t *testing.T) {
	env := apitest.New(t, apitest.Config{})
	alice := env.CreateUser("alice", false)
	c := env.Login(alice)
	v := validate(t, c)

	res := env.Do(c, "POST", "/api/v1/workspaces", map[string]string{"name": "backend", "description": "API work"})
	if res.StatusCode != 201 {
		t.Fatalf("create: %d %s", res.StatusCode, res.Body)
	}
	var ws wsJSON
	res.Decode(t, &ws)
	if res.Header.Get("Location") != "/api/v1/workspaces/"+ws.ID {
		t.Errorf("Location = %q", res.Header.Get("Location"))
	}
	if ws.Name != "backend" || ws.Description != "API work" || ws.Image != apitest.Images[0] ||
		ws.DesiredState != "RUNNING" || ws.Phase != "PENDING" || ws.Operation != "NONE" || ws.OwnerID != alice.ID {
		t.Fatalf("created workspace: %+v", ws)
	}
	if want := env.URL + "/w/" + ws.ID + "/"; ws.URL != want {
		t.Fatalf("url = %q, want %q", ws.URL, want)
	}

	res = env.Do(c, "GET", "/api/v1/workspaces/"+ws.ID, nil)
	if res.StatusCode != 200 {
		t.Fatalf("get: %d %s", res.StatusCode, res.Body)
	}

	res = env.Do(c, "PATCH", "/api/v1/workspaces/"+ws.ID, map[string]string{"name": "api", "desired_state": "STANDBY"})
	var patched wsJSON
	res.Decode(t, &patched)
	if res.StatusCode != 200 || patched.Name != "api" || patched.DesiredState != "STANDBY" || patched.Version <= ws.Version {
		t.Fatalf("patch: %d %s", res.StatusCode, res.Body)
	}

	// While the controller runs an operation the desired state is frozen.
	env.SetPhase(ws.ID, workspace.PhaseStandby, workspace.OpArchiving)
	res = env.Do(c, "PATCH", "/api/v1/workspaces/"+ws.ID, map[string]string{"desired_state": "RUNNING"})
	if res.StatusCode != 409 || res.ErrorCode() != "INVALID_STATE" {
		t.Fatalf("patch during an operation: %d %s", res.StatusCode, res.Body)
	}
	if got := env.Workspace(ws.ID).DesiredState; got != workspace.DesiredStandby {
		t.Fatalf("refused patch changed desired state to %s", got)
	}
	var shown wsJSON
	env.Do(c, "GET", "/api/v1/workspaces/"+ws.ID, nil).Decode(t, &shown)
	if shown.Phase != "ARCHIVING" || shown.Operation != "ARCHIVING" {
		t.Fatalf("display phase during ARCHIVING: %+v", shown)
	}

	if res := env.Do(c, "DELETE", "/api/v1/workspaces/"+ws.ID, nil); res.StatusCode != 204 {
		t.Fatalf("delete: %d %s", res.StatusCode, res.Body)
	}
	for _, m := range []string{"GET", "PATCH", "DELETE"} {
		var body any
		if m == "PATCH" {
			body = map[string]string{"name": "again"}
		}
		if res := env.Do(c, m, "/api/v1/workspaces/"+ws.ID, body); res.StatusCode != 404 || res.ErrorCode() != "NOT_FOUND" {
			t.Fatalf("%s after delete: %d %s", m, res.StatusCode, res.Body)
		}
	}
	if w := env.Workspace(ws.ID); w.DeletedAt == nil || w.DesiredState != workspace.DesiredDeleted {
		t.Fatalf("deleted row: deleted_at %v desired %s", w.DeletedAt, w.DesiredState)
	}
	if v.seen[404] == 0 || v.seen[409] == 0 || v.seen[201] == 0 || v.seen[204] == 0 {
		t.Fatalf("validated statuses %v", v.seen)
	}
}

func TestListPaging(t *testing.T) {
	env := apitest.New(t, apitest.Config{MaxRunningPerUser: 100})
	alice := env.CreateUser("alice", false)
	bob := env.CreateUser("bob", false)
	for i := range 5 {
		env.CreateWorkspace(alice, fmt.Sprintf("ws-%d", i))
	}
	env.CreateWorkspace(bob, "bobs")
	c := env.Login(alice)
	validate(t, c)
	var all []string
	after := ""
	for pages := 0; ; pages++ {
		if pages > 5 {
			t.Fatal("paging does not end")
		}
		var p pageJSON
		res := env.Do(c, "GET", "/api/v1/workspaces?limit=2&after="+after, nil)
		if res.StatusCode != 200 {
			t.Fatalf("list: %d %s", res.StatusCode, res.Body)
		}
		res.Decode(t, &p)
		for _, w := range p.Workspaces {
			if w.OwnerID != alice.ID {
				t.Fatalf("list shows another user's workspace %s", w.ID)
			}
			all = append(all, w.Name)
		}
		if p.Next == nil {
			break
		}
		after = *p.Next
	}
	if strings.Join(all, ",") != "ws-0,ws-1,ws-2,ws-3,ws-4" {
		t.Fatalf("paged list = %v", all)
	}
	for _, q := range []string{"limit=0", "limit=201", "limit=x", "after=NOT-AN-ID"} {
		if res := env.Do(c, "GET", "/api/v1/workspaces?"+q, nil); res.StatusCode != 400 || res.ErrorCode() != "INVALID_INPUT" {
			t.Fatalf("%s: %d %s", q, res.StatusCode, res.Body)
		}
	}
}

func TestBadRequestsChangeNothing(t *testing.T) {
	env := apitest.New(t, apitest.Config{})
	alice := env.CreateUser("alice", false)
	c := env.Login(alice)
	validate(t, c)
	w := env.CreateWorkspace(alice, "keep")
	before := env.Workspace(w.ID)
	path := "/api/v1/workspaces/" + w.ID
	huge := `{"name":"x","description":"` + strings.Repeat("a", 70<<10) + `"}`
	cases := []struct {
		name, method, path string
		body               any
		headers            []string
		status             int
		code               string
	}{
		{"malformed", "PATCH", path, `{"name":`, nil, 400, "INVALID_JSON"},
		{"not an object", "PATCH", path, `[1,2]`, nil, 400, "INVALID_JSON"},
		{"null", "PATCH", path, `null`, nil, 400, "INVALID_JSON"},
		{"null create", "POST", "/api/v1/workspaces", `null`, nil, 400, "INVALID_JSON"},
		{"trailing data", "PATCH", path, `{"name":"a"} {"name":"b"}`, nil, 400, "INVALID_JSON"},
		{"unknown field", "PATCH", path, `{"name":"a","owner_id":"x"}`, nil, 400, "INVALID_JSON"},
		{"wrong type", "PATCH", path, `{"name":5}`, nil, 400, "INVALID_INPUT"},
		{"bad desired", "PATCH", path, `{"desired_state":"DELETED"}`, nil, 400, "INVALID_INPUT"},
		{"bad name", "PATCH", path, `{"name":"Not Valid!"}`, nil, 400, "INVALID_INPUT"},
		{"huge", "PATCH", path, huge, nil, 400, "BODY_TOO_LARGE"},
		{"not json", "PATCH", path, nil, []string{"Content-Type", "text/plain"}, 415, "UNSUPPORTED_MEDIA_TYPE"},
		{"empty body", "POST", "/api/v1/workspaces", ``, nil, 400, "INVALID_JSON"},
		{"create unknown field", "POST", "/api/v1/workspaces", `{"name":"n","phase":"RUNNING"}`, nil, 400, "INVALID_JSON"},
		{"create bad image", "POST", "/api/v1/workspaces", `{"name":"n","image":"evil/miner"}`, nil, 400, "INVALID_INPUT"},
		{"create huge", "POST", "/api/v1/workspaces", huge, nil, 400, "BODY_TOO_LARGE"},
		{"create taken name", "POST", "/api/v1/workspaces", `{"name":"keep"}`, nil, 409, "NAME_TAKEN"},
		{"create NUL description", "POST", "/api/v1/workspaces", `{"name":"n","description":"a\u0000b"}`, nil, 400, "INVALID_INPUT"},
		{"NUL description", "PATCH", path, `{"description":"a\u0000b"}`, nil, 400, "INVALID_INPUT"},
		{"NUL username", "POST", "/api/v1/login", `{"username":"alice\u0000","password":"x"}`, nil, 401, "UNAUTHENTICATED"},
		{"bad id", "GET", "/api/v1/workspaces/NOT-AN-ID", nil, nil, 404, "NOT_FOUND"},
		{"bad id patch", "PATCH", "/api/v1/workspaces/0000", `{"name":"x"}`, nil, 404, "NOT_FOUND"},
		{"unknown id", "DELETE", "/api/v1/workspaces/01jb3x7k9q2m5n8p4r6s0t1v2w", nil, nil, 404, "NOT_FOUND"},
		{"timer too short", "PATCH", path, `{"standby_ttl_seconds":30}`, nil, 400, "INVALID_INPUT"},
		{"timer too long", "PATCH", path, `{"archive_ttl_seconds":99999999}`, nil, 400, "INVALID_INPUT"},
		{"negative timer", "PATCH", path, `{"standby_ttl_seconds":-60}`, nil, 400, "INVALID_INPUT"},
		{"timer as text", "PATCH", path, `{"standby_ttl_seconds":"1h"}`, nil, 400, "INVALID_INPUT"},
		{"rename with a bad timer", "PATCH", path, `{"name":"other","standby_ttl_seconds":1}`, nil, 400, "INVALID_INPUT"},
		{"extend without hours", "POST", path + "/extend", `{}`, nil, 400, "INVALID_INPUT"},
		{"extend by nothing", "POST", path + "/extend", `{"hours":0}`, nil, 400, "INVALID_INPUT"},
		{"extend backwards", "POST", path + "/extend", `{"hours":-2}`, nil, 400, "INVALID_INPUT"},
		{"extend past the bound", "POST", path + "/extend", `{"hours":9}`, nil, 400, "INVALID_INPUT"},
		{"extend unknown field", "POST", path + "/extend", `{"hours":1,"until":"x"}`, nil, 400, "INVALID_JSON"},
		{"autostart without days", "PATCH", path, `{"autostart":{"days":[],"time":"09:00","time_zone":"UTC"}}`, nil, 400, "INVALID_INPUT"},
		{"autostart bad time", "PATCH", path, `{"autostart":{"days":["mon"],"time":"9am","time_zone":"UTC"}}`, nil, 400, "INVALID_INPUT"},
		{"autostart bad zone", "PATCH", path, `{"autostart":{"days":["mon"],"time":"09:00","time_zone":"../etc"}}`, nil, 400, "INVALID_INPUT"},
		{"autostart unknown field", "PATCH", path, `{"autostart":{"days":["mon"],"time":"09:00","time_zone":"UTC","cron":"x"}}`, nil, 400, "INVALID_JSON"},
		{"rename with a bad autostart", "PATCH", path, `{"name":"other","autostart":{"days":["someday"],"time":"09:00","time_zone":"UTC"}}`, nil, 400, "INVALID_INPUT"},
		{"method", "PUT", path, `{}`, nil, 405, "METHOD_NOT_ALLOWED"},
		{"unknown endpoint", "GET", "/api/v1/nothing", nil, nil, 404, "NOT_FOUND"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			body := tc.body
			if tc.name == "not json" {
				body = "name=x"
			}
			res := env.Do(c, tc.method, tc.path, body, tc.headers...)
			if res.StatusCode != tc.status || res.ErrorCode() != tc.code {
				t.Fatalf("%d %s, want %d %s", res.StatusCode, res.Body, tc.status, tc.code)
			}
		})
	}
	if after := env.Workspace(w.ID); after.Version != before.Version || after.Name != "keep" {
		t.Fatalf("bad requests changed the workspace: version %d -> %d, name %q", before.Version, after.Version, after.Name)
	}
	if n := countWorkspaces(t, env); n != 1 {
		t.Fatalf("%d workspaces, want 1", n)
	}
}

// TestWorkspaceTimers: the API says when a workspace stops and is
// archived, who last changed its desired state, and lets the owner move its
// timers and keep it running within the operator's bounds.
func TestWorkspaceTimers(t *testing.T) {
	env := apitest.New(t, apitest.Config{})
	alice := env.CreateUser("alice", false)
	c := env.Login(alice)
	validate(t, c)
	w := env.CreateWorkspace(alice, "timed")
	env.SetPhase(w.ID, workspace.PhaseRunning, workspace.OpNone)
	path := "/api/v1/workspaces/" + w.ID
	type view struct {
		StopsAt           *time.Time `json:"stops_at"`
		ArchivesAt        *time.Time `json:"archives_at"`
		KeepUntil         *time.Time `json:"keep_until"`
		StandbyTTLSeconds int64      `json:"standby_ttl_seconds"`
		ArchiveTTLSeconds int64      `json:"archive_ttl_seconds"`
		DesiredBy         string     `json:"desired_by"`
		DesiredAt         *time.Time `json:"desired_at"`
	}
	call := func(method, p string, body any, status int) view {
		t.Helper()
		res := env.Do(c, method, p, body)
		if res.StatusCode != status {
			t.Fatalf("%s %s: %d %s, want %d", method, p, res.StatusCode, res.Body, status)
		}
		var v view
		if status == http.StatusOK {
			res.Decode(t, &v)
		}
		return v
	}
	near := func(what string, got *time.Time, want time.Time) {
		t.Helper()
		if got == nil || got.Sub(want).Abs() > 5*time.Second {
			t.Fatalf("%s = %v, want about %v", what, got, want)
		}
	}
	row := env.Workspace(w.ID)
	since := row.LastAccessAt
	if row.PhaseChangedAt.After(since) {
		since = row.PhaseChangedAt
	}

	v := call("GET", path, nil, http.StatusOK)
	near("stops_at", v.StopsAt, since.Add(10*time.Minute))
	near("archives_at", v.ArchivesAt, since.Add(40*time.Minute))
	if v.StandbyTTLSeconds != 600 || v.ArchiveTTLSeconds != 1800 || v.KeepUntil != nil || v.DesiredBy != "user" || v.DesiredAt != nil {
		t.Fatalf("new workspace: %+v", v)
	}

	// Its own timers, then back to the defaults.
	v = call("PATCH", path, map[string]int64{"standby_ttl_seconds": 3600, "archive_ttl_seconds": 7200}, http.StatusOK)
	near("stops_at with its own timer", v.StopsAt, since.Add(time.Hour))
	near("archives_at with its own timer", v.ArchivesAt, since.Add(3*time.Hour))
	if v.StandbyTTLSeconds != 3600 || v.ArchiveTTLSeconds != 7200 {
		t.Fatalf("own timers: %+v", v)
	}
	v = call("PATCH", path, map[string]int64{"standby_ttl_seconds": 0}, http.StatusOK)
	if v.StandbyTTLSeconds != 600 || v.ArchiveTTLSeconds != 7200 || env.Workspace(w.ID).StandbyTTL != nil {
		t.Fatalf("standby timer back to the default: %+v", v)
	}

	// Keeping it running moves the stop to the time asked for.
	v = call("POST", path+"/extend", map[string]float64{"hours": 2.5}, http.StatusOK)
	near("keep_until", v.KeepUntil, time.Now().Add(150*time.Minute))
	near("stops_at kept running", v.StopsAt, time.Now().Add(150*time.Minute))

	// A stop by the user says so, ends the keep-running, and leaves
	// nothing to keep running.
	v = call("PATCH", path, map[string]string{"desired_state": "STANDBY"}, http.StatusOK)
	near("desired_at", v.DesiredAt, time.Now())
	if v.DesiredBy != "user" || v.KeepUntil != nil || v.StopsAt != nil || v.ArchivesAt != nil {
		t.Fatalf("after stop: %+v", v)
	}
	if res := env.Do(c, "POST", path+"/extend", map[string]float64{"hours": 1}); res.StatusCode != http.StatusConflict || res.ErrorCode() != "INVALID_STATE" {
		t.Fatalf("extend a stopped workspace: %d %s", res.StatusCode, res.Body)
	}
	env.Exec(`UPDATE workspaces SET phase = 'STANDBY', phase_changed_at = now() WHERE id = $1`, w.ID)
	v = call("GET", path, nil, http.StatusOK)
	near("archives_at in standby", v.ArchivesAt, time.Now().Add(2*time.Hour))
	if v.StopsAt != nil {
		t.Fatalf("standby workspace has a stop time: %+v", v)
	}

	// An autostart schedule, shown with its next start, then removed.
	res := env.Do(c, "PATCH", path, map[string]any{"autostart": map[string]any{"days": []string{"sat", "mon", "sun"}, "time": "07:45", "time_zone": "Asia/Tokyo"}})
	if res.StatusCode != http.StatusOK {
		t.Fatalf("set autostart: %d %s", res.StatusCode, res.Body)
	}
	var sv struct {
		Autostart *struct {
			Days     []string `json:"days"`
			Time     string   `json:"time"`
			TimeZone string   `json:"time_zone"`
		} `json:"autostart"`
		NextAutostartAt *time.Time `json:"next_autostart_at"`
	}
	res.Decode(t, &sv)
	tokyo, err := time.LoadLocation("Asia/Tokyo")
	if err != nil {
		t.Fatal(err)
	}
	if a := sv.Autostart; a == nil || strings.Join(a.Days, ",") != "sun,mon,sat" || a.Time != "07:45" || a.TimeZone != "Asia/Tokyo" || sv.NextAutostartAt == nil {
		t.Fatalf("autostart view: %s", res.Body)
	}
	next := sv.NextAutostartAt.In(tokyo)
	if wd := next.Weekday(); (wd != time.Sunday && wd != time.Monday && wd != time.Saturday) || next.Hour() != 7 || next.Minute() != 45 ||
		!next.After(time.Now()) || next.After(time.Now().Add(4*24*time.Hour)) {
		t.Fatalf("next autostart %v", next)
	}
	res = env.Do(c, "PATCH", path, map[string]any{"autostart": nil})
	res.Decode(t, &sv)
	if res.StatusCode != http.StatusOK || sv.Autostart != nil || sv.NextAutostartAt != nil {
		t.Fatalf("remove autostart: %d %s", res.StatusCode, res.Body)
	}
}

func TestOtherUsersWorkspace(t *testing.T) {
	env := apitest.New(t, apitest.Config{})
	alice := env.CreateUser("alice", false)
	mallory := env.CreateUser("mallory", false)
	w := env.CreateWorkspace(alice, "secret")
	c := env.Login(mallory)
	validate(t, c)
	path := "/api/v1/workspaces/" + w.ID
	for _, tc := range []struct {
		method string
		body   any
	}{{"GET", nil}, {"PATCH", map[string]string{"desired_state": "STANDBY"}}, {"DELETE", nil}} {
		if res := env.Do(c, tc.method, path, tc.body); res.StatusCode != 403 || res.ErrorCode() != "FORBIDDEN" {
			t.Fatalf("%s another user's workspace: %d %s", tc.method, res.StatusCode, res.Body)
		}
	}
	if got := env.Workspace(w.ID); got.DeletedAt != nil || got.DesiredState != workspace.DesiredRunning {
		t.Fatalf("forbidden requests changed the workspace: %+v", got)
	}
	anon := env.Client()
	validate(t, anon)
	for _, p := range []string{path, "/api/v1/workspaces", "/api/v1/admin/workspaces"} {
		if res := env.Do(anon, "GET", p, nil); res.StatusCode != 401 {
			t.Fatalf("anonymous GET %s: %d", p, res.StatusCode)
		}
	}
}

func TestAdmin(t *testing.T) {
	env := apitest.New(t, apitest.Config{})
	alice := env.CreateUser("alice", false)
	root := env.CreateUser("root", true)
	w := env.CreateWorkspace(alice, "broken")
	user := env.Login(alice)
	validate(t, user)
	if res := env.Do(user, "GET", "/api/v1/admin/workspaces", nil); res.StatusCode != 403 {
		t.Fatalf("non-admin list: %d", res.StatusCode)
	}
	if res := env.Do(user, "POST", "/api/v1/admin/workspaces/"+w.ID+"/recover", nil); res.StatusCode != 403 {
		t.Fatalf("non-admin recover: %d", res.StatusCode)
	}
	admin := env.Login(root)
	validate(t, admin)
	var p pageJSON
	res := env.Do(admin, "GET", "/api/v1/admin/workspaces", nil)
	res.Decode(t, &p)
	if res.StatusCode != 200 || len(p.Workspaces) != 1 || p.Workspaces[0].ID != w.ID {
		t.Fatalf("admin list: %d %s", res.StatusCode, res.Body)
	}
	res = env.Do(admin, "GET", "/api/v1/admin/workspaces?owner_id="+alice.ID, nil)
	res.Decode(t, &p)
	if res.StatusCode != 200 || len(p.Workspaces) != 1 {
		t.Fatalf("admin list by owner: %d %s", res.StatusCode, res.Body)
	}
	for _, q := range []string{"owner_id=", "owner_id=%00", "owner_id=NOT-AN-ID"} {
		if res := env.Do(admin, "GET", "/api/v1/admin/workspaces?"+q, nil); res.StatusCode != 400 || res.ErrorCode() != "INVALID_INPUT" {
			t.Fatalf("admin list %s: %d %s", q, res.StatusCode, res.Body)
		}
	}
	if res := env.Do(admin, "POST", "/api/v1/admin/workspaces/"+w.ID+"/recover", nil); res.StatusCode != 409 || res.ErrorCode() != "INVALID_STATE" {
		t.Fatalf("recover a healthy workspace: %d %s", res.StatusCode, res.Body)
	}
	env.Exec(`UPDATE workspaces SET phase = 'ERROR', error_reason = 'Timeout', error_count = 3 WHERE id = $1`, w.ID)
	// In ERROR the owner may only delete.
	if res := env.Do(user, "PATCH", "/api/v1/workspaces/"+w.ID, map[string]string{"desired_state": "STANDBY"}); res.StatusCode != 409 {
		t.Fatalf("patch an ERROR workspace: %d %s", res.StatusCode, res.Body)
	}
	var got wsJSON
	env.Do(user, "GET", "/api/v1/workspaces/"+w.ID, nil).Decode(t, &got)
	if got.Phase != "ERROR" || got.ErrorReason == nil || *got.ErrorReason != "Timeout" {
		t.Fatalf("ERROR workspace shows %+v", got)
	}
	res = env.Do(admin, "POST", "/api/v1/admin/workspaces/"+w.ID+"/recover", nil)
	if res.StatusCode != 200 {
		t.Fatalf("recover: %d %s", res.StatusCode, res.Body)
	}
	if row := env.Workspace(w.ID); row.Phase == workspace.PhaseError || row.ErrorCount != 0 || row.ErrorReason != nil {
		t.Fatalf("after recover: phase %s count %d", row.Phase, row.ErrorCount)
	}
}

func TestLimits(t *testing.T) {
	env := apitest.New(t, apitest.Config{MaxRunningPerUser: 2})
	alice := env.CreateUser("alice", false)
	c := env.Login(alice)
	validate(t, c)
	for _, n := range []string{"one", "two"} {
		if res := env.Do(c, "POST", "/api/v1/workspaces", map[string]string{"name": n}); res.StatusCode != 201 {
			t.Fatalf("create %s: %d %s", n, res.StatusCode, res.Body)
		}
	}
	// At the limit a workspace is still created, stopped, and the answer
	// says why.
	res := env.Do(c, "POST", "/api/v1/workspaces", map[string]string{"name": "three"})
	var three wsJSON
	res.Decode(t, &three)
	notice := res.Header.Get("CodeHub-Notice")
	if res.StatusCode != 201 || three.DesiredState != "STANDBY" || !strings.Contains(notice, "you may run 2 workspaces at once") {
		t.Fatalf("third workspace: %d %q %s", res.StatusCode, notice, res.Body)
	}
	if res := env.Do(c, "PATCH", "/api/v1/workspaces/"+three.ID, map[string]string{"desired_state": "RUNNING"}); res.StatusCode != 429 || res.ErrorCode() != "LIMIT_EXCEEDED" {
		t.Fatalf("start over the limit: %d %s", res.StatusCode, res.Body)
	}
	if res := env.Do(c, "POST", "/api/v1/workspaces", map[string]string{"name": "four"}); res.StatusCode != 201 || res.Header.Get("CodeHub-Notice") == "" {
		t.Fatalf("fourth workspace: %d %s", res.StatusCode, res.Body)
	}
	running := countWantRunning(t, env)
	if n := countWorkspaces(t, env); n != 4 || running != 2 {
		t.Fatalf("%d workspaces, %d wanted running; want 4 and 2", n, running)
	}
	// Below the limit there is nothing to tell.
	if res := env.Do(c, "PATCH", "/api/v1/workspaces/"+three.ID, map[string]string{"name": "renamed"}); res.StatusCode != 200 {
		t.Fatalf("rename: %d %s", res.StatusCode, res.Body)
	}
	env.Exec(`DELETE FROM workspaces WHERE desired_state = 'RUNNING'`)
	if res := env.Do(c, "POST", "/api/v1/workspaces", map[string]string{"name": "five"}); res.StatusCode != 201 || res.Header.Get("CodeHub-Notice") != "" {
		t.Fatalf("create below the limit: %d %q", res.StatusCode, res.Header.Get("CodeHub-Notice"))
	}
}

// Fifty start requests at once must never leave more workspaces wanting to
// run than the limit allows.
func TestConcurrentStartsRespectLimit(t *testing.T) {
	const limit, n = 2, 50
	env := apitest.New(t, apitest.Config{MaxRunningPerUser: limit})
	alice := env.CreateUser("alice", false)
	ids := make([]string, n)
	for i := range n {
		w := env.CreateWorkspace(alice, fmt.Sprintf("ws-%02d", i))
		if _, err := env.Service.SetDesired(context.Background(), w.ID, workspace.DesiredStandby, workspace.CauseUser); err != nil {
			t.Fatal(err)
		}
		ids[i] = w.ID
	}
	c := env.Login(alice)
	codes := burst(t, n, func(i int) (*http.Client, *http.Request) {
		return c, jsonRequest("PATCH", env.URL+"/api/v1/workspaces/"+ids[i], `{"desired_state":"RUNNING"}`)
	})
	ok, limited := 0, 0
	for _, code := range codes {
		switch code {
		case 200:
			ok++
		case 429:
			limited++
		default:
			t.Errorf("unexpected status %d", code)
		}
	}
	running := countWantRunning(t, env)
	if ok != limit || limited != n-limit || running != limit {
		t.Fatalf("%d accepted, %d limited, %d want to run; limit %d", ok, limited, running, limit)
	}
}

func TestMetricsAndOpenAPI(t *testing.T) {
	env := apitest.New(t, apitest.Config{})
	alice := env.CreateUser("alice", false)
	env.CreateWorkspace(alice, "m")
	c := env.Login(alice)
	res := env.Do(c, "GET", "/api/v1/openapi.json", nil)
	if res.StatusCode != 200 || !strings.Contains(string(res.Body), `"openapi": "3.0.3"`) {
		t.Fatalf("openapi: %d", res.StatusCode)
	}
	env.Do(c, "POST", "/api/v1/login", map[string]string{"username": "alice", "password": "bad"})
	body := string(env.Do(c, "GET", "/metrics", nil, "Authorization", "Bearer "+apitest.MetricsToken).Body)
	for _, want := range []string{
		`codehub_http_requests_total{code="200",route="GET /api/v1/openapi.json"} 1`,
		`codehub_login_failures_total 1`,
		`codehub_workspaces{phase="PENDING"} 1`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("metrics lack %q", want)
		}
	}
}

// Guesses sent in parallel must not slip past the backoff: once the next
// failure locks the user, at most one of a burst is checked at all.
func TestLoginBackoffHoldsUnderConcurrency(t *testing.T) {
	const n = 20
	env := apitest.New(t, apitest.Config{})
	env.CreateUser("bob", false)
	env.Exec(`INSERT INTO login_throttle (user_id, client, failures) SELECT id, '127.0.0.1', 2 FROM users WHERE username = 'bob'`)
	codes := burst(t, n, func(i int) (*http.Client, *http.Request) {
		return http.DefaultClient, jsonRequest("POST", env.URL+"/api/v1/login", `{"username":"bob","password":"guess-`+strconv.Itoa(i)+`"}`)
	})
	checked, refused := 0, 0
	for _, code := range codes {
		switch code {
		case 401:
			checked++
		case 429:
			refused++
		default:
			t.Errorf("unexpected status %d", code)
		}
	}
	if checked != 1 || refused != n-1 {
		t.Fatalf("%d guesses checked, %d refused; want 1 and %d", checked, refused, n-1)
	}
}

// Every login costs an argon2id computation of 19 MiB, unknown usernames
// included, which no backoff covers: a burst of them must not take the
// server's memory with it.
func TestLoginBurstMemoryBounded(t *testing.T) {
	const n = 32
	const hashMiB = 19
	env := apitest.New(t, apitest.Config{})
	// Collect eagerly so the heap follows what is live, not what awaits
	// the next cycle.
	defer debug.SetGCPercent(debug.SetGCPercent(10))
	sample := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	heap := func() uint64 {
		metrics.Read(sample)
		return sample[0].Value.Uint64()
	}
	runtime.GC()
	base := heap()
	var peak atomic.Uint64
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for {
			if h := heap(); h > peak.Load() {
				peak.Store(h)
			}
			select {
			case <-stop:
				return
			case <-time.After(time.Millisecond):
			}
		}
	}()
	codes := burst(t, n, func(i int) (*http.Client, *http.Request) {
		return http.DefaultClient, jsonRequest("POST", env.URL+"/api/v1/login", `{"username":"nobody-`+strconv.Itoa(i)+`","password":"x"}`)
	})
	for _, code := range codes {
		if code != 401 {
			t.Errorf("unknown user: %d", code)
		}
	}
	close(stop)
	<-sampled
	grown := (peak.Load() - min(base, peak.Load())) >> 20
	if grown > 16*hashMiB {
		t.Fatalf("%d parallel logins grew the heap by %d MiB: password checks are not bounded", n, grown)
	}
	t.Logf("heap grew by at most %d MiB", grown)
}

// Under an https public URL the session cookie, and the one that clears it,
// are Secure; state-changing requests must come from that https origin.
func TestSessionCookieSecureUnderHTTPS(t *testing.T) {
	env := apitest.New(t, apitest.Config{})
	env.CreateUser("alice", false)
	const public = "https://codehub.example.com"
	replica := env.NewReplica(apitest.Config{PublicURL: public})
	serve := func(method, path, body string, headers ...string) *httptest.ResponseRecorder {
		req := httptest.NewRequest(method, public+path, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		for i := 0; i+1 < len(headers); i += 2 {
			req.Header.Set(headers[i], headers[i+1])
		}
		rec := httptest.NewRecorder()
		replica.ServeHTTP(rec, req)
		return rec
	}
	login := `{"username":"alice","password":"` + apitest.Password + `"}`
	if rec := serve("POST", "/api/v1/login", login, "Origin", "http://codehub.example.com"); rec.Code != 403 {
		t.Fatalf("login from the http origin: %d %s", rec.Code, rec.Body)
	}
	rec := serve("POST", "/api/v1/login", login, "Origin", public, "Sec-Fetch-Site", "same-origin")
	if rec.Code != 200 {
		t.Fatalf("login: %d %s", rec.Code, rec.Body)
	}
	cookies := rec.Result().Cookies()
	if len(cookies) != 1 || !cookies[0].Secure || !cookies[0].HttpOnly || cookies[0].SameSite != http.SameSiteLaxMode {
		t.Fatalf("login cookies %v", rec.Header().Values("Set-Cookie"))
	}
	rec = serve("POST", "/api/v1/logout", "", "Cookie", cookies[0].Name+"="+cookies[0].Value)
	if cleared := rec.Result().Cookies(); rec.Code != 204 || len(cleared) != 1 || !cleared[0].Secure || cleared[0].MaxAge >= 0 {
		t.Fatalf("logout: %d %v", rec.Code, rec.Header().Values("Set-Cookie"))
	}
}

// Users creating workspaces at once all get one, and together never more
// wanting to run than the global limit.
func TestConcurrentCreatesRespectGlobalLimit(t *testing.T) {
	const limit, n = 3, 12
	env := apitest.New(t, apitest.Config{MaxRunningGlobal: limit})
	clients := make([]*http.Client, n)
	for i := range n {
		clients[i] = env.Login(env.CreateUser(fmt.Sprintf("user-%02d", i), false))
	}
	codes := burst(t, n, func(i int) (*http.Client, *http.Request) {
		return clients[i], jsonRequest("POST", env.URL+"/api/v1/workspaces", `{"name":"ws"}`)
	})
	for _, code := range codes {
		if code != 201 {
			t.Errorf("unexpected status %d", code)
		}
	}
	running := countWantRunning(t, env)
	if rows := countWorkspaces(t, env); rows != n || running != limit {
		t.Fatalf("%d rows, %d wanted running; want %d and the global limit %d", rows, running, n, limit)
	}
}

// burst sends n requests released at the same moment and returns their
// status codes; next(i) gives request i and the client to send it with.
// A request that gets no answer fails the test and leaves its code 0.
func burst(t *testing.T, n int, next func(i int) (*http.Client, *http.Request)) []int {
	t.Helper()
	codes := make([]int, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		c, req := next(i)
		wg.Go(func() {
			<-start
			res, err := c.Do(req)
			if err != nil {
				t.Error(err)
				return
			}
			res.Body.Close()
			codes[i] = res.StatusCode
		})
	}
	close(start)
	wg.Wait()
	return codes
}

func jsonRequest(method, url, body string) *http.Request {
	req, _ := http.NewRequest(method, url, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	return req
}

// Login limits count per user and client address: one guesser locks out
// only itself. The per-user limit over all addresses is looser. Client
// addresses come from X-Forwarded-For only through a trusted proxy.
func TestLoginGuesserCannotLockOutTheUser(t *testing.T) {
	env := apitest.New(t, apitest.Config{TrustedProxies: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}})
	env.CreateUser("bob", false)
	c := env.Client()
	wrong := map[string]string{"username": "bob", "password": "nope"}
	right := map[string]string{"username": "bob", "password": apitest.Password}
	const guesser, user = "203.0.113.7", "198.51.100.2"
	status := 0
	for range 6 {
		status = env.Do(c, "POST", "/api/v1/login", wrong, "X-Forwarded-For", guesser).StatusCode
	}
	if status != 429 {
		t.Fatalf("guesser after six failures: %d, want 429", status)
	}
	guesses := func() (n int, locked bool) {
		t.Helper()
		var until *time.Time
		if err := env.Pool.QueryRow(context.Background(), `SELECT failures, locked_until FROM login_throttle WHERE client = $1`, guesser).Scan(&n, &until); err != nil {
			t.Fatal(err)
		}
		return n, until != nil
	}
	before, locked := guesses()
	if res := env.Do(c, "POST", "/api/v1/login", right, "X-Forwarded-For", user); res.StatusCode != 200 {
		t.Fatalf("the real user from elsewhere: %d %s, want 200", res.StatusCode, res.Body)
	}
	// The guesser stays locked: the user's success clears only their own.
	// Read from the table, since on a slow machine the guesser's few
	// seconds of lock may have run out by now.
	if after, still := guesses(); !locked || !still || after != before {
		t.Fatalf("guesser's failures %d (locked %v) became %d (locked %v) after the user's login, want them kept", before, locked, after, still)
	}

	// Spread over many addresses, guesses meet the per-user limit, whose
	// lock is short.
	for i := range 25 {
		env.Do(c, "POST", "/api/v1/login", wrong, "X-Forwarded-For", fmt.Sprintf("192.0.2.%d", i+1))
	}
	res := env.Do(c, "POST", "/api/v1/login", right, "X-Forwarded-For", user)
	if res.StatusCode != 429 {
		t.Fatalf("after guesses from 25 addresses: %d, want the per-user limit's 429", res.StatusCode)
	}
	if secs, err := strconv.Atoi(res.Header.Get("Retry-After")); err != nil || secs > 60 {
		t.Fatalf("per-user lock Retry-After %q, want at most a minute", res.Header.Get("Retry-After"))
	}
}

// Without a trusted proxy, X-Forwarded-For is the client's own word: a
// guesser that sends a new one with every guess is still one address.
func TestLoginIgnoresUntrustedForwardedFor(t *testing.T) {
	env := apitest.New(t, apitest.Config{})
	env.CreateUser("bob", false)
	c := env.Client()
	wrong := map[string]string{"username": "bob", "password": "nope"}
	status := 0
	for i := range 6 {
		status = env.Do(c, "POST", "/api/v1/login", wrong, "X-Forwarded-For", fmt.Sprintf("203.0.113.%d", i+1)).StatusCode
	}
	if status != 429 {
		t.Fatalf("spoofing guesser after six failures: %d, want 429", status)
	}
}

// A client that sends its headers and then trickles (or withholds) the
// body must not hold a handler: the body has its own read deadline, and the
// client gets 408.
func TestTrickledBodyTimesOut(t *testing.T) {
	env := apitest.New(t, apitest.Config{BodyReadTimeout: 200 * time.Millisecond})
	u, err := url.Parse(env.URL)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := net.Dial("tcp", u.Host)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := fmt.Fprintf(conn, "POST /api/v1/login HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"user", u.Host); err != nil {
		t.Fatal(err)
	}
	// The bound only catches a server that waits forever.
	if err := conn.SetReadDeadline(time.Now().Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	res, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("no answer to a withheld body: %v", err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusRequestTimeout {
		t.Fatalf("withheld body: %d, want 408", res.StatusCode)
	}
}
