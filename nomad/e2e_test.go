package nomad

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/nomad/api"
	"github.com/minio/minio-go/v7"

	"github.com/codehub-io/codehub/config"
	"github.com/codehub-io/codehub/controller"
	"github.com/codehub-io/codehub/internal/backendtest"
	"github.com/codehub-io/codehub/internal/nomadtest"
	"github.com/codehub-io/codehub/internal/testenv"
	"github.com/codehub-io/codehub/jobspecs"
	"github.com/codehub-io/codehub/workspace"
)

// e2eConfig is what a Nomad end-to-end test's configuration file says;
// the zero value runs the test workspace program from bins under raw_exec
// and codehub from bins for archive and restore jobs.
type e2eConfig struct {
	driver  string // default raw_exec
	command string // default bins/wsserver
	args    []string
	// codehubPath is backend.nomad.codehub_path, default bins/codehub;
	// "-" leaves it empty, so batch jobs fetch publicURL/dl/codehub with
	// artifactChecksum.
	codehubPath      string
	publicURL        string
	artifactChecksum string
	datacenters      []string
	// upstreamToken, when set, turns on upstream_auth = "code-server" and
	// is what the server derives each workspace's token with.
	upstreamToken func(workspaceID, runID string) string
	uid, gid      int // default this process's
	cpu, memory   int // default 100 MHz, 64 MiB
	s3            testenv.S3
	client        *api.Client // default the agent's
	// jobspecsDir is jobspecs.dir, the operator's templates; default none.
	jobspecsDir string
}

// e2eBackend builds the backend the way `codehub server` does: the settings
// are written as an HCL configuration file, which config.Load reads and
// validates (backendtest.LoadConfig) and OptionsFromConfig maps, over a
// real agent.
func e2eBackend(t testing.TB, a *nomadtest.Agent, bins string, c e2eConfig) *Backend {
	t.Helper()
	if c.driver == "" {
		c.driver = DriverRawExec
	}
	if c.command == "" {
		c.command = filepath.Join(bins, "wsserver")
	}
	if c.args == nil {
		c.args = []string{"-listen", "127.0.0.1:%PORT%", "-home", "%HOME%"}
	}
	switch c.codehubPath {
	case "":
		c.codehubPath = filepath.Join(bins, "codehub")
	case "-":
		c.codehubPath = ""
	}
	if c.publicURL == "" {
		c.publicURL = "http://127.0.0.1:8080"
	}
	if c.datacenters == nil {
		c.datacenters = []string{"*"}
	}
	if c.uid == 0 && c.gid == 0 {
		c.uid, c.gid = os.Getuid(), os.Getgid()
	}
	if c.cpu == 0 {
		c.cpu, c.memory = 100, 64
	}
	if c.s3.Endpoint == "" {
		// Tests that never archive: a valid configuration reaching nothing.
		c.s3 = testenv.S3{Endpoint: "127.0.0.1:9", Bucket: "unused", Region: "us-east-1", AccessKey: "unused", SecretKey: "unused"}
	}
	auth := config.UpstreamAuthNone
	if c.upstreamToken != nil {
		auth = config.UpstreamAuthCodeServer
	}
	cfg := backendtest.LoadConfig(t, c.s3, fmt.Sprintf(`public_url = %q
backend "nomad" {
  address      = %q
  driver       = %q
  datacenters  = %s
  codehub_path = %q
}
workspace {
  command       = %q
  args          = %s
  upstream_auth = %q
  uid           = %d
  gid           = %d
  cpu           = %d
  memory        = %d
}
`, c.publicURL, a.Addr, c.driver, hclStrings(c.datacenters), c.codehubPath,
		c.command, hclStrings(c.args), auth, c.uid, c.gid, c.cpu, c.memory)+
		fmt.Sprintf("jobspecs {\n  dir = %q\n}\n", c.jobspecsDir))
	opts, err := OptionsFromConfig(cfg, c.artifactChecksum)
	if err != nil {
		t.Fatal(err)
	}
	opts.UpstreamToken = c.upstreamToken
	r, err := jobspecs.NewRenderer(cfg.Jobspecs.Dir)
	if err != nil {
		t.Fatal(err)
	}
	client := c.client
	if client == nil {
		client = a.Client
	}
	logger := hclog.New(&hclog.LoggerOptions{Name: "nomad-e2e", Level: hclog.Debug, Output: io.Discard})
	return New(logger, client, opts, r)
}

