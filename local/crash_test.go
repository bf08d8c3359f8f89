package local

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/codehub-io/codehub/controller"
)

// A machine that loses power right after a start can come back with a
// state file that exists but is empty. That must cost at most the one
// workspace's stale state, never the observation of every workspace, and
// the workspace must start again.
func TestTornStateFilesDoNotBlindObserve(t *testing.T) {
	ctx := context.Background()
	const other = "01jb3x7k9q2m5n8p4r6s0t1v2x"
	b := newTestBackend(t, t.TempDir())
	b.opts.CodehubBinary = "/bin/true"
	stopOnCleanup(t, b)
	for _, id := range []string{testID, other} {
		if err := b.ProvisionVolume(ctx, controller.VolumeSpec{WorkspaceID: id}); err != nil {
			t.Fatalf("ProvisionVolume: %v", err)
		}
	}
	torn := []string{
		filepath.Join(b.workspaceDir(testID), stateFile),
		filepath.Join(b.batchDir(testID, controller.JobArchive), jobFile),
	}
	for _, path := range torn {
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}

	snap, err := b.Observe(ctx)
	if err != nil {
		t.Fatalf("Observe with a torn state file: %v", err)
	}
	if o := snap.Workspaces[other]; !o.VolumeReady {
		t.Fatalf("other workspace observed as %+v", o)
	}
	if o := snap.Workspaces[testID]; o.ContainerLive || o.Archive != nil {
		t.Fatalf("torn state observed as %+v", o)
	}

	if err := b.StartWorkspace(ctx, controller.WorkspaceSpec{WorkspaceID: testID}); err != nil {
		t.Fatalf("StartWorkspace over a torn state file: %v", err)
	}
	waitFor(t, b, "ready", func(o controller.Observed) bool { return o.UpstreamReady })
	if err := b.StopWorkspace(ctx, testID, controller.StopSave); err != nil {
		t.Fatalf("StopWorkspace: %v", err)
	}
	waitFor(t, b, "stopped", func(o controller.Observed) bool { return !o.ContainerLive })
	job := controller.JobSpec{WorkspaceID: testID, OpID: "op1", ArchiveKey: "archives/k", Attempt: 1}
	if err := b.SubmitArchive(ctx, job); err != nil {
		t.Fatalf("SubmitArchive over a torn job record: %v", err)
	}
	waitFor(t, b, "archived", func(o controller.Observed) bool {
		return o.Archive != nil && o.Archive.Status == controller.JobSucceeded
	})
}

// A process that left the workspace's process tree (a tmux server, a job
// disowned in a terminal that was closed) is still the workspace's: it
// must not keep running, in a home about to be archived or deleted, after
// the workspace stopped.
func TestStopKillsProcessesThatLeftTheTree(t *testing.T) {
	ctx := context.Background()
	b := newTestBackend(t, t.TempDir(), "--daemon")
	stopOnCleanup(t, b)
	provisionAndStart(ctx, t, b)
	waitFor(t, b, "ready", func(o controller.Observed) bool { return o.UpstreamReady })
	daemon := readPIDFile(t, filepath.Join(b.HomeDir(testID), "daemon.pid"))
	t.Cleanup(func() { _ = syscall.Kill(daemon, syscall.SIGKILL) })
	if st, err := readStat(daemon); err != nil || st.ppid == readState(t, b).Process.PID {
		t.Fatalf("daemon %d is not detached from the workspace: %+v, %v", daemon, st, err)
	}
	if err := b.StopWorkspace(ctx, testID, controller.StopSave); err != nil {
		t.Fatalf("StopWorkspace: %v", err)
	}
	waitGone(t, daemon, "detached process of the workspace survived the stop")
}

// The process group recorded for a launch outlives it only as a number:
// once the group is gone the kernel may hand that number to anyone's new
// group. Stopping a workspace whose process ended long ago must not kill
// whatever group carries the number now.
func TestStopLeavesAReusedProcessGroupAlone(t *testing.T) {
	ctx := context.Background()
	b := newTestBackend(t, t.TempDir())
	stranger := exec.Command("sleep", "60")
	stranger.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := stranger.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() {
		_ = stranger.Wait()
		close(exited)
	}()
	t.Cleanup(func() {
		_ = stranger.Process.Kill()
		<-exited
	})
	pid := stranger.Process.Pid
	st, err := readStat(pid)
	if err != nil {
		t.Fatal(err)
	}
	// The recorded launcher and its group had the numbers the stranger
	// has now; the start time tells the process apart, nothing the group.
	gone := workspaceState{
		Process: identity{PID: pid, StartTicks: st.startTicks - 1, BootID: b.bootID, PGID: pid},
		Port:    1,
	}
	if err := os.MkdirAll(b.workspaceDir(testID), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := writeJSON(filepath.Join(b.workspaceDir(testID), stateFile), gone); err != nil {
		t.Fatal(err)
	}
	if err := b.StopWorkspace(ctx, testID, controller.StopSave); err != nil {
		t.Fatalf("StopWorkspace: %v", err)
	}
	if err := b.PurgeJob(ctx, testID, controller.JobWorkspace); err != nil {
		t.Fatalf("PurgeJob: %v", err)
	}
	select {
	case <-exited:
		t.Fatalf("stopping a long-ended workspace killed process group %d of someone else", pid)
	case <-time.After(500 * time.Millisecond):
	}
}

// waitGone fails with what unless process pid ends within 10 s.
func waitGone(t *testing.T, pid int, what string) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); processRunning(pid); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s: %d", what, pid)
		}
	}
}

