package api_test

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/codehub-io/codehub/api/apitest"
	"github.com/codehub-io/codehub/config"
	"github.com/codehub-io/codehub/store"
)

// templatesConfig has the default template, "go" with parameters, and
// "gpu" for administrators only.
func templatesConfig() *config.Config {
	cfg := config.Default()
	cfg.Templates = []*config.Template{
		{Name: "go", Description: "Go service", CPU: 2000, Memory: 4096, MemoryMax: 8192, StandbyTTL: time.Hour,
			Env: map[string]string{"GOFLAGS": "-mod=mod"}, RepositoryParameter: "repo",
			Parameters: []*config.Parameter{
				{Name: "repo", Default: ptr("https://example.com/a.git"), Regex: "https://.+"},
				{Name: "workers", Type: config.ParamNumber, Default: ptr("4"), Min: ptr(1.0), Max: ptr(16.0)},
				{Name: "editor", Options: []string{"vim", "emacs"}},
			}},
		{Name: "gpu", Groups: []string{config.GroupAdmins}},
	}
	return cfg
}

type templateJSON struct {
	Name       string         `json:"name"`
	Version    string         `json:"version"`
	CPU        int            `json:"cpu"`
	Parameters map[string]any `json:"parameters"`
}

func TestListTemplates(t *testing.T) {
	env := apitest.New(t, apitest.Config{Templates: templatesConfig()})
	names := func(admin bool, user string) []string {
		t.Helper()
		c := env.Login(env.CreateUser(user, admin))
		validate(t, c)
		res := env.Do(c, "GET", "/api/v1/templates", nil)
		if res.StatusCode != 200 {
			t.Fatalf("templates: %d %s", res.StatusCode, res.Body)
		}
		var list struct{ Templates []templateJSON }
		if err := json.Unmarshal(res.Body, &list); err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, tp := range list.Templates {
			out = append(out, tp.Name)
			if tp.Name == "go" {
				props := tp.Parameters["properties"].(map[string]any)
				if tp.CPU != 2000 || props["workers"].(map[string]any)["maximum"] != 16.0 {
					t.Errorf("go template = %+v", tp)
				}
			}
		}
		return out
	}
	if got := names(false, "bob"); len(got) != 2 || got[0] != "default" || got[1] != "go" {
		t.Errorf("a user sees %q, want default and go", got)
	}
	if got := names(true, "root"); len(got) != 3 || got[2] != "gpu" {
		t.Errorf("an administrator sees %q, want gpu too", got)
	}
}

// TestTemplatesByGroup: a template limited to a group of the identity
// provider is offered to, and created by, its members only.
func TestTemplatesByGroup(t *testing.T) {
	cfg := config.Default()
	cfg.Templates = []*config.Template{{Name: "notebook", Groups: []string{"data"}}}
	env := apitest.New(t, apitest.Config{Templates: cfg})
	ann, bob := env.CreateUser("ann", false), env.CreateUser("bob", false)
	if err := store.SetGroups(context.Background(), env.Pool, ann.ID, []string{"web", "data"}); err != nil {
		t.Fatal(err)
	}
	offered := func(c *http.Client) bool {
		t.Helper()
		res := env.Do(c, "GET", "/api/v1/templates", nil)
		var list struct{ Templates []templateJSON }
		if err := json.Unmarshal(res.Body, &list); err != nil || res.StatusCode != 200 {
			t.Fatalf("templates: %d %s", res.StatusCode, res.Body)
		}
		return slices.ContainsFunc(list.Templates, func(tp templateJSON) bool { return tp.Name == "notebook" })
	}
	ca, cb := env.Login(ann), env.Login(bob)
	if !offered(ca) || offered(cb) {
		t.Fatalf("notebook offered to ann %v, to bob %v; want ann only", offered(ca), offered(cb))
	}
	if res := env.Do(cb, "POST", "/api/v1/workspaces", map[string]any{"name": "nb", "template": "notebook"}); res.StatusCode == http.StatusCreated {
		t.Fatalf("bob created a workspace of the data group's template: %s", res.Body)
	}
	var n int
	if err := env.Pool.QueryRow(context.Background(), `SELECT count(*) FROM workspaces WHERE owner_id = $1`, bob.ID).Scan(&n); err != nil || n != 0 {
		t.Fatalf("bob has %d workspaces after the refusal (%v)", n, err)
	}
	if res := env.Do(ca, "POST", "/api/v1/workspaces", map[string]any{"name": "nb", "template": "notebook"}); res.StatusCode != http.StatusCreated {
		t.Fatalf("ann's create: %d %s", res.StatusCode, res.Body)
	}
}

