package e2e

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/hashicorp/nomad/api"

	"github.com/codehub-io/codehub/internal/nomadtest"
	"github.com/codehub-io/codehub/internal/testenv"
)

type apiPrebuild struct {
	ID, Template, Version, Status, Error string
	WorkspaceID                          *string `json:"workspace_id"`
	ArchiveKey                           *string `json:"archive_key"`
	Commit                               *string
}

type apiTemplateUsage struct {
	Prebuilds []apiPrebuild
}

// prebuilds lists the prebuilds of template, newest first.
func (c *apiClient) prebuilds(template string) []apiPrebuild {
	c.tb.Helper()
	var u apiTemplateUsage
	if code := c.do("GET", "/api/v1/admin/templates", nil, &u); code != http.StatusOK {
		c.tb.Fatalf("admin templates: %d", code)
	}
	var out []apiPrebuild
	for _, p := range u.Prebuilds {
		if p.Template == template {
			out = append(out, p)
		}
	}
	return out
}

// awaitPrebuild waits until prebuild id (the newest one when id is empty)
// of template is READY or FAILED, and returns it.
func awaitPrebuild(t testing.TB, c *apiClient, template, id string, within time.Duration) apiPrebuild {
	t.Helper()
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		for _, p := range c.prebuilds(template) {
			if (id == "" || p.ID == id) && (p.Status == "READY" || p.Status == "FAILED") {
				return p
			}
			if id == "" {
				break
			}
		}
		time.Sleep(500 * time.Millisecond)
	}
	t.Fatalf("prebuild %q of %s not done within %s: %+v", id, template, within, c.prebuilds(template))
	return apiPrebuild{}
}

type prebuildWorkspace struct {
	ID           string  `json:"id"`
	FromPrebuild *string `json:"from_prebuild"`
}

func (c *apiClient) createFrom(name, template string, params map[string]any) prebuildWorkspace {
	c.tb.Helper()
	var ws prebuildWorkspace
	body := map[string]any{"name": name, "template": template}
	if params != nil {
		body["parameters"] = params
	}
	if code := c.do("POST", "/api/v1/workspaces", body, &ws); code != http.StatusCreated {
		c.tb.Fatalf("create %s: %d", name, code)
	}
	return ws
}

// prebuildTemplate is a template whose prebuild runs the repository's own
// build script, so that a commit can break it.
func prebuildTemplate(repo string) string {
	return fmt.Sprintf(`template "service" {
  repository_parameter = "repo"
  parameter "repo" {
    default = %q
  }
  prebuild {
    init = ["sh ./build.sh"]
  }
}
`, repo)
}

const buildScript = "#!/bin/sh\nset -e\ngit rev-parse HEAD > built-at\necho built\n"

// gitHead is the commit checked out in dir.
func gitHead(t *testing.T, dir string) string {
	t.Helper()
	// The home may belong to the workspace user, not to this process.
	out, err := exec.Command("git", "-c", "safe.directory=*", "-C", dir, "rev-parse", "HEAD").Output()
	if err != nil {
		t.Fatalf("git rev-parse in %s: %v", dir, err)
	}
	return strings.TrimSpace(string(out))
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// TestPrebuiltHomes takes a template with a prebuild through what users
// and admins see, on the single-machine backend, from an HCL file: the
// prebuild runs by itself and is listed READY; a new workspace with the
// default parameters starts from it, with init's output there and its
// checkout fast-forwarded to a commit pushed after the prebuild; other
// parameters clone and run init at the first start; an admin's rebuild
// that fails says why and leaves the last good prebuild in use.
func TestPrebuiltHomes(t *testing.T) {
	cfg := localConfig(t)
	srv, first := prebuiltHomes(t, cfg, func(srv *server) func(string) string {
		return func(id string) string { return filepath.Join(srv.dataDir, "volumes", "ws-"+id+"-home") }
	})

	// The admin page lists the prebuilds, the failed one with its
	// reason, and builds one more on a click.
	chromium := program(t, envChromium, "/usr/bin/chromium", "Chromium", "apt-get install chromium")
	b := newBrowser(t, chromium, srv)
	b.step("log in", b.logIn(srv.url+"/", "app-view"))
	rows := `[...document.querySelectorAll('#prebuilds-body tr[data-prebuild]')]`
	b.step("the templates page lists the prebuilds", func(ctx context.Context) error {
		if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS(`#admin-nav a[href="/admin/templates"]`)), chromedp.WaitVisible(chromedp.ID("admin-templates"))); err != nil {
			return err
		}
		return b.waitJS(ctx, 30*time.Second, rows+`.some(r => r.cells[3].textContent === "READY" && r.cells[2].title === `+strconv.Quote(*first.Commit)+` && r.cells[2].textContent.length === 12) &&
			`+rows+`.some(r => r.cells[3].textContent === "FAILED" && r.cells[7].title.includes("the build is broken"))`)
	})
	t.Logf("templates page: %s", b.screenshot("templates page"))
	b.step("build one now", func(ctx context.Context) error {
		if _, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`document.querySelector('#prebuilds-body tr[data-template="service"] button').click() || true`)); err != nil {
			return err
		}
		return b.waitJS(ctx, 30*time.Second, rows+`.some(r => ["REQUESTED", "BUILDING"].includes(r.cells[3].textContent) && r.cells[4].textContent.includes("by admin"))`)
	})
}

