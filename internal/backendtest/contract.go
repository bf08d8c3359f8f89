package backendtest

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"

	"github.com/codehub-io/codehub/archive"
	"github.com/codehub-io/codehub/controller"
	"github.com/codehub-io/codehub/internal/testenv"
)

// testVolume: a provisioned volume is observed ready, provisioning it again
// keeps it as it is, and a deleted one is gone, which deleting it again
// does not change.
func testVolume(t *testing.T, s Subject) {
	ctx := t.Context()
	wsID := newID()
	assertGone(t, s, wsID)
	vol := provision(t, s, wsID)
	// Where the volume is (a Nomad node) is the backend's to say.
	if vol != (controller.Observed{VolumeExists: true, VolumeReady: true, VolumeID: vol.VolumeID, NodeID: vol.NodeID, Node: vol.Node}) {
		t.Fatalf("a new volume observed as %s", describe(vol))
	}
	if err := s.Backend.ProvisionVolume(ctx, controller.VolumeSpec{WorkspaceID: wsID, UID: os.Getuid(), GID: os.Getgid()}); err != nil {
		t.Fatalf("ProvisionVolume again: %v", err)
	}
	steady(t, s, wsID, "the same volume", func(o controller.Observed) bool { return o == vol })
	deleteVolume(t, s, wsID, vol.VolumeID)
	assertGone(t, s, wsID)
	if err := s.Backend.DeleteVolume(ctx, wsID, vol.VolumeID); err != nil {
		t.Fatalf("DeleteVolume of a deleted volume: %v", err)
	}
	assertGone(t, s, wsID)
}

// testWorkspace: a started workspace is live and answers through its
// upstream; starting it again keeps it; what it uses cannot be deleted or
// purged under it; stopped, it is neither live nor failed and starts again;
// purged with its volume deleted, it is gone.
func testWorkspace(t *testing.T, s Subject) {
	ctx := t.Context()
	wsID := newID()
	vol := provision(t, s, wsID)
	running := func(o controller.Observed) bool {
		return o.VolumeReady && o.VolumeID == vol.VolumeID && o.ContainerLive && o.UpstreamReady && o.Failure == nil
	}
	stopped := func(o controller.Observed) bool {
		return o.VolumeReady && o.VolumeID == vol.VolumeID && !o.ContainerLive && !o.UpstreamReady && o.Failure == nil
	}
	spec := controller.WorkspaceSpec{WorkspaceID: wsID, OwnerID: newID(), Name: "contract"}

	start(t, s, spec, running)
	addr := upstream(t, s, wsID)
	if err := s.Backend.StartWorkspace(ctx, spec); err != nil {
		t.Fatalf("StartWorkspace again: %v", err)
	}
	steady(t, s, wsID, "running", running)
	if again := upstream(t, s, wsID); again != addr {
		t.Fatalf("starting a live workspace again moved it from %s to %s", addr, again)
	}

	if err := s.Backend.DeleteVolume(ctx, wsID, vol.VolumeID); !errors.Is(err, controller.ErrVolumeInUse) {
		t.Fatalf("DeleteVolume under a live workspace = %v, want ErrVolumeInUse", err)
	}
	if err := s.Backend.PurgeJob(ctx, wsID, controller.JobWorkspace); !errors.Is(err, controller.ErrJobLive) {
		t.Fatalf("PurgeJob of a live workspace = %v, want ErrJobLive", err)
	}
	steady(t, s, wsID, "running", running)

	stop(t, s, wsID, stopped)
	if err := s.Backend.StopWorkspace(ctx, wsID, controller.StopSave); err != nil {
		t.Fatalf("StopWorkspace again: %v", err)
	}
	steady(t, s, wsID, "stopped", stopped)

	start(t, s, spec, running)
	upstream(t, s, wsID)
	stop(t, s, wsID, stopped)

	for range 2 {
		if err := s.Backend.PurgeJob(ctx, wsID, controller.JobWorkspace); err != nil {
			t.Fatalf("PurgeJob of a stopped workspace: %v", err)
		}
	}
	deleteVolume(t, s, wsID, vol.VolumeID)
	assertGone(t, s, wsID)
}

func start(t *testing.T, s Subject, spec controller.WorkspaceSpec, running func(controller.Observed) bool) {
	t.Helper()
	if err := s.Backend.StartWorkspace(t.Context(), spec); err != nil {
		t.Fatalf("StartWorkspace: %v", err)
	}
	until(t, s, spec.WorkspaceID, "the workspace live and ready", func(o controller.Observed) bool {
		if o.Failure != nil {
			t.Fatalf("starting workspace failed: %s", describe(o))
		}
		return running(o)
	})
}

