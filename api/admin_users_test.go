package api_test

import (
	"fmt"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/codehub-io/codehub/api/apitest"
	"github.com/codehub-io/codehub/workspace"
)

type adminUserJSON struct {
	ID       string `json:"id"`
	Username string `json:"username"`
	IsAdmin  bool   `json:"is_admin"`
	Disabled bool   `json:"disabled"`
	SignIn   string `json:"sign_in"`
}

type auditJSON struct {
	Events []struct {
		ID    int64 `json:"id"`
		Actor struct {
			UserID  string `json:"user_id"`
			Address string `json:"address"`
		} `json:"actor"`
		Action string `json:"action"`
		Target *struct {
			Type string `json:"type"`
			ID   string `json:"id"`
		} `json:"target"`
		Outcome string `json:"outcome"`
	} `json:"events"`
	Next *string `json:"next"`
}

func (a auditJSON) actions() []string {
	var out []string
	for _, e := range a.Events {
		out = append(out, e.Action+":"+e.Outcome)
	}
	return out
}

func contains(list []string, want ...string) bool {
	for _, w := range want {
		found := false
		for _, l := range list {
			found = found || l == w
		}
		if !found {
			return false
		}
	}
	return true
}

func TestAdminManagesUsers(t *testing.T) {
	env := apitest.New(t, apitest.Config{})
	root := env.CreateUser("root", true)
	alice := env.CreateUser("alice", false)
	ac := env.Login(root)
	validate(t, ac)

	if res := env.Do(env.Login(alice), "GET", "/api/v1/admin/users", nil); res.StatusCode != http.StatusForbidden {
		t.Errorf("users list by a non-admin: %d", res.StatusCode)
	}

	for name, body := range map[string]map[string]any{
		"bad username":   {"username": "Bob!", "password": "long enough pw"},
		"short password": {"username": "bob", "password": "short"},
	} {
		if res := env.Do(ac, "POST", "/api/v1/admin/users", body); res.StatusCode != http.StatusBadRequest {
			t.Errorf("create with %s: %d %s", name, res.StatusCode, res.Body)
		}
	}
	res := env.Do(ac, "POST", "/api/v1/admin/users", map[string]any{"username": "bob", "password": "bob-password-1"})
	if res.StatusCode != http.StatusCreated {
		t.Fatalf("create bob: %d %s", res.StatusCode, res.Body)
	}
	var bob adminUserJSON
	res.Decode(t, &bob)
	if bob.Username != "bob" || bob.IsAdmin || bob.Disabled || bob.SignIn != "password" {
		t.Errorf("created %+v", bob)
	}
	if res := env.Do(ac, "POST", "/api/v1/admin/users", map[string]any{"username": "bob", "password": "bob-password-2"}); res.StatusCode != http.StatusConflict {
		t.Errorf("create bob twice: %d %s", res.StatusCode, res.Body)
	}
	var list struct {
		Users []adminUserJSON `json:"users"`
	}
	env.Do(ac, "GET", "/api/v1/admin/users", nil).Decode(t, &list)
	if len(list.Users) != 3 {
		t.Errorf("users = %+v, want alice, bob and root", list.Users)
	}

	login := func(password string) (*http.Client, int) {
		c := env.Client()
		res := env.Do(c, "POST", "/api/v1/login", map[string]string{"username": "bob", "password": password})
		return c, res.StatusCode
	}
	bc, status := login("bob-password-1")
	if status != http.StatusOK {
		t.Fatalf("bob's login: %d", status)
	}

	patch := func(id string, body map[string]any) apitest.Response {
		t.Helper()
		return env.Do(ac, "PATCH", "/api/v1/admin/users/"+id, body)
	}
	if res := patch(bob.ID, map[string]any{"disabled": true}); res.StatusCode != http.StatusOK {
		t.Fatalf("disable bob: %d %s", res.StatusCode, res.Body)
	}
	eventually(t, "a disabled user's session ends", func() bool {
		_, status := session(t, env, bc)
		return status == http.StatusUnauthorized
	})
	if _, status := login("bob-password-1"); status != http.StatusForbidden {
		t.Errorf("disabled bob's login: %d", status)
	}
	if res := patch(bob.ID, map[string]any{"disabled": false, "password": "bob-password-3", "is_admin": true}); res.StatusCode != http.StatusOK {
		t.Fatalf("enable bob: %d %s", res.StatusCode, res.Body)
	}
	if _, status := login("bob-password-1"); status != http.StatusUnauthorized {
		t.Errorf("login with the old password: %d", status)
	}
	bc, status = login("bob-password-3")
	if s, _ := session(t, env, bc); status != http.StatusOK || !s.User.IsAdmin {
		t.Errorf("login with the new password: %d, %+v", status, s.User)
	}

	for name, tc := range map[string]struct {
		id   string
		body map[string]any
		want int
	}{
		"disable oneself":        {root.ID, map[string]any{"disabled": true}, http.StatusBadRequest},
		"give up one's rights":   {root.ID, map[string]any{"is_admin": false}, http.StatusBadRequest},
		"unknown user":           {workspace.NewID(), map[string]any{"disabled": true}, http.StatusNotFound},
		"a refused change stops": {alice.ID, map[string]any{"disabled": true, "password": "short"}, http.StatusBadRequest},
	} {
		if res := patch(tc.id, tc.body); res.StatusCode != tc.want {
			t.Errorf("%s: %d %s, want %d", name, res.StatusCode, res.Body, tc.want)
		}
	}
	if _, status := session(t, env, env.Login(alice)); status != http.StatusOK {
		t.Errorf("alice was disabled by a refused request: %d", status)
	}

	var trail auditJSON
	env.Do(ac, "GET", "/api/v1/admin/audit?user_id="+bob.ID, nil).Decode(t, &trail)
	want := []string{"user.create:success", "user.disable:success", "user.enable:success", "user.password_reset:success",
		"user.admin_grant:success", "user.login:success", "user.login:failure"}
	if got := trail.actions(); !contains(got, want...) {
		t.Errorf("bob's audit trail %q lacks some of %q", got, want)
	}
}