// TestNomadPrebuiltHomes is TestPrebuiltHomes on a real Nomad agent under
// raw_exec: each prebuild is one batch job, the builder's archive job,
// whose build task clones and runs init before its archive task saves
// the home (the builder never has a workspace job), and the new
// workspace's restore job fills its volume.
func TestNomadPrebuiltHomes(t *testing.T) {
	agent := nomadtest.Start(t, "")
	cfg := nomadConfig(t, agent)
	_, first := prebuiltHomes(t, cfg, func(*server) func(string) string {
		return func(id string) string { return volumePath(t, agent, id) }
	})
	noWorkspaceJob(t, agent, *first.WorkspaceID)
}

// noWorkspaceJob fails unless Nomad never had a workspace job of builder:
// its prebuild ran as its archive job alone.
func noWorkspaceJob(t *testing.T, agent *nomadtest.Agent, builder string) {
	t.Helper()
	_, _, err := agent.Client.Jobs().Info("ws-"+builder, nil)
	var value api.UnexpectedResponseError
	var pointer *api.UnexpectedResponseError
	notFound := errors.As(err, &value) && value.StatusCode() == http.StatusNotFound ||
		errors.As(err, &pointer) && pointer.StatusCode() == http.StatusNotFound
	if !notFound {
		t.Errorf("the builder %s has a workspace job (%v): its prebuild should be its archive job alone", builder, err)
	}
}

// prebuiltHomes runs the prebuild scenario on the server cfg describes;
// homeOf gives where a workspace's home is on this machine. It returns
// the server and the first prebuild.
func prebuiltHomes(t *testing.T, cfg serverConfig, homeOf func(*server) func(string) string) (*server, apiPrebuild) {
	return prebuiltHomesFrom(t, cfg, homeOf, func(url string) string { return url })
}

