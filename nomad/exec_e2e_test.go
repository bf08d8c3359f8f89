package nomad

import (
	"bytes"
	"crypto/rand"
	"errors"
	"net/http"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/nomad/api"
	"github.com/minio/minio-go/v7"

	"github.com/codehub-io/codehub/controller"
	"github.com/codehub-io/codehub/internal/nomadtest"
	"github.com/codehub-io/codehub/internal/testenv"
)

// buildStatic is buildProgram without cgo: a static binary needs no
// library from whatever the chroot holds.
func buildStatic(t *testing.T, dir, pkg, name string) string {
	t.Helper()
	out := filepath.Join(dir, name)
	cmd := exec.Command("go", "build", "-o", out, pkg)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build %s: %v\n%s", pkg, err, b)
	}
	return out
}

// logTaskEvents logs what Nomad reported for the tasks of job id, so a
// failed step shows the driver's own words.
func logTaskEvents(t *testing.T, a *nomadtest.Agent, id string) {
	t.Helper()
	allocs, _, err := a.Client.Jobs().Allocations(id, true, nil)
	if err != nil {
		t.Logf("allocations of %s: %v", id, err)
		return
	}
	for _, alloc := range allocs {
		for task, ts := range alloc.TaskStates {
			for _, ev := range ts.Events {
				t.Logf("%s alloc %s task %s: %s %s", id, alloc.ID[:8], task, ev.Type, ev.DisplayMessage)
			}
		}
	}
}

// TestE2EExecWorkspace runs the workspace lifecycle under the exec driver:
// the program in Nomad's chroot as nobody with the home volume mounted,
// the archive job fetching codehub as an artifact, the restore job running
// codehub from a path inside the chroot.
func TestE2EExecWorkspace(t *testing.T) {
	nomadtest.Binary(t)
	bins := t.TempDir()
	// The chroot copies directories with their modes; t.TempDir's 0700
	// would hide the programs from nobody.
	if err := os.Chmod(bins, 0o755); err != nil {
		t.Fatal(err)
	}
	a := nomadtest.Start(t, nomadtest.ExecChrootConfig(bins))
	nomadtest.SkipWithoutExec(t, a)
	uid, gid := nomadtest.ExecUser(t)
	s3 := testenv.NewS3(t)
	buildStatic(t, bins, "./testdata/wsserver", "wsserver")
	url, checksum := serveBinary(t, buildStatic(t, bins, "../cmd/codehub", "codehub"))
	upstreamToken := func(id, run string) string { return "tok-" + id + "-" + run }
	execConfig := e2eConfig{
		driver:           DriverExec,
		command:          path.Join(nomadtest.ExecBinDir, "wsserver"),
		codehubPath:      "-",
		publicURL:        strings.TrimSuffix(url, "/dl/codehub"),
		artifactChecksum: checksum,
		uid:              uid, gid: gid,
		upstreamToken: upstreamToken,
		s3:            s3,
	}
	b := e2eBackend(t, a, bins, execConfig)
	ctx := t.Context()
	const wsID = "01jb3x7k9q2m5n8p4r6s0texec"
	token := upstreamToken(wsID, "")
	spec := controller.WorkspaceSpec{WorkspaceID: wsID, OwnerID: "01owner0000000000000000000"}
	t.Cleanup(func() {
		if t.Failed() {
			logTaskEvents(t, a, jobID(wsID))
		}
	})

	hostHome := provisionExecHome(t, b, wsID, uid, gid)
	if home, err := b.HomeDir(ctx, wsID); err != nil || home != "/home/coder" {
		t.Fatalf("HomeDir = %q, %v: exec tasks see the home at the mount point", home, err)
	}
	content := make([]byte, 64<<10)
	if _, err := rand.Read(content); err != nil {
		t.Fatal(err)
	}
	writeOwned(t, filepath.Join(hostHome, "notes.bin"), content, uid, gid)

	addr := startExecWorkspace(t, a, b, spec)
	marker := "http://" + addr + "/files/.wsserver-started"
	if code, _ := get(t, marker, ""); code != http.StatusUnauthorized {
		t.Fatalf("GET %s without the session cookie: %d, want 401", marker, code)
	}
	fetchWithToken(t, marker, token)
	// The marker the program wrote at /home/coder is in the volume on the
	// host, owned by the user the task ran as.
	st, err := os.Stat(filepath.Join(hostHome, ".wsserver-started"))
	if err != nil {
		t.Fatalf("the program's marker is not in the volume: %v", err)
	}
	if fileUID(st) != uid {
		t.Fatalf("marker owned by uid %d, want %d (nobody)", fileUID(st), uid)
	}
	if got := fetchWithToken(t, "http://"+addr+"/files/notes.bin", token); !bytes.Equal(got, content) {
		t.Fatal("workspace serves different bytes than written")
	}
	stopExecWorkspace(t, b, wsID)

	// ARCHIVING with codehub downloaded into the task's chroot.
	opID := "01jb3xa0000000000000exec0p"
	key := "archives/" + wsID + "/" + opID + "/home.tar.zst"
	if err := b.SubmitArchive(ctx, controller.JobSpec{WorkspaceID: wsID, OpID: opID, ArchiveKey: key, Attempt: 1}); err != nil {
		t.Fatal(err)
	}
	o := observeUntil(t, b, wsID, "archive finished", func(o controller.Observed) bool { return finished(o.Archive) })
	if o.Archive.Status != controller.JobSucceeded || o.Archive.OpID != opID || o.Archive.ArchiveKey != key {
		logTaskEvents(t, a, controller.JobName(wsID, controller.JobArchive))
		t.Fatalf("archive result = %+v", o.Archive)
	}
	for _, k := range []string{key, key + ".meta"} {
		if _, err := s3.Client.StatObject(ctx, s3.Bucket, k, minio.StatObjectOptions{}); err != nil {
			t.Fatalf("archive object %s: %v", k, err)
		}
	}
	if !hasEvent(onlyAlloc(t, a, controller.JobName(wsID, controller.JobArchive)), api.TaskDownloadingArtifacts) {
		t.Fatal("the archive job ran without downloading its artifact")
	}
	if err := b.PurgeJob(ctx, wsID, controller.JobArchive); err != nil {
		t.Fatal(err)
	}
	deleteVolume(t, b, wsID)
	observeUntil(t, b, wsID, "volume gone", func(o controller.Observed) bool { return !o.VolumeExists })
	if _, err := os.Stat(hostHome); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("volume directory still there: %v", err)
	}

	// RESTORING with codehub at a path inside the chroot, into a new volume.
	atPath := execConfig
	atPath.codehubPath = path.Join(nomadtest.ExecBinDir, "codehub")
	pathBackend := e2eBackend(t, a, bins, atPath)
	hostHome = provisionExecHome(t, b, wsID, uid, gid)
	if err := pathBackend.SubmitRestore(ctx, controller.JobSpec{WorkspaceID: wsID, OpID: opID, ArchiveKey: key, Attempt: 1}); err != nil {
		t.Fatal(err)
	}
	o = observeUntil(t, b, wsID, "restore finished", func(o controller.Observed) bool { return finished(o.Restore) })
	if o.Restore.Status != controller.JobSucceeded {
		logTaskEvents(t, a, controller.JobName(wsID, controller.JobRestore))
		t.Fatalf("restore result = %+v", o.Restore)
	}
	if err := b.PurgeJob(ctx, wsID, controller.JobRestore); err != nil {
		t.Fatal(err)
	}
	st, err = os.Stat(filepath.Join(hostHome, "notes.bin"))
	if err != nil {
		t.Fatalf("restored file: %v", err)
	}
	if fileUID(st) != uid {
		t.Fatalf("restored file owned by uid %d, want %d (nobody)", fileUID(st), uid)
	}

	// RUNNING again on the restored home, then DELETING.
	addr = startExecWorkspace(t, a, b, spec)
	if got := fetchWithToken(t, "http://"+addr+"/files/notes.bin", token); !bytes.Equal(got, content) {
		t.Fatal("restored file differs from the archived one")
	}
	stopExecWorkspace(t, b, wsID)
	if err := b.PurgeJob(ctx, wsID, controller.JobWorkspace); err != nil {
		t.Fatal(err)
	}
	deleteVolume(t, b, wsID)
	assertGone(t, b, wsID)

	// The task holds no capabilities: a home owned by root stays closed to
	// it, so the program cannot write its marker and the start fails.
	// With the exec driver's default set (dac_override) it would start.
	const rootWS = "01jb3x7k9q2m5n8p4r6s0tdac0"
	provisionExecHome(t, b, rootWS, 0, 0)
	if err := b.StartWorkspace(ctx, controller.WorkspaceSpec{WorkspaceID: rootWS, OwnerID: spec.OwnerID}); err != nil {
		t.Fatal(err)
	}
	o = observeUntil(t, b, rootWS, "the start to end", func(o controller.Observed) bool { return o.Failure != nil || o.UpstreamReady })
	if o.UpstreamReady {
		t.Fatal("the task wrote into a root-owned home: exec tasks kept capabilities")
	}
	t.Logf("start on a root-owned home: %v", o.Failure)
	stopExecWorkspace(t, b, rootWS)
	if err := b.PurgeJob(ctx, rootWS, controller.JobWorkspace); err != nil {
		t.Fatal(err)
	}
	deleteVolume(t, b, rootWS)
}