func TestAuditOfWorkspaceActions(t *testing.T) {
	env := apitest.New(t, apitest.Config{})
	root := env.CreateUser("root", true)
	alice := env.CreateUser("alice", false)
	ac := env.Login(root)
	validate(t, ac)
	c := env.Login(alice)

	var ws wsJSON
	res := env.Do(c, "POST", "/api/v1/workspaces", map[string]string{"name": "dev"})
	if res.StatusCode != http.StatusCreated {
		t.Fatalf("create: %d %s", res.StatusCode, res.Body)
	}
	res.Decode(t, &ws)
	if res := env.Do(c, "POST", "/api/v1/workspaces", map[string]string{"name": "dev"}); res.StatusCode != http.StatusConflict {
		t.Fatalf("create a duplicate: %d %s", res.StatusCode, res.Body)
	}
	env.SetPhase(ws.ID, workspace.PhaseRunning, workspace.OpNone)
	if res := env.Do(c, "PATCH", "/api/v1/workspaces/"+ws.ID, map[string]string{"desired_state": "STANDBY"}); res.StatusCode != http.StatusOK {
		t.Fatalf("stop: %d %s", res.StatusCode, res.Body)
	}
	if res := env.Do(c, "DELETE", "/api/v1/workspaces/"+ws.ID, nil); res.StatusCode != http.StatusNoContent {
		t.Fatalf("delete: %d %s", res.StatusCode, res.Body)
	}

	var trail auditJSON
	env.Do(ac, "GET", "/api/v1/admin/audit?workspace_id="+ws.ID, nil).Decode(t, &trail)
	if got, want := trail.actions(), []string{"workspace.delete:success", "workspace.stop:success", "workspace.create:success"}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("workspace audit trail %q, want %q (newest first)", got, want)
	}
	for _, e := range trail.Events {
		if e.Actor.UserID != alice.ID || e.Actor.Address != "127.0.0.1" || e.Target == nil || e.Target.ID != ws.ID {
			t.Errorf("event %+v: want alice from 127.0.0.1 on %s", e, ws.ID)
		}
	}
	env.Do(ac, "GET", "/api/v1/admin/audit?user_id="+alice.ID, nil).Decode(t, &trail)
	if got := trail.actions(); !contains(got, "workspace.create:failure", "user.login:success") {
		t.Errorf("alice's trail %q lacks the refused create or her login", got)
	}

	// Time range and paging.
	future := url.QueryEscape(time.Now().Add(time.Hour).UTC().Format(time.RFC3339))
	env.Do(ac, "GET", "/api/v1/admin/audit?since="+future, nil).Decode(t, &trail)
	if len(trail.Events) != 0 {
		t.Errorf("events since an hour ahead: %q", trail.actions())
	}
	past := url.QueryEscape(time.Now().Add(-time.Hour).UTC().Format(time.RFC3339))
	if res := env.Do(ac, "GET", "/api/v1/admin/audit?since="+future+"&until="+past, nil); res.StatusCode != http.StatusBadRequest {
		t.Errorf("until before since: %d", res.StatusCode)
	}
	env.Do(ac, "GET", "/api/v1/admin/audit?limit=2", nil).Decode(t, &trail)
	if len(trail.Events) != 2 || trail.Next == nil {
		t.Fatalf("first page: %q next %v", trail.actions(), trail.Next)
	}
	first := trail.Events[1].ID
	env.Do(ac, "GET", "/api/v1/admin/audit?limit=2&before="+*trail.Next, nil).Decode(t, &trail)
	if len(trail.Events) == 0 || trail.Events[0].ID >= first {
		t.Errorf("second page starts at %v, want before %d", trail.Events, first)
	}
	if res := env.Do(c, "GET", "/api/v1/admin/audit", nil); res.StatusCode != http.StatusForbidden {
		t.Errorf("audit read by a non-admin: %d", res.StatusCode)
	}
}