// prebuiltHomesFrom is prebuiltHomes with the repositories reached at
// serve's URL for each bare repository's file URL.
func prebuiltHomesFrom(t *testing.T, cfg serverConfig, homeOf func(*server) func(string) string, serve func(string) string) (*server, apiPrebuild) {
	bare := testenv.BareRepo(t, "service", map[string]string{"README": "v1", "build.sh": buildScript})
	repo := serve(bare)
	cfg.maxRunning = 3
	cfg.workspace += prebuildTemplate(repo)
	srv := startServer(t, cfg)
	c := login(t, srv)
	home := homeOf(srv)

	began := time.Now()
	first := awaitPrebuild(t, c, "service", "", 3*time.Minute)
	if first.Status != "READY" || first.ArchiveKey == nil {
		t.Fatalf("first prebuild: %+v", first)
	}
	// It records the commit it built, which its archive's key names with
	// the template and its version.
	commit := gitHead(t, strings.TrimPrefix(bare, "file://"))
	if first.Commit == nil || *first.Commit != commit ||
		!strings.HasSuffix(*first.ArchiveKey, "/service/"+first.Version+"/"+commit+"/home.tar.zst") {
		t.Fatalf("first prebuild: commit %v and key %s, want the commit %s named in the key", first.Commit, *first.ArchiveKey, commit)
	}
	t.Logf("prebuild %s ready after %s: %s", first.ID, time.Since(began).Round(time.Millisecond), *first.ArchiveKey)
	built := testenv.PushCommit(t, bare, map[string]string{"NEWS": "after the prebuild"})

	ws := c.createFrom("prebuilt", "service", nil)
	if ws.FromPrebuild == nil || *ws.FromPrebuild != first.ID {
		t.Fatalf("a workspace with the defaults did not start from prebuild %s: %+v", first.ID, ws)
	}
	c.settle(ws.ID, "RUNNING", time.Now())
	checkout := filepath.Join(home(ws.ID), "service")
	if head := gitHead(t, checkout); head != built {
		t.Errorf("checkout at %s, want the commit pushed after the prebuild %s", head, built)
	}
	if at := readFile(t, filepath.Join(checkout, "built-at")); at == built || at == "" {
		t.Errorf("init's output %q: want the prebuild's, made before %s", at, built)
	}
	if _, err := os.Stat(filepath.Join(home(ws.ID), ".codehub-prebuilt")); !os.IsNotExist(err) {
		t.Errorf("the prebuilt marker is still in the home: %v", err)
	}

	other := serve(testenv.BareRepo(t, "other", map[string]string{"build.sh": buildScript}))
	cold := c.createFrom("cold", "service", map[string]any{"repo": other})
	if cold.FromPrebuild != nil {
		t.Errorf("a workspace of other parameters started from a prebuild: %+v", cold)
	}
	c.settle(cold.ID, "RUNNING", time.Now())
	otherCheckout := filepath.Join(home(cold.ID), "other")
	if at := readFile(t, filepath.Join(otherCheckout, "built-at")); at != gitHead(t, otherCheckout) {
		t.Errorf("the cold start's init built %q", at)
	}

	// A commit breaks the build; the rebuild an admin asks for fails and
	// says why, and new workspaces keep starting from the last good one.
	testenv.PushCommit(t, bare, map[string]string{"build.sh": "#!/bin/sh\necho the build is broken >&2\nexit 7\n"})
	var req apiPrebuild
	if code := c.do("POST", "/api/v1/admin/templates/service/prebuilds", nil, &req); code != http.StatusAccepted || req.Status != "REQUESTED" {
		t.Fatalf("request a prebuild: %d %+v", code, req)
	}
	failed := awaitPrebuild(t, c, "service", req.ID, 3*time.Minute)
	if failed.Status != "FAILED" || !strings.Contains(failed.Error, "the build is broken") {
		t.Fatalf("the broken rebuild: %+v", failed)
	}
	t.Logf("the broken rebuild failed: %s", failed.Error)
	again := c.createFrom("still-prebuilt", "service", nil)
	if again.FromPrebuild == nil || *again.FromPrebuild != first.ID {
		t.Errorf("after a failed rebuild a workspace started from %v, want the last good %s", again.FromPrebuild, first.ID)
	}
	if code := c.do("POST", "/api/v1/admin/templates/nope/prebuilds", nil, nil); code != http.StatusNotFound {
		t.Errorf("a prebuild of an unknown template: %d", code)
	}
	return srv, first
}

// TestPrebuildSurvivesServerKill kills codehub (SIGKILL) while a prebuild
// builds and starts it again: the same build goes on to READY, with no
// second builder and nothing left over.
func TestPrebuildSurvivesServerKill(t *testing.T) {
	prebuildSurvivesServerKill(t, localConfig(t))
}

// TestNomadPrebuildSurvivesServerKill is TestPrebuildSurvivesServerKill on
// a real Nomad agent: the prebuild's job goes on in Nomad while codehub is
// down, and the restarted server reads its result.
func TestNomadPrebuildSurvivesServerKill(t *testing.T) {
	agent := nomadtest.Start(t, "")
	prebuildSurvivesServerKill(t, nomadConfig(t, agent))
}

func prebuildSurvivesServerKill(t *testing.T, cfg serverConfig) {
	repo := testenv.BareRepo(t, "service", map[string]string{"README": "v1", "build.sh": "#!/bin/sh\nsleep 4\n" + buildScript[len("#!/bin/sh\n"):]})
	cfg.workspace += prebuildTemplate(repo)
	srv := startServer(t, cfg)
	c := login(t, srv)
	var building apiPrebuild
	nomadtest.Eventually(t, time.Minute, "a prebuild building", func() bool {
		for _, p := range c.prebuilds("service") {
			if p.Status == "BUILDING" {
				building = p
				return true
			}
		}
		return false
	})
	srv.kill(t)
	t.Logf("killed codehub while prebuild %s builds", building.ID)
	srv.start(t)
	c = login(t, srv)
	done := awaitPrebuild(t, c, "service", building.ID, 3*time.Minute)
	if done.Status != "READY" || *done.WorkspaceID != *building.WorkspaceID {
		t.Fatalf("after the kill: %+v, was built by %s", done, *building.WorkspaceID)
	}
	if all := c.prebuilds("service"); len(all) != 1 {
		t.Errorf("prebuilds after the kill: %+v", all)
	}
	var page struct {
		Workspaces []struct {
			ID, Name string
		}
	}
	if code := c.do("GET", "/api/v1/admin/workspaces", nil, &page); code != http.StatusOK {
		t.Fatalf("admin workspaces: %d", code)
	}
	if len(page.Workspaces) != 1 || page.Workspaces[0].ID != *building.WorkspaceID {
		t.Errorf("workspaces after the kill: %+v, want only the builder %s", page.Workspaces, *building.WorkspaceID)
	}
}

