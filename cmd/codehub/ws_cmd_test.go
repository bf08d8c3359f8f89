package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/codehub-io/codehub/api/apitest"
	"github.com/codehub-io/codehub/config"
	"github.com/codehub-io/codehub/internal/nomadtest"
	"github.com/codehub-io/codehub/internal/testenv"
	"github.com/codehub-io/codehub/workspace"
)

// cliTest drives the user commands against a real server, with the
// credentials in a configuration directory of its own.
type cliTest struct {
	t      *testing.T
	env    *apitest.Env
	config string
	// opened are the addresses the commands asked the browser to show;
	// browse, when set, acts as the browser.
	mu     sync.Mutex
	opened []string
	browse func(address string) error
}

func newCLITest(t *testing.T) *cliTest {
	t.Helper()
	config := t.TempDir()
	t.Setenv("XDG_CONFIG_HOME", config)
	t.Setenv("CODEHUB_TOKEN", "")
	t.Setenv("CODEHUB_URL", "")
	return &cliTest{t: t, env: apitest.New(t, apitest.Config{}), config: config}
}

type cliResult struct {
	code           int
	stdout, stderr string
}

func (c *cliTest) cli(ctx context.Context, stdin string, stdout, stderr *nomadtest.LockedBuffer) *userCLI {
	return &userCLI{ctx: ctx, stdin: strings.NewReader(stdin), stdout: stdout, stderr: stderr,
		openURL: func(address string) error {
			c.mu.Lock()
			c.opened = append(c.opened, address)
			browse := c.browse
			c.mu.Unlock()
			if browse != nil {
				return browse(address)
			}
			return nil
		}}
}

// run runs "codehub ARGS" with stdin and returns its exit status and output.
func (c *cliTest) run(stdin string, args ...string) cliResult {
	c.t.Helper()
	var stdout, stderr nomadtest.LockedBuffer
	u := c.cli(c.t.Context(), stdin, &stdout, &stderr)
	var code int
	switch args[0] {
	case "login":
		code = u.login(args[1:])
	case "ws":
		code = u.ws(args[1:])
	case "logout":
		code = u.logout(args[1:])
	case "port-forward":
		code = u.portForward(args[1:])
	default:
		c.t.Fatalf("not a user command: %s", args[0])
	}
	return cliResult{code: code, stdout: stdout.String(), stderr: stderr.String()}
}

// must runs a command that has to succeed.
func (c *cliTest) must(stdin string, args ...string) cliResult {
	c.t.Helper()
	r := c.run(stdin, args...)
	if r.code != 0 {
		c.t.Fatalf("codehub %s: exit %d\nstdout: %s\nstderr: %s", strings.Join(args, " "), r.code, r.stdout, r.stderr)
	}
	return r
}

// expect runs a command that has to end with exit status code.
func (c *cliTest) expect(code int, stdin string, args ...string) cliResult {
	c.t.Helper()
	r := c.run(stdin, args...)
	if r.code != code {
		c.t.Fatalf("codehub %s: exit %d, want %d\nstdout: %s\nstderr: %s", strings.Join(args, " "), r.code, code, r.stdout, r.stderr)
	}
	return r
}

// loginAs logs in with a pasted token of u and returns the token.
func (c *cliTest) loginAs(u apitest.User, scope string) string {
	c.t.Helper()
	secret := c.env.Token(u, map[string]any{"name": "cli test", "scope": scope})
	c.must(secret+"\n", "login", "-token-stdin", c.env.URL)
	return secret
}

func (c *cliTest) credentialsFile() string {
	return filepath.Join(c.config, "codehub", "credentials.json")
}

