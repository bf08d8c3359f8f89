package e2e

import (
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"html"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"
	"github.com/minio/minio-go/v7"

	"github.com/codehub-io/codehub/internal/nomadtest"
)

// nomadConfig is a server whose workspaces run on a real Nomad dev agent
// under raw_exec, configured the way an operator writes it: the workspace
// program is the installed code-server with the example's arguments
// (bound to loopback here), and archive and restore jobs fetch codehub from
// the server's /dl/codehub. The dev agent runs without ACLs, which the
// server refuses unless told otherwise (aclOptOut).
func nomadConfig(t *testing.T, agent *nomadtest.Agent) serverConfig {
	cfg := localConfig(t)
	return nomadProgram(cfg, agent, cfg.codeServer, codeServerWorkspace)
}

// nomadProgram is cfg on agent under raw_exec, with command and the rest
// of the workspace block (settings) as the workspace's program.
func nomadProgram(cfg serverConfig, agent *nomadtest.Agent, command, settings string) serverConfig {
	cfg.backend = fmt.Sprintf(`backend "nomad" {
  address = %q
  driver  = "raw_exec"
`+aclOptOut+`}

workspace {
  command = %q
  %s
}
`, agent.Addr, command, settings)
	return cfg
}

// aclOptOut lets a server run on the tests' dev agents, which do not
// enforce ACLs; TestNomadServerRefusesClusterWithoutACLs starts one without
// it.
const aclOptOut = "  insecure_allow_no_acls = true\n"

// codeServerWorkspace is the workspace block's settings for code-server:
// the example configuration's arguments, bound to loopback for the test.
const codeServerWorkspace = `args = [
    "--bind-addr", "127.0.0.1:%PORT%",
    "--auth", "password",
    "--disable-telemetry",
    "--disable-update-check",
    "%HOME%",
  ]
  cpu    = 200
  memory = 1024`

// TestNomadWorkspaceLifecycle takes one workspace through its whole life on
// real Nomad under raw_exec, driven only through the REST API and the proxy
// of a server started from its configuration file, with the real
// code-server.
func TestNomadWorkspaceLifecycle(t *testing.T) {
	agent := nomadtest.Start(t, "")
	nomadLifecycle(t, agent, nomadConfig(t, agent), nomadDriver{
		// raw_exec cannot mount: the home is the volume's host path, which
		// a restore changes.
		home: func(t *testing.T, wsID string) string { return volumePath(t, agent, wsID) },
		write: func(t *testing.T, wsID, name string, content []byte) {
			if err := os.WriteFile(filepath.Join(volumePath(t, agent, wsID), name), content, 0o644); err != nil {
				t.Fatal(err)
			}
		},
	})
}

// nomadDriver is what differs between task drivers in the lifecycle test.
type nomadDriver struct {
	// home is the folder code-server must open.
	home func(t *testing.T, wsID string) string
	// write puts a file into the running workspace's home.
	write func(t *testing.T, wsID, name string, content []byte)
	// running, when set, checks a workspace after each start.
	running func(t *testing.T, wsID string)
	// restored, when set, checks a restored file on the volume.
	restored func(t *testing.T, path string)
}