type apiPoolLevel struct {
	Template             string
	Warm, Ready, Filling int
}

// pool is template's warm pool level.
func (c *apiClient) pool(template string) apiPoolLevel {
	c.tb.Helper()
	var u struct{ Pools []apiPoolLevel }
	if code := c.do("GET", "/api/v1/admin/templates", nil, &u); code != http.StatusOK {
		c.tb.Fatalf("admin templates: %d", code)
	}
	for _, p := range u.Pools {
		if p.Template == template {
			return p
		}
	}
	c.tb.Fatalf("no pool for %s in %+v", template, u.Pools)
	return apiPoolLevel{}
}

// warmHomes are the workspaces the admin list shows named as template's
// warm homes, by id, with the prebuild each holds ("" for none).
func (c *apiClient) warmHomes(template string) map[string]string {
	c.tb.Helper()
	var page struct {
		Workspaces []struct {
			ID, Name     string
			FromPrebuild *string `json:"from_prebuild"`
		}
	}
	if code := c.do("GET", "/api/v1/admin/workspaces", nil, &page); code != http.StatusOK {
		c.tb.Fatalf("admin workspaces: %d", code)
	}
	ids := map[string]string{}
	for _, w := range page.Workspaces {
		if strings.HasPrefix(w.Name, "warm-"+template+"-") {
			ids[w.ID] = ""
			if w.FromPrebuild != nil {
				ids[w.ID] = *w.FromPrebuild
			}
		}
	}
	return ids
}

// awaitWarm waits until template's pool holds two ready homes, all of
// prebuild id, and returns them.
func awaitWarm(t *testing.T, c *apiClient, template, id string) map[string]string {
	t.Helper()
	var homes map[string]string
	nomadtest.Eventually(t, 3*time.Minute, "two warm homes of prebuild "+id, func() bool {
		homes = c.warmHomes(template)
		for _, pb := range homes {
			if pb != id {
				return false
			}
		}
		return len(homes) == 2 && c.pool(template).Ready == 2
	})
	return homes
}

// TestWarmPool: a template keeping two warm homes fills its pool with the
// prebuilt home; a creation claims one (the workspace is that home, its
// checkout brought up to a commit pushed since) and the pool refills; a
// claim answered just before codehub is killed holds; a change of the
// template, made by restarting codehub with another configuration,
// builds again and replaces every warm home.
func TestWarmPool(t *testing.T) {
	warmPool(t, localConfig(t), func(srv *server) func(string) string {
		return func(id string) string { return filepath.Join(srv.dataDir, "volumes", "ws-"+id+"-home") }
	})
}

// TestNomadWarmPool is TestWarmPool on a real Nomad agent under raw_exec:
// the warm homes are volumes Nomad holds, filled by restore jobs, and a
// claim starts the workspace job on one.
func TestNomadWarmPool(t *testing.T) {
	agent := nomadtest.Start(t, "")
	warmPool(t, nomadConfig(t, agent), func(*server) func(string) string {
		return func(id string) string { return volumePath(t, agent, id) }
	})
}