func TestLoginWithPastedToken(t *testing.T) {
	c := newCLITest(t)
	alice := c.env.CreateUser("alice", false)
	secret := c.env.Token(alice, map[string]any{"name": "pasted", "scope": "read"})

	c.expect(exitUsage, "", "login", "-token-stdin", c.env.URL)
	c.expect(exitUsage, secret, "login", "-token-stdin", "codehub.example.com")
	c.expect(exitUsage, secret, "login", "-token-stdin")
	r := c.expect(exitRefused, "codehub_not-a-token\n", "login", "-token-stdin", c.env.URL)
	if !strings.Contains(r.stderr, "did not accept the token") {
		t.Fatalf("refused token: %s", r.stderr)
	}
	if _, err := os.Stat(c.credentialsFile()); !os.IsNotExist(err) {
		t.Fatalf("a refused token was stored: %v", err)
	}

	r = c.must(secret+"\n", "login", "-token-stdin", c.env.URL+"/")
	if !strings.Contains(r.stdout, "Logged in to "+c.env.URL+" as alice") {
		t.Fatalf("login said %q", r.stdout)
	}
	info, err := os.Stat(c.credentialsFile())
	if err != nil {
		t.Fatal(err)
	}
	if info.Mode().Perm() != 0o600 {
		t.Fatalf("credentials mode %v, want 0600", info.Mode().Perm())
	}
	if dir, err := os.Stat(filepath.Dir(c.credentialsFile())); err != nil || dir.Mode().Perm() != 0o700 {
		t.Fatalf("credentials directory: %v %v, want 0700", dir.Mode().Perm(), err)
	}
	var stored credentials
	raw, _ := os.ReadFile(c.credentialsFile())
	if err := json.Unmarshal(raw, &stored); err != nil || stored.Token != secret || stored.URL != c.env.URL {
		t.Fatalf("stored %s (%v)", raw, err)
	}
	// The stored token is what the ws commands use.
	c.must("", "ws", "list")
}