// nomadLifecycle: create -> RUNNING -> workbench via /w/{id}/ -> a file in
// the home -> STANDBY -> woken by opening /w/{id}/ -> ARCHIVED (volume gone,
// archive in S3) -> RUNNING (file byte-identical, the workbench opens the
// home) -> DELETE (nothing left in Nomad, variables included).
func nomadLifecycle(t *testing.T, agent *nomadtest.Agent, cfg serverConfig, d nomadDriver) {
	srv := startServer(t, cfg)
	c := login(t, srv)
	var ws apiWorkspace
	if code := c.do("POST", "/api/v1/workspaces", map[string]string{"name": "nomad-e2e"}, &ws); code != http.StatusCreated {
		t.Fatalf("create: %d", code)
	}
	started := func() {
		t.Helper()
		c.settle(ws.ID, "RUNNING", time.Now())
		if d.running != nil {
			d.running(t, ws.ID)
		}
		openWorkbench(t, c, ws, d.home(t, ws.ID))
	}
	started()
	firstVolume := volumePath(t, agent, ws.ID)

	content := make([]byte, 256<<10)
	if _, err := rand.Read(content); err != nil {
		t.Fatal(err)
	}
	d.write(t, ws.ID, "notes.bin", content)

	c.setDesired(ws.ID, "STANDBY")
	c.settle(ws.ID, "STANDBY", time.Now())
	if jobRunning(t, agent, "ws-"+ws.ID) {
		t.Fatal("STANDBY workspace still has a running job")
	}
	// A person opening the workspace wakes it: the proxy answers with the
	// starting page and the workspace comes up with the same home.
	if code := navigate(t, c, ws.ID); code != http.StatusServiceUnavailable {
		t.Fatalf("opening a stopped workspace: %d, want the 503 starting page", code)
	}
	started()

	c.setDesired(ws.ID, "ARCHIVED")
	c.settle(ws.ID, "ARCHIVED", time.Now())
	if vols := volumes(t, agent, ws.ID); len(vols) != 0 {
		t.Fatalf("archived workspace still has volumes %v", vols)
	}
	if keys := archiveKeys(t, cfg, ws.ID); len(keys) == 0 {
		t.Fatal("no archive in S3 after ARCHIVED")
	}

	c.setDesired(ws.ID, "RUNNING")
	// code-server remembered the folder it showed before the archive; the
	// workbench must open the restored home.
	started()
	restored := filepath.Join(volumePath(t, agent, ws.ID), "notes.bin")
	if filepath.Dir(restored) == firstVolume {
		t.Fatalf("restore reused the volume path %s", firstVolume)
	}
	got, err := os.ReadFile(restored)
	if err != nil || !bytes.Equal(got, content) {
		t.Fatalf("restored file differs (read error %v, %d bytes)", err, len(got))
	}
	if d.restored != nil {
		d.restored(t, restored)
	}

	if code := c.do("DELETE", "/api/v1/workspaces/"+ws.ID, nil, nil); code != http.StatusNoContent {
		t.Fatalf("delete: %d", code)
	}
	nomadtest.Eventually(t, 3*time.Minute, "nothing of the workspace left in Nomad", func() bool {
		return len(jobs(t, agent, ws.ID)) == 0 && len(volumes(t, agent, ws.ID)) == 0 && len(variables(t, agent, ws.ID)) == 0
	})
	if code := c.do("GET", "/api/v1/workspaces/"+ws.ID, nil, nil); code != http.StatusNotFound {
		t.Fatalf("deleted workspace answers %d", code)
	}
}

// login is an API client holding the bootstrap admin's session.
func login(t testing.TB, srv *server) *apiClient {
	t.Helper()
	jar, err := cookiejar.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	c := &apiClient{tb: t, base: srv.url, http: &http.Client{Jar: jar, Timeout: 30 * time.Second}}
	if code := c.do("POST", "/api/v1/login", map[string]string{"username": "admin", "password": adminPassword}, nil); code != http.StatusOK {
		t.Fatalf("login: %d", code)
	}
	return c
}

// create makes a workspace named name with the defaults and returns its id.
func (c *apiClient) create(name string) string {
	c.tb.Helper()
	var ws apiWorkspace
	if code := c.do("POST", "/api/v1/workspaces", map[string]string{"name": name}, &ws); code != http.StatusCreated {
		c.tb.Fatalf("create %s: %d", name, code)
	}
	return ws.ID
}

func (c *apiClient) setDesired(id, desired string) {
	c.tb.Helper()
	if code := c.do("PATCH", "/api/v1/workspaces/"+id, map[string]string{"desired_state": desired}, nil); code != http.StatusOK {
		var ws apiWorkspace
		c.do("GET", "/api/v1/workspaces/"+id, nil, &ws)
		c.tb.Fatalf("set desired %s: %d; the workspace is now %+v", desired, code, ws)
	}
}