func stop(t *testing.T, s Subject, wsID string, stopped func(controller.Observed) bool) {
	t.Helper()
	if err := s.Backend.StopWorkspace(t.Context(), wsID, controller.StopSave); err != nil {
		t.Fatalf("StopWorkspace: %v", err)
	}
	until(t, s, wsID, "the workspace stopped", stopped)
	deadline := time.Now().Add(limit)
	for {
		_, err := s.Upstreams.Resolve(t.Context(), wsID)
		if errors.Is(err, controller.ErrNoUpstream) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("stopped workspace still resolves: %v", err)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// upstream resolves a ready workspace to an address whose health check
// answers.
func upstream(t *testing.T, s Subject, wsID string) string {
	t.Helper()
	deadline := time.Now().Add(limit)
	for {
		addr, err := s.Upstreams.Resolve(t.Context(), wsID)
		if err == nil && healthy(t.Context(), addr) {
			return addr
		}
		if time.Now().After(deadline) {
			t.Fatalf("ready workspace never resolved to a healthy upstream: %q, %v", addr, err)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

func healthy(ctx context.Context, addr string) bool {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/healthz", nil)
	if err != nil {
		return false
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// testArchiveAndRestore: jobs report the data mover's code when they fail
// and the attempt they ran; a finished attempt submitted or stopped again
// is left as it is; a restored home holds what was archived; purged jobs
// and a deleted volume are gone.
func testArchiveAndRestore(t *testing.T, s Subject, s3 testenv.S3) {
	ctx := t.Context()
	wsID := newID()
	vol := provision(t, s, wsID)

	failingJob(t, s, controller.JobRestore, jobSpec(wsID, 1), archive.CodeArchiveNotFound)

	home, err := s.Home(ctx, wsID)
	if err != nil {
		t.Fatalf("home: %v", err)
	}
	content := make([]byte, 64<<10)
	if _, err := rand.Read(content); err != nil {
		t.Fatal(err)
	}
	note := filepath.Join("project", "notes.bin")
	if err := os.MkdirAll(filepath.Join(home, "project"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(home, note), content, 0o600); err != nil {
		t.Fatal(err)
	}

	job := jobSpec(wsID, 1)
	r := runJob(t, s, controller.JobArchive, job)
	if r.Status != controller.JobSucceeded {
		t.Fatalf("archive = %+v, want succeeded", *r)
	}
	finishedStays(t, s, controller.JobArchive, job, r)
	finishedProgress(t, s, controller.JobArchive, job, "upload", int64(len(content)))
	for _, key := range []string{job.ArchiveKey, archive.MetaKey(job.ArchiveKey)} {
		if _, err := s3.Client.StatObject(ctx, s3.Bucket, key, minio.StatObjectOptions{}); err != nil {
			t.Fatalf("archive object %s: %v", key, err)
		}
	}
	purgeJob(t, s, wsID, controller.JobArchive)
	deleteVolume(t, s, wsID, vol.VolumeID)
	assertGone(t, s, wsID)

	vol = provision(t, s, wsID)
	job.Attempt = 2
	r = runJob(t, s, controller.JobRestore, job)
	if r.Status != controller.JobSucceeded {
		t.Fatalf("restore = %+v, want succeeded", *r)
	}
	finishedStays(t, s, controller.JobRestore, job, r)
	finishedProgress(t, s, controller.JobRestore, job, "download", 0)
	if home, err = s.Home(ctx, wsID); err != nil {
		t.Fatalf("home: %v", err)
	}
	if got, err := os.ReadFile(filepath.Join(home, note)); err != nil || !bytes.Equal(got, content) {
		t.Fatalf("restored %s differs from the archived one (%v)", note, err)
	}
	purgeJob(t, s, wsID, controller.JobRestore)
	deleteVolume(t, s, wsID, vol.VolumeID)
	assertGone(t, s, wsID)
}

// progressReader is how the API reads a running job's progress.
type progressReader interface {
	JobProgress(ctx context.Context, wsID string, kind controller.JobKind) (controller.JobProgress, error)
}

// finishedProgress: a finished job's last progress report is its data
// step's, complete, for the job's operation. An archive's total is the
// home's file bytes (at least minTotal); a restore's the archive's size.
func finishedProgress(t *testing.T, s Subject, kind controller.JobKind, job controller.JobSpec, step string, minTotal int64) {
	t.Helper()
	pr, ok := s.Backend.(progressReader)
	if !ok {
		t.Fatalf("%T reports no job progress", s.Backend)
	}
	p, err := pr.JobProgress(t.Context(), job.WorkspaceID, kind)
	if err != nil {
		t.Fatalf("%s progress: %v", kind, err)
	}
	if p.OpID != job.OpID || p.Step != step || p.Result != "OK" || p.Total < max(minTotal, 1) || p.Done != p.Total || p.Percent() != 100 {
		t.Fatalf("%s progress %+v, want step %s of op %s complete with at least %d bytes", kind, p, step, job.OpID, minTotal)
	}
}

// testFailingArchive: an archive the store refuses (its bucket is missing)
// fails with the data mover's S3_ACCESS_ERROR, and stays failed when
// submitted again.
func testFailingArchive(t *testing.T, s Subject) {
	wsID := newID()
	vol := provision(t, s, wsID)
	failingJob(t, s, controller.JobArchive, jobSpec(wsID, 1), archive.CodeS3Access)
	deleteVolume(t, s, wsID, vol.VolumeID)
	assertGone(t, s, wsID)
}

// testStoppedJobs: a job stopped half way (the crash point of every
// archive and restore) is reported failed, never succeeded, so the
// controller retries it; while it runs, neither it nor its volume can be
// forgotten.
func testStoppedJobs(t *testing.T, s Subject) {
	ctx := t.Context()
	wsID := newID()
	vol := provision(t, s, wsID)
	for _, kind := range []controller.JobKind{controller.JobArchive, controller.JobRestore} {
		job := jobSpec(wsID, 1)
		submit(t, s, kind, job)
		until(t, s, wsID, string(kind)+" running", func(o controller.Observed) bool {
			r := result(o, kind)
			if r != nil && terminal(r) {
				t.Fatalf("%s against a store that never answers ended: %+v", kind, *r)
			}
			return r != nil && r.Status == controller.JobRunning
		})
		if err := s.Backend.PurgeJob(ctx, wsID, kind); !errors.Is(err, controller.ErrJobLive) {
			t.Fatalf("PurgeJob of a running %s = %v, want ErrJobLive", kind, err)
		}
		if err := s.Backend.DeleteVolume(ctx, wsID, vol.VolumeID); !errors.Is(err, controller.ErrVolumeInUse) {
			t.Fatalf("DeleteVolume under a running %s = %v, want ErrVolumeInUse", kind, err)
		}

		if err := s.Backend.StopJob(ctx, wsID, kind); err != nil {
			t.Fatalf("StopJob %s: %v", kind, err)
		}
		o := until(t, s, wsID, string(kind)+" ended", func(o controller.Observed) bool {
			r := result(o, kind)
			if r != nil && r.Status == controller.JobSucceeded {
				t.Fatalf("%s stopped half way reported %+v", kind, *r)
			}
			return r != nil && terminal(r)
		})
		r := result(o, kind)
		if r.Status != controller.JobFailed || r.ErrorCode == "" || !sameAttempt(r, job) {
			t.Fatalf("stopped %s = %+v, want failed with a code, for %+v", kind, *r, job)
		}
		if err := s.Backend.StopJob(ctx, wsID, kind); err != nil {
			t.Fatalf("StopJob of a stopped %s: %v", kind, err)
		}
		steady(t, s, wsID, "the stopped "+string(kind)+" failed", func(o controller.Observed) bool {
			again := result(o, kind)
			return again != nil && *again == *r
		})
		purgeJob(t, s, wsID, kind)
	}
	deleteVolume(t, s, wsID, vol.VolumeID)
	assertGone(t, s, wsID)
}

// testGone: stopping and purging what never existed succeeds; starting a
// workspace or a job without a volume is ErrNoVolume; neither creates
// anything.
func testGone(t *testing.T, s Subject) {
	ctx := t.Context()
	wsID := newID()
	assertGone(t, s, wsID)
	if err := s.Backend.StopWorkspace(ctx, wsID, controller.StopSave); err != nil {
		t.Errorf("StopWorkspace of nothing: %v", err)
	}
	for _, kind := range []controller.JobKind{controller.JobArchive, controller.JobRestore} {
		if err := s.Backend.StopJob(ctx, wsID, kind); err != nil {
			t.Errorf("StopJob %s of nothing: %v", kind, err)
		}
	}
	for _, kind := range []controller.JobKind{controller.JobWorkspace, controller.JobArchive, controller.JobRestore} {
		if err := s.Backend.PurgeJob(ctx, wsID, kind); err != nil {
			t.Errorf("PurgeJob %s of nothing: %v", kind, err)
		}
	}
	if err := s.Backend.StartWorkspace(ctx, controller.WorkspaceSpec{WorkspaceID: wsID, OwnerID: newID()}); !errors.Is(err, controller.ErrNoVolume) {
		t.Errorf("StartWorkspace without a volume = %v, want ErrNoVolume", err)
	}
	job := jobSpec(wsID, 1)
	if err := s.Backend.SubmitArchive(ctx, job); !errors.Is(err, controller.ErrNoVolume) {
		t.Errorf("SubmitArchive without a volume = %v, want ErrNoVolume", err)
	}
	if err := s.Backend.SubmitRestore(ctx, job); !errors.Is(err, controller.ErrNoVolume) {
		t.Errorf("SubmitRestore without a volume = %v, want ErrNoVolume", err)
	}
	assertGone(t, s, wsID)
}

// jobSpec is an attempt of a new operation of wsID.
func jobSpec(wsID string, attempt int) controller.JobSpec {
	op := newID()
	return controller.JobSpec{WorkspaceID: wsID, OpID: op, ArchiveKey: archive.Key(wsID, op), Attempt: attempt}
}

func submit(t *testing.T, s Subject, kind controller.JobKind, job controller.JobSpec) {
	t.Helper()
	submit := s.Backend.SubmitArchive
	if kind == controller.JobRestore {
		submit = s.Backend.SubmitRestore
	}
	if err := submit(t.Context(), job); err != nil {
		t.Fatalf("submit %s: %v", kind, err)
	}
}

// runJob submits the attempt and returns its result once it finished.
func runJob(t *testing.T, s Subject, kind controller.JobKind, job controller.JobSpec) *controller.JobResult {
	t.Helper()
	submit(t, s, kind, job)
	o := until(t, s, job.WorkspaceID, string(kind)+" finished", func(o controller.Observed) bool {
		r := result(o, kind)
		return r != nil && sameAttempt(r, job) && terminal(r)
	})
	return result(o, kind)
}

// failingJob runs an attempt that must fail with the data mover's code,
// checks that it stays as it is, and purges it.
func failingJob(t *testing.T, s Subject, kind controller.JobKind, job controller.JobSpec, code archive.Code) {
	t.Helper()
	r := runJob(t, s, kind, job)
	if r.Status != controller.JobFailed || r.ExitCode == 0 || r.ErrorCode != code {
		t.Fatalf("%s = %+v, want failed with %s", kind, *r, code)
	}
	finishedStays(t, s, kind, job, r)
	purgeJob(t, s, job.WorkspaceID, kind)
}

// finishedStays submits a finished attempt again and stops it: neither
// reruns it or changes its result.
func finishedStays(t *testing.T, s Subject, kind controller.JobKind, job controller.JobSpec, r *controller.JobResult) {
	t.Helper()
	submit(t, s, kind, job)
	if err := s.Backend.StopJob(t.Context(), job.WorkspaceID, kind); err != nil {
		t.Fatalf("StopJob of a finished %s: %v", kind, err)
	}
	steady(t, s, job.WorkspaceID, "the finished "+string(kind), func(o controller.Observed) bool {
		again := result(o, kind)
		return again != nil && *again == *r
	})
}

// purgeJob forgets a finished job, twice, and checks it is no longer
// observed.
func purgeJob(t *testing.T, s Subject, wsID string, kind controller.JobKind) {
	t.Helper()
	for range 2 {
		if err := s.Backend.PurgeJob(t.Context(), wsID, kind); err != nil {
			t.Fatalf("PurgeJob %s: %v", kind, err)
		}
	}
	if o := observe(t, s, wsID); result(o, kind) != nil {
		t.Fatalf("purged %s still observed: %s", kind, describe(o))
	}
}

func result(o controller.Observed, kind controller.JobKind) *controller.JobResult {
	if kind == controller.JobRestore {
		return o.Restore
	}
	return o.Archive
}

func terminal(r *controller.JobResult) bool {
	return r.Status == controller.JobSucceeded || r.Status == controller.JobFailed
}

func sameAttempt(r *controller.JobResult, job controller.JobSpec) bool {
	return r.OpID == job.OpID && r.ArchiveKey == job.ArchiveKey && r.Attempt == job.Attempt
}