// TestWsCommands takes a workspace through every subcommand, by name and
// by id, in text and JSON.
func TestWsCommands(t *testing.T) {
	c := newCLITest(t)
	alice := c.env.CreateUser("alice", false)
	c.loginAs(alice, "read-write")

	r := c.must("", "ws", "create", "backend")
	if !strings.Contains(r.stdout, "Created workspace backend (") {
		t.Fatalf("create said %q", r.stdout)
	}
	// Flags after the name, as the help shows them.
	r = c.must("", "ws", "create", "frontend", "-image", apitest.Images[1], "-json")
	var front wsInfo
	if err := json.Unmarshal([]byte(r.stdout), &front); err != nil || front.Name != "frontend" || front.Image != apitest.Images[1] {
		t.Fatalf("create -json: %v %s", err, r.stdout)
	}
	if r := c.expect(exitRefused, "", "ws", "create", "backend"); !strings.Contains(r.stderr, "NAME_TAKEN") {
		t.Fatalf("duplicate name: %s", r.stderr)
	}
	c.expect(exitRefused, "", "ws", "create", "Not_A_Name")

	r = c.must("", "ws", "list")
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[0], "ID") || !strings.Contains(r.stdout, "backend") || !strings.Contains(r.stdout, front.ID) {
		t.Fatalf("list:\n%s", r.stdout)
	}
	// What S3 holds of each home: nothing yet, all of it, or the home as
	// of a time (it ran since).
	if !strings.HasSuffix(lines[0], "SAVED TO S3") || !strings.HasSuffix(lines[1], "never") || !strings.HasSuffix(lines[2], "never") {
		t.Fatalf("list before any archive:\n%s", r.stdout)
	}
	at := time.Date(2026, 11, 27, 16, 7, 0, 0, time.Local)
	if _, err := c.env.Pool.Exec(t.Context(), `UPDATE workspaces SET archive_key = 'archives/' || id || '/01jb3x8a000000000000000001/home.tar.zst',
		archived_at = $2, run_id = CASE WHEN id = $1 THEN 'run2' ELSE 'run1' END, archive_run_id = 'run1'`, front.ID, at); err != nil {
		t.Fatal(err)
	}
	r = c.must("", "ws", "list")
	for _, line := range strings.Split(strings.TrimSpace(r.stdout), "\n")[1:] {
		want := "all of it"
		if strings.HasPrefix(line, front.ID) {
			want = "as of 2026-11-27 16:07"
		}
		if !strings.HasSuffix(line, want) {
			t.Fatalf("list after archives: %q, want it to end in %q\n%s", line, want, r.stdout)
		}
	}
	r = c.must("", "ws", "list", "-json")
	var listed []wsInfo
	if err := json.Unmarshal([]byte(r.stdout), &listed); err != nil || len(listed) != 2 {
		t.Fatalf("list -json: %v %s", err, r.stdout)
	}
	back := listed[0]
	if back.Name != "backend" {
		back = listed[1]
	}

	for _, step := range []struct{ sub, ref, desired string }{
		{"stop", "backend", "STANDBY"},
		{"start", back.ID, "RUNNING"},
		{"archive", "backend", "ARCHIVED"},
	} {
		r := c.must("", "ws", step.sub, step.ref, "-json")
		var got wsInfo
		if err := json.Unmarshal([]byte(r.stdout), &got); err != nil || got.DesiredState != step.desired {
			t.Fatalf("ws %s -json: %v %s", step.sub, err, r.stdout)
		}
		if row := c.env.Workspace(back.ID); string(row.DesiredState) != step.desired {
			t.Fatalf("after ws %s: desired %s", step.sub, row.DesiredState)
		}
	}
	if r := c.must("", "ws", "start", "backend"); !strings.Contains(r.stdout, "Asked workspace backend ("+back.ID+") to start") {
		t.Fatalf("start said %q", r.stdout)
	}
	// A workspace with an operation in flight refuses a change.
	c.env.SetPhase(back.ID, workspace.PhaseStandby, workspace.OpStarting)
	if r := c.expect(exitRefused, "", "ws", "stop", "backend"); !strings.Contains(r.stderr, "INVALID_STATE") {
		t.Fatalf("stop while starting: %s", r.stderr)
	}
	c.env.SetPhase(back.ID, workspace.PhaseRunning, workspace.OpNone)

	r = c.must("", "ws", "open", "-print", "backend")
	if strings.TrimSpace(r.stdout) != back.URL || len(c.opened) != 0 {
		t.Fatalf("open -print: %q, opened %v", r.stdout, c.opened)
	}
	c.must("", "ws", "open", back.ID)
	if len(c.opened) != 1 || c.opened[0] != back.URL {
		t.Fatalf("open showed %v, want %s", c.opened, back.URL)
	}
	r = c.must("", "ws", "open", "-print", "-json", "backend")
	var opened struct{ URL string }
	if err := json.Unmarshal([]byte(r.stdout), &opened); err != nil || opened.URL != back.URL {
		t.Fatalf("open -json: %v %s", err, r.stdout)
	}

	c.env.Exec(`UPDATE workspaces SET conditions = '{"storage.volume_ready": {"status": "True", "last_transition_time": "2026-11-25T23:40:00Z"}}',
		error_reason = 'Timeout', error_message = 'the editor did not answer', error_count = 1 WHERE id = $1`, back.ID)
	r = c.must("", "ws", "logs", "backend")
	for _, want := range []string{"created with image " + apitest.Images[0], "the owner asked for RUNNING",
		"storage.volume_ready is True", "attempt 1 failed: Timeout (the editor did not answer)", "phase RUNNING"} {
		if !strings.Contains(r.stdout, want) {
			t.Fatalf("logs lacks %q:\n%s", want, r.stdout)
		}
	}
	r = c.must("", "ws", "logs", "-json", back.ID)
	for _, line := range strings.Split(strings.TrimSpace(r.stdout), "\n") {
		var e logEntry
		if err := json.Unmarshal([]byte(line), &e); err != nil || e.Event == "" || e.Time.IsZero() {
			t.Fatalf("logs -json line %q: %v", line, err)
		}
	}

	// Deleting asks for the name.
	c.expect(exitUsage, "frontnd\n", "ws", "delete", "frontend")
	c.expect(exitUsage, "", "ws", "delete", "frontend")
	if row := c.env.Workspace(front.ID); row.DeletedAt != nil {
		t.Fatal("an unconfirmed delete deleted")
	}
	if r := c.must("frontend\n", "ws", "delete", "frontend"); !strings.Contains(r.stdout, "Deleted workspace frontend") {
		t.Fatalf("delete said %q", r.stdout)
	}
	c.must("", "ws", "delete", "-yes", back.ID)
	for _, id := range []string{front.ID, back.ID} {
		if row := c.env.Workspace(id); row.DeletedAt == nil {
			t.Fatalf("workspace %s not deleted", id)
		}
	}
	if r := c.must("", "ws", "list"); strings.Count(r.stdout, "\n") != 1 {
		t.Fatalf("list after deleting all:\n%s", r.stdout)
	}
}

