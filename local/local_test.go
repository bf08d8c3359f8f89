package local

import (
	"context"
	"errors"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/codehub-io/codehub/config"
	"github.com/codehub-io/codehub/controller"
	"github.com/codehub-io/codehub/workspace"
)

// fakeWorkspace is the test program built once per test binary.
var fakeWorkspace string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "codehub-local-test-")
	if err != nil {
		panic(err)
	}
	fakeWorkspace = filepath.Join(dir, "fakeworkspace")
	build := exec.Command("go", "build", "-o", fakeWorkspace, "./testdata/fakeworkspace")
	build.Stdout, build.Stderr = os.Stdout, os.Stderr
	if err := build.Run(); err != nil {
		panic("build fakeworkspace: " + err.Error())
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// copyFakeWorkspace puts a copy of the test program into dir, for tests
// whose program must live in a place of their choosing.
func copyFakeWorkspace(t *testing.T, dir string) string {
	t.Helper()
	program := filepath.Join(dir, "fakeworkspace")
	raw, err := os.ReadFile(fakeWorkspace)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(program, raw, 0o755); err != nil {
		t.Fatal(err)
	}
	return program
}

const testID = "01jb3x7k9q2m5n8p4r6s0t1v2w"

func newTestBackend(t *testing.T, dataDir string, args ...string) *Backend {
	t.Helper()
	b, err := New(hclog.NewNullLogger(), Options{
		DataDir: dataDir,
		Command: fakeWorkspace,
		Args:    append([]string{"--listen", "127.0.0.1:" + config.PlaceholderPort}, args...),
	})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return b
}

// waitFor observes until cond holds for the workspace; a generous bound
// only keeps a broken build from hanging.
func waitFor(t *testing.T, b *Backend, what string, cond func(controller.Observed) bool) controller.Observed {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		snap, err := b.Observe(context.Background())
		if err != nil {
			t.Fatalf("Observe: %v", err)
		}
		o := snap.Workspaces[testID]
		if cond(o) {
			return o
		}
		if time.Now().After(deadline) {
			t.Fatalf("workspace never became %s; last observed %+v", what, o)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func stopOnCleanup(t *testing.T, b *Backend) {
	t.Cleanup(func() {
		if err := b.StopWorkspace(context.Background(), testID, controller.StopSave); err != nil {
			t.Errorf("cleanup stop: %v", err)
		}
	})
}

func TestWorkspaceLifecycleSurvivesRestart(t *testing.T) {
	ctx := context.Background()
	dataDir := t.TempDir()
	b := newTestBackend(t, dataDir, "--child")
	stopOnCleanup(t, b)

	if o := waitFor(t, b, "absent", func(o controller.Observed) bool { return true }); o.VolumeExists {
		t.Fatalf("volume exists before provisioning: %+v", o)
	}
	if err := b.ProvisionVolume(ctx, controller.VolumeSpec{WorkspaceID: testID}); err != nil {
		t.Fatalf("ProvisionVolume: %v", err)
	}
	if err := b.ProvisionVolume(ctx, controller.VolumeSpec{WorkspaceID: testID}); err != nil {
		t.Fatalf("ProvisionVolume again: %v", err)
	}
	if _, err := b.Resolve(ctx, testID); !errors.Is(err, controller.ErrNoUpstream) {
		t.Fatalf("Resolve before start = %v, want ErrNoUpstream", err)
	}
	run1 := controller.WorkspaceSpec{WorkspaceID: testID, RunID: "run1"}
	if err := b.StartWorkspace(ctx, run1); err != nil {
		t.Fatalf("StartWorkspace: %v", err)
	}
	o := waitFor(t, b, "ready", func(o controller.Observed) bool { return o.UpstreamReady })
	if !o.VolumeReady || !o.ContainerLive || o.Failure != nil {
		t.Fatalf("running workspace observed as %+v", o)
	}

	// A second start of the live run keeps the same process.
	first := readState(t, b)
	firstChild := readChildPID(t, b)
	if err := b.StartWorkspace(ctx, run1); err != nil {
		t.Fatalf("StartWorkspace again: %v", err)
	}
	if again := readState(t, b); again.Process != first.Process {
		t.Fatalf("second start replaced the process: %+v -> %+v", first.Process, again.Process)
	}
	// A new run replaces it: the old process would demand the old token.
	if err := b.StartWorkspace(ctx, controller.WorkspaceSpec{WorkspaceID: testID, RunID: "run2"}); err != nil {
		t.Fatalf("StartWorkspace of a new run: %v", err)
	}
	if next := readState(t, b); next.Process == first.Process || next.RunID != "run2" {
		t.Fatalf("a new run kept the process: %+v -> %+v", first, next)
	}
	for deadline := time.Now().Add(10 * time.Second); processRunning(first.Process.PID) || processRunning(firstChild); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the previous run's processes survived its replacement")
		}
	}
	waitFor(t, b, "ready in its new run", func(o controller.Observed) bool { return o.UpstreamReady })

	if err := b.DeleteVolume(ctx, testID, ""); !errors.Is(err, controller.ErrVolumeInUse) {
		t.Fatalf("DeleteVolume of a running workspace = %v, want ErrVolumeInUse", err)
	}

	// A new backend over the same data dir (codehub restarted) sees the
	// same process and reaches it.
	restarted := newTestBackend(t, dataDir)
	addr, err := restarted.Resolve(ctx, testID)
	if err != nil {
		t.Fatalf("Resolve after restart: %v", err)
	}
	if got, want := get(t, "http://"+addr+"/home"), viewedHome(b, "workspace"); got != want {
		t.Fatalf("workspace HOME = %q, want %q", got, want)
	}
	waitFor(t, restarted, "ready after restart", func(o controller.Observed) bool { return o.UpstreamReady && o.ContainerLive })

	child := readChildPID(t, b)
	if err := restarted.StopWorkspace(ctx, testID, controller.StopSave); err != nil {
		t.Fatalf("StopWorkspace: %v", err)
	}
	o = waitFor(t, restarted, "stopped", func(o controller.Observed) bool { return !o.ContainerLive })
	if o.UpstreamReady || o.Failure != nil || !o.VolumeReady {
		t.Fatalf("stopped workspace observed as %+v", o)
	}
	// SIGKILL is sent synchronously but takes effect when the process is
	// next scheduled; a survivor would still be here after the bound.
	for deadline := time.Now().Add(10 * time.Second); processRunning(child); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("grandchild %d in its own session survived the stop", child)
		}
	}
	if _, err := restarted.Resolve(ctx, testID); !errors.Is(err, controller.ErrNoUpstream) {
		t.Fatalf("Resolve after stop = %v, want ErrNoUpstream", err)
	}

	if err := restarted.PurgeJob(ctx, testID, controller.JobWorkspace); err != nil {
		t.Fatalf("PurgeJob: %v", err)
	}
	if err := restarted.DeleteVolume(ctx, testID, ""); err != nil {
		t.Fatalf("DeleteVolume: %v", err)
	}
	snap, err := restarted.Observe(ctx)
	if err != nil {
		t.Fatalf("Observe: %v", err)
	}
	if o, ok := snap.Workspaces[testID]; ok {
		t.Fatalf("deleted workspace still observed: %+v", o)
	}
	if _, err := os.Stat(b.HomeDir(testID)); !os.IsNotExist(err) {
		t.Fatalf("home still exists: %v", err)
	}
}