func TestAdminWorkspacesFilteredByState(t *testing.T) {
	env := apitest.New(t, apitest.Config{})
	root := env.CreateUser("root", true)
	alice := env.CreateUser("alice", false)
	bob := env.CreateUser("bob", false)
	ac := env.Login(root)
	validate(t, ac)
	running := env.CreateWorkspace(alice, "a")
	env.SetPhase(running.ID, workspace.PhaseRunning, workspace.OpNone)
	archived := env.CreateWorkspace(bob, "b")
	env.SetPhase(archived.ID, workspace.PhaseArchived, workspace.OpNone)

	for query, want := range map[string][]string{
		"state=RUNNING":                         {running.ID},
		"state=ARCHIVED":                        {archived.ID},
		"state=ERROR":                           nil,
		"owner_id=" + bob.ID:                    {archived.ID},
		"owner_id=" + bob.ID + "&state=RUNNING": nil,
		"":                                      {running.ID, archived.ID},
	} {
		var page pageJSON
		env.Do(ac, "GET", "/api/v1/admin/workspaces?"+query, nil).Decode(t, &page)
		var got []string
		for _, w := range page.Workspaces {
			got = append(got, w.ID)
		}
		if !contains(got, want...) || len(got) != len(want) {
			t.Errorf("?%s: %q, want %q", query, got, want)
		}
	}
	if res := env.Do(ac, "GET", "/api/v1/admin/workspaces?state=SLEEPING", nil); res.StatusCode != http.StatusBadRequest {
		t.Errorf("unknown state: %d %s", res.StatusCode, res.Body)
	}
}