// TestWsExitStatus: not found, refused and failed are told apart.
func TestWsExitStatus(t *testing.T) {
	c := newCLITest(t)
	alice := c.env.CreateUser("alice", false)
	bob := c.env.CreateUser("bob", false)
	theirs := c.env.CreateWorkspace(bob, "theirs")

	c.expect(exitRefused, "", "ws", "list")
	c.expect(exitUsage, "", "ws")
	c.expect(exitUsage, "", "ws", "frobnicate")
	c.expect(exitUsage, "", "ws", "start")
	c.expect(exitUsage, "", "ws", "list", "-nope")
	if r := c.expect(exitOK, "", "ws", "-h"); !strings.Contains(r.stdout, "Usage: codehub ws <subcommand>") || !strings.Contains(r.stdout, "Exit status:") {
		t.Fatalf("ws -h:\n%s", r.stdout)
	}
	if r := c.expect(exitOK, "", "ws", "create", "-h"); !strings.Contains(r.stdout, "Usage: codehub ws create [options] NAME") || !strings.Contains(r.stdout, "-image=<image>") {
		t.Fatalf("ws create -h:\n%s", r.stdout)
	}

	c.loginAs(alice, "read")
	c.expect(exitNotFound, "", "ws", "start", "nosuch")
	c.expect(exitNotFound, "", "ws", "logs", "01jb3x7k9q2m5n8p4r6s0t1v2w")
	if r := c.expect(exitRefused, "", "ws", "start", theirs.ID); !strings.Contains(r.stderr, "FORBIDDEN") {
		t.Fatalf("another user's workspace: %s", r.stderr)
	}
	if r := c.expect(exitRefused, "", "ws", "create", "mine"); !strings.Contains(r.stderr, "READ_ONLY_TOKEN") {
		t.Fatalf("create with a read token: %s", r.stderr)
	}
	c.must("", "ws", "list")

	// A revoked token is refused.
	var id string
	if err := c.env.Pool.QueryRow(t.Context(), `SELECT id FROM api_tokens`).Scan(&id); err != nil {
		t.Fatal(err)
	}
	if res := c.env.Do(c.env.Login(alice), "DELETE", "/api/v1/tokens/"+id, nil); res.StatusCode != http.StatusNoContent {
		t.Fatalf("revoke: %d %s", res.StatusCode, res.Body)
	}
	if r := c.expect(exitRefused, "", "ws", "list"); !strings.Contains(r.stderr, "UNAUTHENTICATED") {
		t.Fatalf("revoked token: %s", r.stderr)
	}

	// Nothing listens there: the command failed, nothing was refused.
	dead := fmt.Sprintf("http://127.0.0.1:%d", testenv.FreePort(t))
	t.Setenv("CODEHUB_URL", dead)
	t.Setenv("CODEHUB_TOKEN", "codehub_x")
	c.expect(exitFailed, "", "ws", "list")
	t.Setenv("CODEHUB_URL", "")
	c.expect(exitFailed, "", "ws", "list")
}