// hclStrings writes a list of strings as HCL, each a JSON string: HCL
// reads those the same, and %PORT% and %HOME% need no escaping.
func hclStrings(items []string) string {
	b, err := json.Marshal(items)
	if err != nil {
		panic(err)
	}
	return string(b)
}

func observeUntil(t *testing.T, b *Backend, wsID, what string, cond func(controller.Observed) bool) controller.Observed {
	t.Helper()
	var last controller.Observed
	nomadtest.Eventually(t, 90*time.Second, what, func() bool {
		snap, err := b.Observe(t.Context())
		if err != nil {
			t.Logf("observe: %v", err)
			return false
		}
		last = snap.Workspaces[wsID]
		return cond(last)
	})
	return last
}

func TestE2EBackendLifecycle(t *testing.T) {
	nomadtest.Binary(t)
	s3 := testenv.NewS3(t)
	bins := t.TempDir()
	nomadtest.BuildProgram(t, bins, "./testdata/wsserver", "wsserver")
	nomadtest.BuildProgram(t, bins, "../cmd/codehub", "codehub")
	a := nomadtest.Start(t, "")
	upstreamToken := func(id, run string) string { return "tok-" + id + "-" + run }
	b := e2eBackend(t, a, bins, e2eConfig{s3: s3, upstreamToken: upstreamToken})
	ctx := t.Context()
	const wsID = "01jb3x7k9q2m5n8p4r6s0t1v2w"
	token := upstreamToken(wsID, "run1")

	// PROVISIONING: a volume owned by the workspace user.
	if err := b.ProvisionVolume(ctx, controller.VolumeSpec{WorkspaceID: wsID, UID: os.Getuid(), GID: os.Getgid()}); err != nil {
		t.Fatal(err)
	}
	observeUntil(t, b, wsID, "volume ready", func(o controller.Observed) bool { return o.VolumeReady })
	home, err := b.HomeDir(ctx, wsID)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(home, a.HostVolumesDir) {
		t.Fatalf("home %q is not under the agent's host volumes dir %q", home, a.HostVolumesDir)
	}

	// STARTING: the service registers before the program listens; ready
	// means the check passes.
	spec := controller.WorkspaceSpec{WorkspaceID: wsID, RunID: "run1", OwnerID: "01owner0000000000000000000"}
	if err := b.StartWorkspace(ctx, spec); err != nil {
		t.Fatal(err)
	}
	observeUntil(t, b, wsID, "upstream ready", func(o controller.Observed) bool { return o.UpstreamReady })
	resolver := NewServiceResolver(hclog.NewNullLogger(), a.Client, ResolverOptions{Namespace: "default"})
	addr, err := resolver.Resolve(ctx, wsID)
	if err != nil {
		t.Fatal(err)
	}
	content := make([]byte, 64<<10)
	if _, err := rand.Read(content); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(home, "notes.bin"), content, 0o600); err != nil {
		t.Fatal(err)
	}
	// The program got its token from the variable, not from the job source.
	marker := "http://" + addr + "/files/.wsserver-started"
	if code, _ := get(t, marker, ""); code != http.StatusUnauthorized {
		t.Fatalf("GET %s without the session cookie: %d, want 401", marker, code)
	}
	if code, _ := get(t, marker, "tok-wrong"); code != http.StatusUnauthorized {
		t.Fatalf("GET %s with a wrong session cookie: %d, want 401", marker, code)
	}
	fetchWithToken(t, marker, token)
	if src := submittedSource(t, b, jobID(wsID)); !strings.Contains(src, "nomadVar") || strings.Contains(src, token) {
		t.Fatalf("job source must read the token variable and never hold the token:\n%s", src)
	}
	if got := fetchWithToken(t, "http://"+addr+"/files/notes.bin", token); !bytes.Equal(got, content) {
		t.Fatal("workspace serves different bytes than written")
	}
	// Starting the same spec again registers nothing new.
	before := jobVersion(t, b, jobID(wsID))
	if err := b.StartWorkspace(ctx, spec); err != nil {
		t.Fatal(err)
	}
	if after := jobVersion(t, b, jobID(wsID)); after != before {
		t.Fatalf("unchanged start made job version %d -> %d", before, after)
	}
	// A new run replaces the running program: the new run's token opens
	// it once the replacement is up, and the old run's token never again.
	spec.RunID = "run2"
	if err := b.StartWorkspace(ctx, spec); err != nil {
		t.Fatal(err)
	}
	oldToken := token
	token = upstreamToken(wsID, "run2")
	deadline := time.Now().Add(2 * time.Minute)
	for {
		fresh := NewServiceResolver(hclog.NewNullLogger(), a.Client, ResolverOptions{Namespace: "default"})
		if addr, err = fresh.Resolve(ctx, wsID); err == nil {
			// The old program's port refuses connections while it goes.
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/files/.wsserver-started", nil)
			req.AddCookie(&http.Cookie{Name: "code-server-session", Value: token})
			var res *http.Response
			if res, err = http.DefaultClient.Do(req); err == nil {
				res.Body.Close()
				if res.StatusCode == http.StatusOK {
					break
				}
				err = fmt.Errorf("status %d", res.StatusCode)
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the new run never answered its token (last: %v)", err)
		}
		time.Sleep(250 * time.Millisecond)
	}
	if code, _ := get(t, "http://"+addr+"/files/.wsserver-started", oldToken); code != http.StatusUnauthorized {
		t.Fatalf("the previous run's token: %d, want 401", code)
	}
	if got := fetchWithToken(t, "http://"+addr+"/files/notes.bin", token); !bytes.Equal(got, content) {
		t.Fatal("the new run serves different bytes than written")
	}

	// STOPPING: deregistered without purge; done when no allocation is live.
	if err := b.StopWorkspace(ctx, wsID, controller.StopSave); err != nil {
		t.Fatal(err)
	}
	observeUntil(t, b, wsID, "container gone", func(o controller.Observed) bool { return !o.ContainerLive })
	if _, err := resolver.Resolve(ctx, wsID); err == nil {
		// The resolver's cache may hold the address briefly; a fresh one must not.
		fresh := NewServiceResolver(hclog.NewNullLogger(), a.Client, ResolverOptions{Namespace: "default"})
		if _, err := fresh.Resolve(ctx, wsID); !errors.Is(err, controller.ErrNoUpstream) {
			t.Fatalf("stopped workspace still resolves: %v", err)
		}
	}

	// ARCHIVING: the batch job reads S3 credentials from a Nomad Variable.
	opID := "01jb3xa00000000000000000op"
	key := "archives/" + wsID + "/" + opID + "/home.tar.zst"
	if err := b.SubmitArchive(ctx, controller.JobSpec{WorkspaceID: wsID, OpID: opID, ArchiveKey: key, Attempt: 1}); err != nil {
		t.Fatal(err)
	}
	o := observeUntil(t, b, wsID, "archive finished", func(o controller.Observed) bool {
		return o.Archive != nil && (o.Archive.Status == controller.JobSucceeded || o.Archive.Status == controller.JobFailed)
	})
	if o.Archive.Status != controller.JobSucceeded || o.Archive.OpID != opID || o.Archive.ArchiveKey != key || o.Archive.Attempt != 1 {
		t.Fatalf("archive result = %+v", o.Archive)
	}
	for _, k := range []string{key, key + ".meta"} {
		if _, err := s3.Client.StatObject(ctx, s3.Bucket, k, minio.StatObjectOptions{}); err != nil {
			t.Fatalf("archive object %s: %v", k, err)
		}
	}
	if err := b.PurgeJob(ctx, wsID, controller.JobArchive); err != nil {
		t.Fatal(err)
	}

	// ARCHIVED: the volume and its data are gone.
	deleteVolume(t, b, wsID)
	observeUntil(t, b, wsID, "volume gone", func(o controller.Observed) bool { return !o.VolumeExists && o.Archive == nil })
	if _, err := os.Stat(home); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("volume directory still there: %v", err)
	}

	// A restore of a missing archive fails with the job's CODEHUB_ERROR.
	if err := b.ProvisionVolume(ctx, controller.VolumeSpec{WorkspaceID: wsID, UID: os.Getuid(), GID: os.Getgid()}); err != nil {
		t.Fatal(err)
	}
	observeUntil(t, b, wsID, "new volume ready", func(o controller.Observed) bool { return o.VolumeReady })
	missing := controller.JobSpec{WorkspaceID: wsID, OpID: "01jb3xb00000000000000000op", ArchiveKey: "archives/" + wsID + "/none/home.tar.zst", Attempt: 1}
	if err := b.SubmitRestore(ctx, missing); err != nil {
		t.Fatal(err)
	}
	o = observeUntil(t, b, wsID, "failed restore", func(o controller.Observed) bool {
		return o.Restore != nil && o.Restore.Status == controller.JobFailed
	})
	if o.Restore.ErrorCode != "ARCHIVE_NOT_FOUND" || o.Restore.ExitCode == 0 {
		t.Fatalf("failed restore = %+v, want ARCHIVE_NOT_FOUND with a non-zero exit", o.Restore)
	}

	// RESTORING: a retry is a new attempt of the same job id; Nomad reruns it.
	if err := b.SubmitRestore(ctx, controller.JobSpec{WorkspaceID: wsID, OpID: opID, ArchiveKey: key, Attempt: 2}); err != nil {
		t.Fatal(err)
	}
	o = observeUntil(t, b, wsID, "restore finished", func(o controller.Observed) bool {
		return o.Restore != nil && o.Restore.Attempt == 2 && (o.Restore.Status == controller.JobSucceeded || o.Restore.Status == controller.JobFailed)
	})
	if o.Restore.Status != controller.JobSucceeded {
		t.Fatalf("restore result = %+v", o.Restore)
	}
	if err := b.PurgeJob(ctx, wsID, controller.JobRestore); err != nil {
		t.Fatal(err)
	}

	// RUNNING again, serving the restored file byte for byte.
	if err := b.StartWorkspace(ctx, spec); err != nil {
		t.Fatal(err)
	}
	observeUntil(t, b, wsID, "upstream ready again", func(o controller.Observed) bool { return o.UpstreamReady })
	addr, err = NewServiceResolver(hclog.NewNullLogger(), a.Client, ResolverOptions{Namespace: "default"}).Resolve(ctx, wsID)
	if err != nil {
		t.Fatal(err)
	}
	if got := fetchWithToken(t, "http://"+addr+"/files/notes.bin", token); !bytes.Equal(got, content) {
		t.Fatal("restored file differs from the archived one")
	}

	// DELETING: container first, then the volume.
	if err := b.StopWorkspace(ctx, wsID, controller.StopSave); err != nil {
		t.Fatal(err)
	}
	observeUntil(t, b, wsID, "container gone before delete", func(o controller.Observed) bool { return !o.ContainerLive })
	tokenVar := variablePath(jobID(wsID))
	v, _, err := a.Client.Variables().Read(tokenVar, b.query(ctx))
	if err != nil {
		t.Fatalf("read %s before purge: %v", tokenVar, err)
	}
	if v.Items["token"] != token {
		t.Fatalf("variable %s items = %v, want the workspace's token", tokenVar, v.Items)
	}
	if err := b.PurgeJob(ctx, wsID, controller.JobWorkspace); err != nil {
		t.Fatal(err)
	}
	if _, _, err := a.Client.Variables().Read(tokenVar, b.query(ctx)); !errors.Is(err, api.ErrVariablePathNotFound) {
		t.Fatalf("read %s after purge: %v, want not found", tokenVar, err)
	}
	deleteVolume(t, b, wsID)
	assertGone(t, b, wsID)
}