func readPIDFile(t *testing.T, path string) int {
	t.Helper()
	var raw []byte
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		var err error
		if raw, err = os.ReadFile(path); err == nil && len(strings.TrimSpace(string(raw))) > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no pid in %s", path)
		}
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(raw)))
	if err != nil {
		t.Fatalf("pid in %s: %v", path, err)
	}
	return pid
}

// Credentials codehub reads from its environment (its own CODEHUB_*
// settings and the Nomad and Consul tokens it takes as the ecosystem's
// tools do) never reach the workspace program and the terminals it opens.
func TestWorkspaceEnvironmentHoldsNoCodehubSecrets(t *testing.T) {
	ctx := context.Background()
	secrets := map[string]string{
		"CODEHUB_S3_SECRET_KEY": "s3-secret",
		"NOMAD_TOKEN":           "nomad-secret",
		"CONSUL_HTTP_TOKEN":     "consul-secret",
		"PASSWORD":              "password-secret",
	}
	for k, v := range secrets {
		t.Setenv(k, v)
	}
	b := newTestBackend(t, t.TempDir())
	stopOnCleanup(t, b)
	provisionAndStart(ctx, t, b)
	waitFor(t, b, "ready", func(o controller.Observed) bool { return o.UpstreamReady })
	addr, err := b.Resolve(ctx, testID)
	if err != nil {
		t.Fatalf("Resolve: %v", err)
	}
	env := get(t, "http://"+addr+"/env")
	if !strings.Contains(env, "\nHOME="+viewedHome(b, "workspace")+"\n") {
		t.Fatalf("workspace environment lacks its HOME:\n%s", env)
	}
	for k, v := range secrets {
		if strings.Contains(env, v) {
			t.Errorf("%s reached the workspace", k)
		}
	}
}

// When the workspace program dies on its own, what it left running must
// not outlive the home: deleting the volume ends it first.
func TestDeleteVolumeEndsWhatACrashedWorkspaceLeft(t *testing.T) {
	ctx := context.Background()
	b := newTestBackend(t, t.TempDir(), "--daemon")
	stopOnCleanup(t, b)
	provisionAndStart(ctx, t, b)
	waitFor(t, b, "ready", func(o controller.Observed) bool { return o.UpstreamReady })
	daemon := readPIDFile(t, filepath.Join(b.HomeDir(testID), "daemon.pid"))
	t.Cleanup(func() { _ = syscall.Kill(daemon, syscall.SIGKILL) })
	// The program crashes: its launcher and it die, the daemon does not.
	proc := readState(t, b).Process
	for _, pid := range append(collectTree(readProcs().children(), proc.PID), proc.PID) {
		if pid != daemon {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
	waitFor(t, b, "crashed", func(o controller.Observed) bool { return !o.ContainerLive })
	if !processRunning(daemon) {
		t.Fatal("the daemon died with the program; the test shows nothing")
	}
	if err := b.DeleteVolume(ctx, testID, ""); err != nil {
		t.Fatalf("DeleteVolume: %v", err)
	}
	waitGone(t, daemon, "process of the crashed workspace outlived its home")
}

// A crash of codehub between recording an attempt and starting its process
// leaves a pending record and no process. Submitting that attempt again
// must run it; otherwise it stays pending until the operation times out.
func TestPendingAttemptLeftByACrashIsStarted(t *testing.T) {
	ctx := context.Background()
	b := newTestBackend(t, t.TempDir())
	b.opts.CodehubBinary = "/bin/true"
	if err := b.ProvisionVolume(ctx, controller.VolumeSpec{WorkspaceID: testID}); err != nil {
		t.Fatalf("ProvisionVolume: %v", err)
	}
	job := controller.JobSpec{WorkspaceID: testID, OpID: "op1", ArchiveKey: "archives/k", Attempt: 1}
	dir := b.batchDir(testID, controller.JobRestore)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	pending := jobRecord{OpID: job.OpID, ArchiveKey: job.ArchiveKey, Attempt: job.Attempt, StartedAt: time.Now().UTC()}
	if err := writeJSON(filepath.Join(dir, jobFile), pending); err != nil {
		t.Fatal(err)
	}
	if o := waitFor(t, b, "pending", func(controller.Observed) bool { return true }); o.Restore == nil || o.Restore.Status != controller.JobPending {
		t.Fatalf("crashed submission observed as %+v", o.Restore)
	}
	if err := b.SubmitRestore(ctx, job); err != nil {
		t.Fatalf("SubmitRestore: %v", err)
	}
	waitFor(t, b, "restored", func(o controller.Observed) bool {
		return o.Restore != nil && o.Restore.Status == controller.JobSucceeded
	})
}

// A crash while a deleted home is being removed leaves the rest of it in
// the trash; the next deletion must not leave it there for good.
func TestDeletionFinishesWhatACrashLeftInTheTrash(t *testing.T) {
	ctx := context.Background()
	const other = "01jb3x7k9q2m5n8p4r6s0t1v2x"
	b := newTestBackend(t, t.TempDir())
	left := filepath.Join(trashDir(b.opts.DataDir), controller.VolumeName(other)+"-123", "home", "node_modules")
	if err := os.MkdirAll(left, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(left, "big"), make([]byte, 1<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := b.ProvisionVolume(ctx, controller.VolumeSpec{WorkspaceID: testID}); err != nil {
		t.Fatalf("ProvisionVolume: %v", err)
	}
	if err := b.DeleteVolume(ctx, testID, ""); err != nil {
		t.Fatalf("DeleteVolume: %v", err)
	}
	names, err := readNames(trashDir(b.opts.DataDir))
	if err != nil {
		t.Fatal(err)
	}
	if len(names) != 0 {
		t.Fatalf("trash still holds %v", names)
	}
}