// TestLoginInBrowser goes through the browser login over HTTP, doing what
// the dashboard's approval page does: ask the server for a code with the
// user's session and send the browser to the loopback address with it.
func TestLoginInBrowser(t *testing.T) {
	c := newCLITest(t)
	alice := c.env.CreateUser("alice", false)
	session := c.env.Login(alice)
	var callbacks []int
	// steal redeems the code without the verifier before the browser
	// brings it back, as someone who read it from a log would.
	approve := func(deny, steal bool, state func(string) string) func(string) error {
		return func(address string) error {
			u, err := url.Parse(address)
			if err != nil || u.Path != "/cli-login" || !strings.HasPrefix(address, c.env.URL) {
				return fmt.Errorf("approval address %q", address)
			}
			q := u.Query()
			back := url.Values{"state": {state(q.Get("state"))}}
			if deny {
				back.Set("error", "denied")
			} else {
				res := c.env.Do(session, "POST", "/api/v1/token-grants", map[string]string{"name": q.Get("name"), "code_challenge": q.Get("challenge")})
				var g struct{ Code string }
				res.Decode(t, &g)
				back.Set("code", g.Code)
				if steal {
					c.env.Do(c.env.Client(), "POST", "/api/v1/token-grants/redeem", map[string]string{"code": g.Code})
				}
			}
			res, err := http.Get("http://127.0.0.1:" + q.Get("port") + "/callback?" + back.Encode())
			if err != nil {
				return err
			}
			res.Body.Close()
			callbacks = append(callbacks, res.StatusCode)
			return nil
		}
	}
	same := func(s string) string { return s }

	c.browse = approve(false, false, same)
	r := c.must("", "login", "-name", "laptop", c.env.URL)
	if !strings.Contains(r.stdout, "as alice") || len(callbacks) != 1 || callbacks[0] != 200 {
		t.Fatalf("browser login: %q, callbacks %v", r.stdout, callbacks)
	}
	var tok struct {
		Name, Scope string
	}
	if err := c.env.Pool.QueryRow(t.Context(), `SELECT name, scope FROM api_tokens`).Scan(&tok.Name, &tok.Scope); err != nil || tok.Name != "laptop" || tok.Scope != "read-write" {
		t.Fatalf("token made: %+v %v", tok, err)
	}
	c.must("", "ws", "create", "fromcli")

	c.browse = approve(true, false, same)
	if r := c.expect(exitRefused, "", "login", c.env.URL); !strings.Contains(r.stderr, "refused in the browser") {
		t.Fatalf("denied login: %s", r.stderr)
	}

	// A code used up by someone else fails the login, and the browser's
	// page says so instead of "approved".
	callbacks = nil
	c.browse = approve(false, true, same)
	if r := c.expect(exitRefused, "", "login", c.env.URL); !strings.Contains(r.stderr, "unknown, used or expired") || len(callbacks) != 1 || callbacks[0] != http.StatusBadGateway {
		t.Fatalf("stolen code: callbacks %v: %s", callbacks, r.stderr)
	}

	// An answer with another state is turned away, and the command keeps
	// waiting for its own (until it is stopped here).
	callbacks = nil
	c.browse = approve(false, false, func(string) string { return "forged" })
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
	defer cancel()
	var stdout, stderr nomadtest.LockedBuffer
	if code := c.cli(ctx, "", &stdout, &stderr).login([]string{c.env.URL}); code != exitFailed || len(callbacks) != 1 || callbacks[0] != 400 {
		t.Fatalf("forged state: exit %d, callbacks %v: %s", code, callbacks, stderr.String())
	}
	// The credentials of the first login are still there.
	c.must("", "ws", "list")
}