func warmPool(t *testing.T, cfg serverConfig, homeOf func(*server) func(string) string) {
	repo := testenv.BareRepo(t, "service", map[string]string{"README": "v1", "build.sh": buildScript})
	cfg.maxRunning = 4
	cfg.workspace += strings.Replace(prebuildTemplate(repo), "  prebuild {", "  warm = 2\n  prebuild {", 1)
	srv := startServer(t, cfg)
	c := login(t, srv)
	home := homeOf(srv)
	first := awaitPrebuild(t, c, "service", "", 3*time.Minute)
	warm := awaitWarm(t, c, "service", first.ID)
	pushed := testenv.PushCommit(t, repo, map[string]string{"NEWS": "after the warm homes"})

	began := time.Now()
	ws := c.createFrom("claimed", "service", nil)
	took := c.settle(ws.ID, "RUNNING", began)
	if _, claimed := warm[ws.ID]; !claimed || ws.FromPrebuild == nil || *ws.FromPrebuild != first.ID {
		t.Fatalf("the new workspace %+v is not one of the warm homes %v of prebuild %s", ws, warm, first.ID)
	}
	t.Logf("create to RUNNING from a warm home: %s", took)
	checkout := filepath.Join(home(ws.ID), "service")
	if head := gitHead(t, checkout); head != pushed {
		t.Errorf("the claimed home's checkout at %s, want %s", head, pushed)
	}
	if at := readFile(t, filepath.Join(checkout, "built-at")); at == "" || at == pushed {
		t.Errorf("init's output in the claimed home: %q", at)
	}
	refilled := awaitWarm(t, c, "service", first.ID)
	if _, still := refilled[ws.ID]; still {
		t.Error("the claimed workspace is still a warm home")
	}

	// codehub is killed (SIGKILL) the moment a claim is answered: the
	// workspace is the user's, starts after the restart, and is no warm
	// home any more; the pool refills.
	killed := c.createFrom("claimed-then-killed", "service", nil)
	srv.kill(t)
	srv.start(t)
	c = login(t, srv)
	if _, claimed := refilled[killed.ID]; !claimed {
		t.Fatalf("%s is not one of the warm homes %v", killed.ID, refilled)
	}
	c.settle(killed.ID, "RUNNING", time.Now())
	if _, still := awaitWarm(t, c, "service", first.ID)[killed.ID]; still {
		t.Error("the workspace claimed before the kill is still a warm home")
	}

	// The template changes: a new version, a new prebuild, new warm homes.
	srv.stop()
	cfg.workspace = strings.Replace(cfg.workspace, `init = ["sh ./build.sh"]`, `init = ["sh ./build.sh", "echo v2 > version"]`, 1)
	if err := os.WriteFile(srv.cfgPath, []byte(renderConfig(srv, portOf(t, srv.url), cfg)), 0o600); err != nil {
		t.Fatal(err)
	}
	srv.start(t)
	c = login(t, srv)
	var second apiPrebuild
	nomadtest.Eventually(t, 3*time.Minute, "a prebuild of the new version", func() bool {
		ps := c.prebuilds("service")
		second = ps[0]
		return second.ID != first.ID && second.Status == "READY"
	})
	renewed := awaitWarm(t, c, "service", second.ID)
	again := c.createFrom("after-change", "service", nil)
	if _, claimed := renewed[again.ID]; !claimed || again.FromPrebuild == nil || *again.FromPrebuild != second.ID {
		t.Fatalf("after the change %+v is not a warm home of %s (%v)", again, second.ID, renewed)
	}
	c.settle(again.ID, "RUNNING", time.Now())
	if v := readFile(t, filepath.Join(home(again.ID), "service", "version")); v != "v2" {
		t.Errorf("the new version's init output: %q", v)
	}
}

// portOf is the port of a server's URL.
func portOf(t *testing.T, rawURL string) int {
	t.Helper()
	u, err := url.Parse(rawURL)
	if err != nil {
		t.Fatal(err)
	}
	p, err := strconv.Atoi(u.Port())
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestNomadDockerPrebuiltHomes is the prebuild scenario under the docker
// driver with the locally built code-server image: the builder's
// first-start task clones over HTTP and runs init in the image as the
// workspace user, and the homes move through the codehub job image's
// archive and restore jobs.
func TestNomadDockerPrebuiltHomes(t *testing.T) {
	cfg, agent, _ := dockerNomadConfig(t)
	_, first := prebuiltHomesFrom(t, cfg, func(*server) func(string) string {
		return func(id string) string { return volumePath(t, agent, id) }
	}, func(fileURL string) string { return serveRepo(t, fileURL) })
	noWorkspaceJob(t, agent, *first.WorkspaceID)
}

// serveRepo serves the bare repository at fileURL over git's dumb HTTP
// protocol on loopback (reachable from containers on the host network),
// keeping its info files current as commits are pushed, and returns its
// URL.
func serveRepo(t *testing.T, fileURL string) string {
	t.Helper()
	dir := strings.TrimPrefix(fileURL, "file://")
	hook := filepath.Join(dir, "hooks", "post-update")
	if err := os.WriteFile(hook, []byte("#!/bin/sh\nexec git update-server-info\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("git", "-C", dir, "update-server-info").CombinedOutput(); err != nil {
		t.Fatalf("git update-server-info: %v\n%s", err, out)
	}
	srv := httptest.NewServer(http.FileServer(http.Dir(filepath.Dir(dir))))
	t.Cleanup(srv.Close)
	return srv.URL + "/" + filepath.Base(dir)
}