func TestCreateFromTemplate(t *testing.T) {
	cfg := templatesConfig()
	env := apitest.New(t, apitest.Config{Templates: cfg})
	alice := env.CreateUser("alice", false)
	c := env.Login(alice)
	validate(t, c)

	refused := []struct {
		name  string
		body  map[string]any
		field string
	}{
		{"out of range", map[string]any{"template": "go", "parameters": map[string]any{"editor": "vim", "workers": 99}}, "parameters.workers"},
		{"required missing", map[string]any{"template": "go"}, "parameters.editor"},
		{"regex", map[string]any{"template": "go", "parameters": map[string]any{"editor": "vim", "repo": "ssh://x"}}, "parameters.repo"},
		{"unknown parameter", map[string]any{"template": "go", "parameters": map[string]any{"editor": "vim", "x": 1}}, "parameters.x"},
		{"unknown template", map[string]any{"template": "nope"}, "template"},
		{"template of admins", map[string]any{"template": "gpu"}, "template"},
	}
	for _, tc := range refused {
		tc.body["name"] = "dev"
		res := env.Do(c, "POST", "/api/v1/workspaces", tc.body)
		var e struct{ Error struct{ Field string } }
		_ = json.Unmarshal(res.Body, &e)
		if res.StatusCode != 400 || e.Error.Field != tc.field {
			t.Errorf("%s: %d %s, want 400 naming %s", tc.name, res.StatusCode, res.Body, tc.field)
		}
	}
	var n int
	if err := env.Pool.QueryRow(t.Context(), `SELECT count(*) FROM workspaces`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("refused requests created %d workspaces (%v)", n, err)
	}

	res := env.Do(c, "POST", "/api/v1/workspaces", map[string]any{
		"name": "dev", "template": "go", "parameters": map[string]any{"editor": "emacs", "workers": 8}})
	if res.StatusCode != 201 {
		t.Fatalf("create: %d %s", res.StatusCode, res.Body)
	}
	var ws struct {
		ID               string
		Template         string
		TemplateVersion  string `json:"template_version"`
		TemplateOutdated bool   `json:"template_outdated"`
		Parameters       map[string]any
	}
	if err := json.Unmarshal(res.Body, &ws); err != nil {
		t.Fatal(err)
	}
	if row := env.Workspace(ws.ID); row.StandbyTTL == nil || *row.StandbyTTL != time.Hour || row.ArchiveTTL != nil {
		t.Errorf("timers of a workspace of go: %v %v, want the template's standby_ttl and the default archive_ttl", row.StandbyTTL, row.ArchiveTTL)
	}
	goTemplate, _ := cfg.Template("go")
	want := map[string]any{"editor": "emacs", "workers": 8.0, "repo": "https://example.com/a.git"}
	if ws.Template != "go" || ws.TemplateVersion != goTemplate.Version() || ws.TemplateOutdated || len(ws.Parameters) != 3 {
		t.Fatalf("created %+v", ws)
	}
	for k, v := range want {
		if ws.Parameters[k] != v {
			t.Errorf("parameter %s = %v, want %v", k, ws.Parameters[k], v)
		}
	}

	// The operator changes the template: the workspace runs the old
	// version until its next start.
	cfg.Templates[0].Memory = 6000
	res = env.Do(c, "GET", "/api/v1/workspaces/"+ws.ID, nil)
	if err := json.Unmarshal(res.Body, &ws); err != nil {
		t.Fatal(err)
	}
	if !ws.TemplateOutdated {
		t.Errorf("workspace of a changed template is not shown outdated: %s", res.Body)
	}

	admin := env.Login(env.CreateUser("root", true))
	validate(t, admin)
	res = env.Do(admin, "GET", "/api/v1/admin/templates", nil)
	var usage struct {
		Templates []struct {
			Template, Version string
			Count             int
			Current           bool
		}
	}
	if err := json.Unmarshal(res.Body, &usage); err != nil || res.StatusCode != 200 {
		t.Fatalf("usage: %d %s", res.StatusCode, res.Body)
	}
	if len(usage.Templates) != 1 || usage.Templates[0].Template != "go" || usage.Templates[0].Count != 1 || usage.Templates[0].Current {
		t.Errorf("usage = %+v, want one workspace of an older go", usage.Templates)
	}
	if res := env.Do(c, "GET", "/api/v1/admin/templates", nil); res.StatusCode != 403 {
		t.Errorf("a user reads the usage: %d", res.StatusCode)
	}
}