// assertGone fails unless nothing of the workspace is observed any more.
func assertGone(t *testing.T, b *Backend, wsID string) {
	t.Helper()
	snap, err := b.Observe(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if o, ok := snap.Workspaces[wsID]; ok && (o.VolumeExists || o.ContainerLive || o.Archive != nil || o.Restore != nil) {
		t.Fatalf("deleted workspace still observed: %+v", o)
	}
}

// deleteVolume retries while Nomad still counts a claim.
func deleteVolume(t *testing.T, b *Backend, wsID string) {
	t.Helper()
	nomadtest.Eventually(t, 60*time.Second, "volume delete accepted", func() bool {
		o, err := b.Observe(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		err = b.DeleteVolume(t.Context(), wsID, o.Workspaces[wsID].VolumeID)
		if errors.Is(err, controller.ErrVolumeInUse) {
			return false
		}
		if err != nil {
			t.Fatal(err)
		}
		return true
	})
}

func jobVersion(t *testing.T, b *Backend, id string) uint64 {
	t.Helper()
	job, _, err := b.client.Jobs().Info(id, b.query(t.Context()))
	if err != nil {
		t.Fatal(err)
	}
	return *job.Version
}

func fetch(t *testing.T, url string) []byte {
	t.Helper()
	return fetchWithToken(t, url, "")
}

// fetchWithToken is fetch sending token as code-server's session cookie.
func fetchWithToken(t *testing.T, url, token string) []byte {
	t.Helper()
	code, body := get(t, url, token)
	if code != http.StatusOK {
		t.Fatalf("GET %s: %d %s", url, code, body)
	}
	return body
}

// get requests url, with the session cookie when token is not empty, and
// returns the status and body.
func get(t *testing.T, url, token string) (int, []byte) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.AddCookie(&http.Cookie{Name: "code-server-session", Value: token})
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, b
}

// submittedSource is the HCL the current version of job id was registered from.
func submittedSource(t *testing.T, b *Backend, id string) string {
	t.Helper()
	sub, _, err := b.client.Jobs().Submission(id, int(jobVersion(t, b, id)), b.query(t.Context()))
	if err != nil {
		t.Fatal(err)
	}
	return sub.Source
}

// TestE2EUnschedulable: a workspace whose driver no node has is reported
// as unschedulable, naming the constraint, from Nomad's own evaluation.
func TestE2EUnschedulable(t *testing.T) {
	nomadtest.Binary(t)
	a := nomadtest.Start(t, "")
	r, err := jobspecs.NewRenderer("")
	if err != nil {
		t.Fatal(err)
	}
	opts := Options{
		Driver:    DriverDocker,
		Workspace: WorkspaceOptions{Image: "example.invalid/none:1", Port: 8080, UID: 1000, GID: 1000, CPU: 100, Memory: 64},
	}
	b := New(hclog.NewNullLogger(), a.Client, opts, r)
	const wsID = "01jb3x7k9q2m5n8p4r6s0t1zzz"
	if err := b.ProvisionVolume(t.Context(), controller.VolumeSpec{WorkspaceID: wsID, UID: 1000, GID: 1000}); err != nil {
		t.Fatal(err)
	}
	observeUntil(t, b, wsID, "volume ready", func(o controller.Observed) bool { return o.VolumeReady })
	if err := b.StartWorkspace(t.Context(), controller.WorkspaceSpec{WorkspaceID: wsID}); err != nil {
		t.Fatal(err)
	}
	o := observeUntil(t, b, wsID, "placement failure", func(o controller.Observed) bool { return o.Failure != nil })
	if o.Failure.Reason != workspace.ReasonUnschedulable || o.Failure.Terminal || !strings.Contains(o.Failure.Message, "missing drivers") {
		t.Fatalf("failure = %+v, want Unschedulable naming the missing driver", o.Failure)
	}
	if o.ContainerLive {
		t.Fatal("an unplaced job counts as a live container")
	}
	raw, _ := json.Marshal(o.Failure)
	t.Logf("placement failure: %s", raw)
}