// TestAdminStopsAWorkspace: an administrator stops and archives another
// user's workspace, the owner is told an administrator did, the audit log
// has it under the administrator's name, and nothing else gets through:
// a non-administrator, a start, a bad body, an unknown workspace.
func TestAdminStopsAWorkspace(t *testing.T) {
	env := apitest.New(t, apitest.Config{})
	root := env.CreateUser("root", true)
	alice := env.CreateUser("alice", false)
	ac, c := env.Login(root), env.Login(alice)
	validate(t, ac)
	validate(t, c)
	w := env.CreateWorkspace(alice, "dev")
	env.SetPhase(w.ID, workspace.PhaseRunning, workspace.OpNone)
	path := "/api/v1/admin/workspaces/" + w.ID

	if res := env.Do(c, "PATCH", path, map[string]string{"desired_state": "STANDBY"}); res.StatusCode != http.StatusForbidden {
		t.Fatalf("the owner through the admin API: %d %s", res.StatusCode, res.Body)
	}
	for name, body := range map[string]any{
		"a start":       map[string]string{"desired_state": "RUNNING"},
		"no state":      map[string]string{},
		"unknown state": map[string]string{"desired_state": "PAUSED"},
		"another field": map[string]string{"desired_state": "STANDBY", "name": "x"},
	} {
		if res := env.Do(ac, "PATCH", path, body); res.StatusCode != http.StatusBadRequest || (res.ErrorCode() != "INVALID_INPUT" && res.ErrorCode() != "INVALID_JSON") {
			t.Errorf("%s: %d %s", name, res.StatusCode, res.Body)
		}
	}
	if got := env.Workspace(w.ID); got.DesiredState != workspace.DesiredRunning || got.DesiredBy != workspace.CauseUser {
		t.Fatalf("refused requests changed the workspace: %s by %s", got.DesiredState, got.DesiredBy)
	}
	if res := env.Do(ac, "PATCH", "/api/v1/admin/workspaces/01jz0000000000000000000000", map[string]string{"desired_state": "STANDBY"}); res.StatusCode != http.StatusNotFound {
		t.Fatalf("unknown workspace: %d %s", res.StatusCode, res.Body)
	}

	var got struct {
		DesiredState string     `json:"desired_state"`
		DesiredBy    string     `json:"desired_by"`
		DesiredAt    *time.Time `json:"desired_at"`
	}
	res := env.Do(ac, "PATCH", path, map[string]string{"desired_state": "STANDBY"})
	res.Decode(t, &got)
	if res.StatusCode != http.StatusOK || got.DesiredState != "STANDBY" || got.DesiredBy != "admin" {
		t.Fatalf("stop: %d %s", res.StatusCode, res.Body)
	}
	env.Do(c, "GET", "/api/v1/workspaces/"+w.ID, nil).Decode(t, &got)
	if got.DesiredBy != "admin" || got.DesiredAt == nil {
		t.Fatalf("the owner sees desired_by %q at %v", got.DesiredBy, got.DesiredAt)
	}
	env.SetPhase(w.ID, workspace.PhaseStandby, workspace.OpNone)
	if res := env.Do(ac, "PATCH", path, map[string]string{"desired_state": "ARCHIVED"}); res.StatusCode != http.StatusOK {
		t.Fatalf("archive: %d %s", res.StatusCode, res.Body)
	}

	var trail auditJSON
	env.Do(ac, "GET", "/api/v1/admin/audit?workspace_id="+w.ID, nil).Decode(t, &trail)
	if got, want := trail.actions(), []string{"workspace.archive:success", "workspace.stop:success"}; fmt.Sprint(got[:2]) != fmt.Sprint(want) {
		t.Errorf("audit trail %q, want %q first", got, want)
	}
	for _, e := range trail.Events[:2] {
		if e.Actor.UserID != root.ID {
			t.Errorf("event %+v not the administrator's", e)
		}
	}
}