func TestFirstStartSettings(t *testing.T) {
	env := apitest.New(t, apitest.Config{})
	alice := env.CreateUser("alice", false)
	c := env.Login(alice)
	validate(t, c)
	res := env.Do(c, "PATCH", "/api/v1/settings", map[string]any{
		"dotfiles_repository": "https://example.com/dots.git", "git_credential": "s3cret"})
	if res.StatusCode != 200 || strings.Contains(string(res.Body), "s3cret") ||
		!strings.Contains(string(res.Body), `"git_credential_set":true`) {
		t.Fatalf("set: %d %s", res.StatusCode, res.Body)
	}
	for _, body := range []map[string]any{{"dotfiles_repository": "not a url"}, {"git_credential": "a\nb"}} {
		if res := env.Do(c, "PATCH", "/api/v1/settings", body); res.StatusCode != 400 {
			t.Errorf("%v: %d %s, want 400", body, res.StatusCode, res.Body)
		}
	}
	settings, err := store.GetFirstStartSettings(t.Context(), env.Pool, alice.ID)
	if err != nil || settings.DotfilesRepository != "https://example.com/dots.git" || settings.GitCredential != "s3cret" {
		t.Fatalf("stored %+v, %v; refused changes must change nothing", settings, err)
	}
	res = env.Do(c, "GET", "/api/v1/settings", nil)
	if res.StatusCode != 200 || strings.Contains(string(res.Body), "s3cret") {
		t.Fatalf("get: %d %s", res.StatusCode, res.Body)
	}
}

// A stored credential that does not open for its user (a sealed value
// copied from another row) shows as set and can be replaced.
func TestUnreadableGitCredentialCanBeReplaced(t *testing.T) {
	env := apitest.New(t, apitest.Config{})
	alice, bob := env.CreateUser("alice", false), env.CreateUser("bob", false)
	credential := "bobs-token"
	if _, err := store.SetFirstStartSettings(t.Context(), env.Pool, bob.ID, nil, &credential); err != nil {
		t.Fatal(err)
	}
	if _, err := env.Pool.Exec(t.Context(), `UPDATE users SET git_credential = (SELECT git_credential FROM users WHERE id = $2) WHERE id = $1`, alice.ID, bob.ID); err != nil {
		t.Fatal(err)
	}
	c := env.Login(alice)
	validate(t, c)
	res := env.Do(c, "GET", "/api/v1/settings", nil)
	if res.StatusCode != 200 || !strings.Contains(string(res.Body), `"git_credential_set":true`) || strings.Contains(string(res.Body), credential) {
		t.Fatalf("get: %d %s", res.StatusCode, res.Body)
	}
	res = env.Do(c, "PATCH", "/api/v1/settings", map[string]any{"git_credential": "alices-token"})
	if res.StatusCode != 200 {
		t.Fatalf("replace: %d %s", res.StatusCode, res.Body)
	}
	if got, err := store.GetFirstStartSettings(t.Context(), env.Pool, alice.ID); err != nil || got.GitCredential != "alices-token" {
		t.Fatalf("after the replacement: %+v, %v", got, err)
	}
}