func TestWorkspaceThatExitsIsAFailure(t *testing.T) {
	ctx := context.Background()
	b := newTestBackend(t, t.TempDir(), "--exit", "3")
	provisionAndStart(ctx, t, b)
	o := waitFor(t, b, "failed", func(o controller.Observed) bool { return o.Failure != nil })
	if o.ContainerLive || o.UpstreamReady {
		t.Fatalf("exited workspace observed as %+v", o)
	}
	if o.Failure.Reason != workspace.ReasonStartFailed || !strings.Contains(o.Failure.Message, "code 3") ||
		!strings.Contains(o.Failure.Message, "exiting as asked") {
		t.Fatalf("failure = %+v, want StartFailed naming code 3 and the last output line", o.Failure)
	}
}

func TestStartWithoutHomeFails(t *testing.T) {
	b := newTestBackend(t, t.TempDir())
	err := b.StartWorkspace(context.Background(), controller.WorkspaceSpec{WorkspaceID: testID})
	if !errors.Is(err, controller.ErrNoVolume) || !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("StartWorkspace without a home = %v, want ErrNoVolume, a not-exist error", err)
	}
}

func TestActuatorsRefuseBadIDs(t *testing.T) {
	b := newTestBackend(t, t.TempDir())
	ctx := context.Background()
	for _, id := range []string{"../../etc", "", "01JB3X7K9Q2M5N8P4R6S0T1V2W", testID + "x"} {
		if err := b.ProvisionVolume(ctx, controller.VolumeSpec{WorkspaceID: id}); err == nil {
			t.Errorf("ProvisionVolume(%q) accepted a bad id", id)
		}
		if err := b.DeleteVolume(ctx, id, ""); err == nil {
			t.Errorf("DeleteVolume(%q) accepted a bad id", id)
		}
	}
}

func readState(t *testing.T, b *Backend) workspaceState {
	t.Helper()
	var st workspaceState
	if found, err := readJSON(filepath.Join(b.workspaceDir(testID), stateFile), &st); err != nil || !found {
		t.Fatalf("read state: found=%v err=%v", found, err)
	}
	return st
}