// provisionExecHome provisions the home volume owned by the exec user and
// returns its directory on the host.
func provisionExecHome(t *testing.T, b *Backend, wsID string, uid, gid int) string {
	t.Helper()
	if err := b.ProvisionVolume(t.Context(), controller.VolumeSpec{WorkspaceID: wsID, UID: uid, GID: gid}); err != nil {
		t.Fatal(err)
	}
	observeUntil(t, b, wsID, "volume ready", func(o controller.Observed) bool { return o.VolumeReady })
	dir, err := b.hostPath(t.Context(), wsID)
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

// writeOwned writes a file into a home as its owner would have.
func writeOwned(t *testing.T, name string, content []byte, uid, gid int) {
	t.Helper()
	if err := os.WriteFile(name, content, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(name, uid, gid); err != nil {
		t.Fatal(err)
	}
}

// startExecWorkspace starts the workspace, waits until its check passes
// and returns the address its service resolves to.
func startExecWorkspace(t *testing.T, a *nomadtest.Agent, b *Backend, spec controller.WorkspaceSpec) string {
	t.Helper()
	if err := b.StartWorkspace(t.Context(), spec); err != nil {
		t.Fatal(err)
	}
	observeUntil(t, b, spec.WorkspaceID, "upstream ready", func(o controller.Observed) bool { return o.UpstreamReady })
	addr, err := NewServiceResolver(hclog.NewNullLogger(), a.Client, ResolverOptions{Namespace: "default"}).Resolve(t.Context(), spec.WorkspaceID)
	if err != nil {
		t.Fatal(err)
	}
	return addr
}

// stopExecWorkspace stops the workspace and waits until no allocation of
// it is live.
func stopExecWorkspace(t *testing.T, b *Backend, wsID string) {
	t.Helper()
	if err := b.StopWorkspace(t.Context(), wsID, controller.StopSave); err != nil {
		t.Fatal(err)
	}
	observeUntil(t, b, wsID, "workspace stopped", func(o controller.Observed) bool { return !o.ContainerLive })
}