// browserGet requests a workspace path as a browser's top-level navigation
// does, without following redirects.
func browserGet(t *testing.T, c *apiClient, path string) *http.Response {
	t.Helper()
	req, err := http.NewRequest("GET", c.base+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Accept", "text/html,application/xhtml+xml")
	req.Header.Set("Sec-Fetch-Mode", "navigate")
	req.Header.Set("Sec-Fetch-Dest", "document")
	req.Header.Set("Sec-Fetch-Site", "none")
	client := *c.http
	client.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	return resp
}

func navigate(t *testing.T, c *apiClient, id string) int {
	t.Helper()
	resp := browserGet(t, c, "/w/"+id+"/")
	resp.Body.Close()
	return resp.StatusCode
}

// openWorkbench opens /w/{id}/ as a browser does: code-server redirects to
// the folder it opens, which must be home, and then serves the workbench,
// which the proxy titled with the workspace's name and gave its notice
// script.
func openWorkbench(t *testing.T, c *apiClient, ws apiWorkspace, home string) {
	t.Helper()
	id := ws.ID
	resp := browserGet(t, c, "/w/"+id+"/")
	resp.Body.Close()
	if resp.StatusCode != http.StatusFound {
		t.Fatalf("open /w/%s/: %d, want code-server's redirect to its folder", id, resp.StatusCode)
	}
	loc, err := url.Parse(resp.Header.Get("Location"))
	if err != nil {
		t.Fatal(err)
	}
	if folder := loc.Query().Get("folder"); folder != home {
		t.Fatalf("workbench opens folder %q, want the home %q", folder, home)
	}
	page := browserGet(t, c, "/w/"+id+"/"+strings.TrimPrefix(loc.String(), "./"))
	body, _ := io.ReadAll(page.Body)
	page.Body.Close()
	if page.StatusCode != http.StatusOK || !bytes.Contains(body, []byte("workbench")) {
		t.Fatalf("workbench page: %d\n%.400s", page.StatusCode, body)
	}
	title := html.EscapeString(`"window.title":"${dirty}${activeEditorShort}${separator}` + ws.Name + `"`)
	if !bytes.Contains(body, []byte(title)) || !bytes.Contains(body, []byte(`src="/w/`+id+`/_codehub/workbench.js"`)) {
		t.Fatalf("workbench page without the workspace's title or CodeHub's notice script:\n%s", body)
	}
}

func volumes(t testing.TB, agent *nomadtest.Agent, wsID string) []*api.HostVolumeStub {
	t.Helper()
	vols, _, err := agent.Client.HostVolumes().List(&api.HostVolumeListRequest{}, nil)
	if err != nil {
		t.Fatalf("list volumes: %v", err)
	}
	var out []*api.HostVolumeStub
	for _, v := range vols {
		if v.Name == "ws-"+wsID+"-home" {
			out = append(out, v)
		}
	}
	return out
}

// volumePath is the host path of the workspace's one ready home volume.
func volumePath(t testing.TB, agent *nomadtest.Agent, wsID string) string {
	t.Helper()
	vols := volumes(t, agent, wsID)
	if len(vols) != 1 {
		t.Fatalf("workspace has %d home volumes, want 1", len(vols))
	}
	v, _, err := agent.Client.HostVolumes().Get(vols[0].ID, nil)
	if err != nil {
		t.Fatalf("read volume: %v", err)
	}
	return v.HostPath
}

func jobs(t *testing.T, agent *nomadtest.Agent, wsID string) []*api.JobListStub {
	t.Helper()
	list, _, err := agent.Client.Jobs().List(&api.QueryOptions{Prefix: "ws-" + wsID})
	if err != nil {
		t.Fatalf("list jobs: %v", err)
	}
	return list
}

func jobRunning(t *testing.T, agent *nomadtest.Agent, id string) bool {
	t.Helper()
	for _, j := range jobs(t, agent, strings.TrimPrefix(id, "ws-")) {
		if j.ID == id && j.Status == "running" && !j.Stop {
			return true
		}
	}
	return false
}

func variables(t *testing.T, agent *nomadtest.Agent, wsID string) []*api.VariableMetadata {
	t.Helper()
	list, _, err := agent.Client.Variables().PrefixList("nomad/jobs/ws-"+wsID, nil)
	if err != nil {
		t.Fatalf("list variables: %v", err)
	}
	return list
}

func archiveKeys(t *testing.T, cfg serverConfig, wsID string) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var keys []string
	for o := range cfg.s3.Client.ListObjects(ctx, cfg.s3.Bucket, minio.ListObjectsOptions{Prefix: "archives/" + wsID + "/", Recursive: true}) {
		if o.Err != nil {
			t.Fatalf("list archives: %v", o.Err)
		}
		keys = append(keys, o.Key)
	}
	return keys
}