func readChildPID(t *testing.T, b *Backend) int {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(b.HomeDir(testID), "child.pid"))
	if err != nil {
		t.Fatalf("read child pid: %v", err)
	}
	pid, err := strconv.Atoi(string(raw))
	if err != nil {
		t.Fatalf("child pid: %v", err)
	}
	return pid
}

// processRunning: the pid exists and is not a zombie.
func processRunning(pid int) bool {
	st, err := readStat(pid)
	return err == nil && st.state != 'Z' && syscall.Kill(pid, 0) == nil
}

func get(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	return string(b)
}

func TestStopAllStopsWhatAnEarlierCodehubStarted(t *testing.T) {
	ctx := context.Background()
	dataDir := t.TempDir()
	first := newTestBackend(t, dataDir)
	stopOnCleanup(t, first)
	if err := first.ProvisionVolume(ctx, controller.VolumeSpec{WorkspaceID: testID}); err != nil {
		t.Fatalf("ProvisionVolume: %v", err)
	}
	if err := first.StartWorkspace(ctx, controller.WorkspaceSpec{WorkspaceID: testID}); err != nil {
		t.Fatalf("StartWorkspace: %v", err)
	}
	waitFor(t, first, "live", func(o controller.Observed) bool { return o.ContainerLive })
	if err := newTestBackend(t, dataDir).StopAll(ctx); err != nil {
		t.Fatalf("StopAll: %v", err)
	}
	o := waitFor(t, first, "stopped", func(o controller.Observed) bool { return !o.ContainerLive })
	if o.Failure != nil {
		t.Fatalf("a stopped workspace is not a failure: %+v", o.Failure)
	}
}

// make stop ends archive and restore jobs too: nothing codehub started may
// outlive the teardown.
func TestStopAllStopsJobs(t *testing.T) {
	ctx := context.Background()
	dataDir := t.TempDir()
	hang := filepath.Join(t.TempDir(), "codehub")
	if err := os.WriteFile(hang, []byte("#!/bin/sh\nexec sleep 3600\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	b, err := New(hclog.NewNullLogger(), Options{DataDir: dataDir, Command: fakeWorkspace, CodehubBinary: hang})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	if err := b.ProvisionVolume(ctx, controller.VolumeSpec{WorkspaceID: testID}); err != nil {
		t.Fatalf("ProvisionVolume: %v", err)
	}
	job := controller.JobSpec{WorkspaceID: testID, OpID: "op", ArchiveKey: "ws/" + testID + "/op.tar.zst", Attempt: 1}
	if err := b.SubmitArchive(ctx, job); err != nil {
		t.Fatalf("SubmitArchive: %v", err)
	}
	waitFor(t, b, "archiving", func(o controller.Observed) bool {
		return o.Archive != nil && o.Archive.Status == controller.JobRunning
	})
	if err := newTestBackend(t, dataDir).StopAll(ctx); err != nil {
		t.Fatalf("StopAll: %v", err)
	}
	waitFor(t, b, "archive ended", func(o controller.Observed) bool {
		return o.Archive != nil && o.Archive.Status == controller.JobFailed
	})
}

func TestWatchWakesWhenAWorkspaceBecomesReady(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	b := newTestBackend(t, t.TempDir())
	stopOnCleanup(t, b)
	if err := b.ProvisionVolume(ctx, controller.VolumeSpec{WorkspaceID: testID}); err != nil {
		t.Fatalf("ProvisionVolume: %v", err)
	}
	wakes := make(chan struct{}, 1)
	done := make(chan error, 1)
	go func() {
		done <- b.Watch(ctx, func() {
			select {
			case wakes <- struct{}{}:
			default:
			}
		})
	}()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Watch returned %v after its context ended, want nil", err)
		}
	}()
	if err := b.StartWorkspace(ctx, controller.WorkspaceSpec{WorkspaceID: testID}); err != nil {
		t.Fatalf("StartWorkspace: %v", err)
	}
	// Wakes come when the process appears and when it answers; the last
	// one must leave Observe reporting the workspace ready.
	for {
		select {
		case <-wakes:
		case <-time.After(30 * time.Second):
			t.Fatal("Watch never woke the controller for a workspace becoming ready")
		}
		snap, err := b.Observe(context.Background())
		if err != nil {
			t.Fatalf("Observe: %v", err)
		}
		if snap.Workspaces[testID].UpstreamReady {
			return
		}
	}
}

// provisionAndStart creates the test workspace's home and starts it.
func provisionAndStart(ctx context.Context, t *testing.T, b *Backend) {
	t.Helper()
	if err := b.ProvisionVolume(ctx, controller.VolumeSpec{WorkspaceID: testID}); err != nil {
		t.Fatalf("ProvisionVolume: %v", err)
	}
	if err := b.StartWorkspace(ctx, controller.WorkspaceSpec{WorkspaceID: testID}); err != nil {
		t.Fatalf("StartWorkspace: %v", err)
	}
}