// TestWsLogsFollow: logs -f prints each change as it happens and ends
// when the workspace is deleted.
func TestWsLogsFollow(t *testing.T) {
	c := newCLITest(t)
	c.env.StartListener()
	alice := c.env.CreateUser("alice", false)
	w := c.env.CreateWorkspace(alice, "live")
	c.loginAs(alice, "read")
	var stdout, stderr nomadtest.LockedBuffer
	done := make(chan int, 1)
	go func() { done <- c.cli(t.Context(), "", &stdout, &stderr).ws([]string{"logs", "-f", "live"}) }()
	waitFor := func(want string) {
		t.Helper()
		for deadline := time.Now().Add(30 * time.Second); !strings.Contains(stdout.String(), want); time.Sleep(20 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("logs -f never printed %q:\n%s%s", want, stdout.String(), stderr.String())
			}
		}
	}
	waitFor("phase PENDING")
	// The stream's first event is the state already printed; wait for the
	// server to have sent it before changing anything.
	time.Sleep(500 * time.Millisecond)
	c.env.SetPhase(w.ID, workspace.PhasePending, workspace.OpProvisioning)
	waitFor("phase PROVISIONING, operation PROVISIONING")
	if err := c.env.Service.Delete(t.Context(), w.ID); err != nil {
		t.Fatal(err)
	}
	waitFor("the workspace was deleted")
	select {
	case code := <-done:
		if code != 0 {
			t.Fatalf("logs -f: exit %d: %s", code, stderr.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("logs -f did not end after the workspace was deleted")
	}
}

// "ws prebuild" asks for a prebuild as an administrator and lists the
// template's prebuilds; a user is refused, and an unknown template or one
// without prebuilds is said so.
func TestWsPrebuild(t *testing.T) {
	cfg := config.Default()
	def := "file:///srv/git/web.git"
	cfg.Templates = []*config.Template{
		{Name: "web", RepositoryParameter: "repo", Parameters: []*config.Parameter{{Name: "repo", Default: &def}},
			Prebuild: &config.Prebuild{Init: []string{"npm ci"}, Keep: 2}},
		{Name: "plain"},
	}
	c := &cliTest{t: t, env: apitest.New(t, apitest.Config{Templates: cfg}), config: t.TempDir()}
	t.Setenv("XDG_CONFIG_HOME", c.config)
	t.Setenv("CODEHUB_TOKEN", "")
	t.Setenv("CODEHUB_URL", "")

	c.loginAs(c.env.CreateUser("bob", false), "read-write")
	if r := c.expect(exitRefused, "", "ws", "prebuild", "web"); !strings.Contains(r.stderr, "administrator") {
		t.Errorf("a user's prebuild: %s", r.stderr)
	}
	root := c.env.CreateUser("root", true)
	secret := c.env.Token(root, map[string]any{"name": "cli test", "scope": "read-write", "admin": true})
	c.must(secret+"\n", "login", "-token-stdin", c.env.URL)
	r := c.must("", "ws", "prebuild", "web")
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if !strings.Contains(lines[0], "asked for") || !strings.HasPrefix(lines[2], "ID") || !strings.Contains(lines[3], "REQUESTED") || len(lines) != 4 {
		t.Fatalf("prebuild said:\n%s", r.stdout)
	}
	again := c.must("", "ws", "prebuild", "web", "-json")
	var p prebuildInfo
	if err := json.Unmarshal([]byte(again.stdout), &p); err != nil || p.Status != "REQUESTED" || !strings.Contains(lines[0], p.ID) {
		t.Errorf("a second request is the first: %v %s", err, again.stdout)
	}
	c.expect(exitNotFound, "", "ws", "prebuild", "nope")
	if r := c.expect(exitRefused, "", "ws", "prebuild", "plain"); !strings.Contains(r.stderr, "no prebuild block") {
		t.Errorf("a template without prebuilds: %s", r.stderr)
	}
}

// "ws create -template T -param name=value" makes a workspace of T with
// those values, typed as the template's parameters are; a value of the
// wrong type is refused before anything is asked of the server.
func TestWsCreateFromTemplate(t *testing.T) {
	cfg := config.Default()
	def, size, fast := "file:///srv/git/web.git", "2", "false"
	cfg.Templates = []*config.Template{
		{Name: "web", RepositoryParameter: "repo", Parameters: []*config.Parameter{
			{Name: "repo", Default: &def},
			{Name: "replicas", Type: config.ParamNumber, Default: &size},
			{Name: "fast", Type: config.ParamBool, Default: &fast},
		}},
	}
	c := &cliTest{t: t, env: apitest.New(t, apitest.Config{Templates: cfg}), config: t.TempDir()}
	t.Setenv("XDG_CONFIG_HOME", c.config)
	t.Setenv("CODEHUB_TOKEN", "")
	t.Setenv("CODEHUB_URL", "")
	c.loginAs(c.env.CreateUser("bob", false), "read-write")

	r := c.must("", "ws", "create", "site", "-template", "web", "-param", "replicas=3", "-param", "fast=true", "-param", "repo=file:///srv/git/site.git", "-json")
	var ws struct {
		Template   string         `json:"template"`
		Parameters map[string]any `json:"parameters"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &ws); err != nil {
		t.Fatal(err)
	}
	if ws.Template != "web" || ws.Parameters["replicas"] != 3.0 || ws.Parameters["fast"] != true || ws.Parameters["repo"] != "file:///srv/git/site.git" {
		t.Fatalf("created %s", r.stdout)
	}
	if r := c.expect(exitUsage, "", "ws", "create", "other", "-template", "web", "-param", "replicas=many"); !strings.Contains(r.stderr, "not a number") {
		t.Errorf("a word for a number: %s", r.stderr)
	}
	if r := c.expect(exitRefused, "", "ws", "create", "other", "-template", "web", "-param", "colour=red"); !strings.Contains(r.stderr, "colour") {
		t.Errorf("an unknown parameter: %s", r.stderr)
	}
	c.expect(exitUsage, "", "ws", "create", "other", "-param", "novalue")
}
