package controller

import (
	"context"
	cryptorand "crypto/rand"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/oklog/ulid/v2"

	"github.com/codehub-io/codehub/archive"
	"github.com/codehub-io/codehub/workspace"
)

// opAt is an op id made at t.
func opAt(t time.Time) string {
	return strings.ToLower(ulid.MustNew(ulid.Timestamp(t), cryptorand.Reader).String())
}

func TestBackupDue(t *testing.T) {
	day := 24 * time.Hour
	archivedAt := func(at time.Time) *string { return ptr(archive.Key(wsID, opAt(at))) }
	cases := []struct {
		name     string
		w        workspace.Workspace
		interval time.Duration
		want     bool
	}{
		{"off", workspace.Workspace{RunID: "run2", ArchiveRunID: "run1"}, 0, false},
		{"never ran", workspace.Workspace{}, day, false},
		{"ran, never archived", workspace.Workspace{RunID: "run1"}, day, true},
		{"archived since its last run", workspace.Workspace{RunID: "run1", ArchiveRunID: "run1", ArchiveKey: archivedAt(t0.Add(-2 * day))}, day, false},
		{"ran since, archive younger than the interval", workspace.Workspace{RunID: "run2", ArchiveRunID: "run1", ArchiveKey: archivedAt(t0.Add(-time.Hour))}, day, false},
		{"ran since, archive one interval old", workspace.Workspace{RunID: "run2", ArchiveRunID: "run1", ArchiveKey: archivedAt(t0.Add(-day))}, day, true},
		{"archived before runs were recorded", workspace.Workspace{RunID: "run1", ArchiveKey: archivedAt(t0.Add(-2 * day))}, day, true},
		{"archive key without a time", workspace.Workspace{RunID: "run2", ArchiveRunID: "run1", ArchiveKey: ptr("archives/x/not-a-ulid/home.tar.zst")}, day, true},
	}
	for _, c := range cases {
		if got := BackupDue(c.w, t0, c.interval); got != c.want {
			t.Errorf("%s: BackupDue = %v, want %v", c.name, got, c.want)
		}
	}
}

// standbyHome is a workspace in standby on its volume whose home ran under
// run2 since its archive (made under run1) was made at archivedAt.
func standbyHome(archivedAt time.Time) workspace.Workspace {
	w := stored(workspace.PhaseStandby, workspace.DesiredStandby, observed(workspace.PhaseStandby))
	op := opAt(archivedAt)
	key := archive.Key(wsID, op)
	w.ArchiveKey, w.RestoreMarker, w.OpID = &key, &key, &op
	w.RunID, w.ArchiveRunID = "run2", "run1"
	return w
}

func TestPlanBackup(t *testing.T) {
	cfg := testCfg
	cfg.BackupInterval = time.Hour
	volume := observed(workspace.PhaseStandby)

	t.Run("a changed home in standby is archived, marked a backup", func(t *testing.T) {
		a := Plan(standbyHome(t0.Add(-2*time.Hour)), volume, ArchiveCheck{}, t0, cfg)
		n := a.Next
		if n.Operation != workspace.OpArchiving || !n.OpBackup || deref(n.OpID) != opNew || !slices.Equal(a.Steps, []Step{StepSubmitArchive}) {
			t.Fatalf("plan: op %s backup %v op id %s steps %v", n.Operation, n.OpBackup, deref(n.OpID), a.Steps)
		}
		if n.Phase != workspace.PhaseStandby || workspace.DisplayPhase(n) != workspace.DisplayArchiving {
			t.Fatalf("phase %s, display %s", n.Phase, workspace.DisplayPhase(n))
		}
	})
	for name, c := range map[string]struct {
		w   workspace.Workspace
		obs Observed
	}{
		"archive younger than the interval": {standbyHome(t0.Add(-time.Minute)), volume},
		"unchanged": {func() workspace.Workspace {
			w := standbyHome(t0.Add(-2 * time.Hour))
			w.ArchiveRunID = w.RunID
			return w
		}(), volume},
		"wanted running": {func() workspace.Workspace {
			w := standbyHome(t0.Add(-2 * time.Hour))
			w.DesiredState = workspace.DesiredRunning
			return w
		}(), volume},
		"an archive job still runs": {standbyHome(t0.Add(-2 * time.Hour)),
			Observed{VolumeExists: true, VolumeReady: true, Archive: &JobResult{Status: JobRunning}}},
		"waiting out a failed attempt": {func() workspace.Workspace {
			w := standbyHome(t0.Add(-2 * time.Hour))
			w.NextAttemptAt = ptr(t0.Add(time.Minute))
			return w
		}(), volume},
	} {
		t.Run(name+": no backup", func(t *testing.T) {
			if a := Plan(c.w, c.obs, ArchiveCheck{}, t0, cfg); a.Next.Operation == workspace.OpArchiving || a.Next.OpBackup {
				t.Fatalf("claimed %s (backup %v)", a.Next.Operation, a.Next.OpBackup)
			}
		})
	}

	// backingUp is the row right after the claim, with its job observed.
	backingUp := func(status JobStatus, code archive.Code) (workspace.Workspace, Observed) {
		w := standbyHome(t0.Add(-2 * time.Hour))
		w.Operation, w.OpBackup, w.OpID, w.OpAttempt, w.OpStartedAt = workspace.OpArchiving, true, ptr(opNew), 2, ptr(t0.Add(-time.Minute))
		obs := volume
		obs.Archive = &JobResult{OpID: opNew, ArchiveKey: keyNew, Attempt: 2, Status: status, ErrorCode: code}
		return w, obs
	}
	t.Run("a verified backup is committed with the volume as the home", func(t *testing.T) {
		w, obs := backingUp(JobSucceeded, "")
		a := Plan(w, obs, ArchiveCheck{Key: keyNew, Meta: archive.Meta{Format: archive.Format}}, t0, cfg)
		n := a.Next
		if deref(n.ArchiveKey) != keyNew || deref(n.RestoreMarker) != keyNew || n.ArchiveRunID != "run2" {
			t.Fatalf("archive key %s, restore marker %s, archive run %s", deref(n.ArchiveKey), deref(n.RestoreMarker), n.ArchiveRunID)
		}
		if n.Operation != workspace.OpNone || n.OpBackup || n.Phase != workspace.PhaseStandby || slices.Contains(a.Steps, StepDeleteVolume) {
			t.Fatalf("op %s phase %s steps %v", n.Operation, n.Phase, a.Steps)
		}
		if home := locateHome(n, obs); home != workspace.HomeInVolume {
			t.Fatalf("home %s after a backup", home)
		}
		// The next pass finds nothing to do: the home is unchanged and
		// its volume stays.
		next := Plan(n, volume, ArchiveCheck{}, t0.Add(2*time.Hour), cfg)
		if next.Next.Operation != workspace.OpNone || slices.Contains(next.Steps, StepDeleteVolume) {
			t.Fatalf("after the backup: op %s steps %v", next.Next.Operation, next.Steps)
		}
	})
	failures := map[string]struct {
		status  JobStatus
		code    archive.Code
		check   ArchiveCheck
		started time.Duration
	}{
		"job failed":       {status: JobFailed, code: archive.CodeS3Access},
		"archive corrupt":  {status: JobSucceeded, check: ArchiveCheck{Key: keyNew, Err: archive.ErrChecksumMismatch}},
		"archive missing":  {status: JobSucceeded, check: ArchiveCheck{Key: keyNew, Err: archive.ErrMetaNotFound}},
		"deadline reached": {status: JobRunning, started: 2 * time.Hour},
	}
	for name, f := range failures {
		t.Run(name+": the workspace stays in standby without an error", func(t *testing.T) {
			w, obs := backingUp(f.status, f.code)
			w.ErrorCount = workspace.MaxErrorCount - 1
			if f.started > 0 {
				w.OpStartedAt = ptr(t0.Add(-f.started))
			}
			a := Plan(w, obs, f.check, t0, cfg)
			n := a.Next
			if n.Operation != workspace.OpNone || n.OpBackup || n.Phase != workspace.PhaseStandby || n.ErrorReason != nil || n.ErrorCount != w.ErrorCount {
				t.Fatalf("op %s phase %s error %s count %d", n.Operation, n.Phase, deref(n.ErrorReason), n.ErrorCount)
			}
			if n.NextAttemptAt == nil || !n.NextAttemptAt.Equal(t0.Add(cfg.BackoffMax)) || a.BackupFailure == nil {
				t.Fatalf("next attempt %v, failure %+v", n.NextAttemptAt, a.BackupFailure)
			}
			if deref(n.ArchiveKey) != deref(w.ArchiveKey) || slices.Contains(a.Steps, StepDeleteVolume) {
				t.Fatalf("archive key %s, steps %v", deref(n.ArchiveKey), a.Steps)
			}
		})
	}
	t.Run("an archiving after a backup is no backup", func(t *testing.T) {
		w := standbyHome(t0.Add(-2 * time.Hour))
		w.OpBackup = true
		w.DesiredState = workspace.DesiredArchived
		a := Plan(w, volume, ArchiveCheck{}, t0, cfg)
		if a.Next.Operation != workspace.OpArchiving || a.Next.OpBackup || deref(a.Next.OpID) != opNew {
			t.Fatalf("op %s backup %v op id %s", a.Next.Operation, a.Next.OpBackup, deref(a.Next.OpID))
		}
	})
}

func (h *harness) controllerWith(cfg Config) *WorkspaceController {
	c := NewWorkspaceController(hclog.NewNullLogger(), h.pool, h.backend, h.backend.store, cfg)
	c.SetClock(h.now)
	return c
}

// TestBackupsKeepTheVolume drives backups through the controller, the
// database and the fake backend: a changed home in standby gets an archive
// of its own within the interval and keeps its volume, an unchanged one
// gets none, and failing backups never put the workspace in ERROR.
func TestBackupsKeepTheVolume(t *testing.T) {
	h := newHarness(t)
	h.checkRestores()
	cfg := DefaultConfig()
	cfg.BackupInterval = time.Hour
	// Op and run ids carry the harness's time, as they carry the clock's.
	cfg.NewOpID = func() string { return opAt(h.now()) }
	c := h.controllerWith(cfg)
	w := h.create("dev")
	h.converge(c)
	h.backend.writeHome(w.ID, "v1")
	h.setDesired(w.ID, workspace.DesiredStandby)
	h.converge(c)

	// Stopped after a run and never archived: backed up at once.
	first := h.expect(w.ID, workspace.PhaseStandby, "volume")
	if data, ok := h.backend.store.data(deref(first.ArchiveKey)); !ok || data != "v1" {
		t.Fatalf("backup %s holds %q (exists %v)", deref(first.ArchiveKey), data, ok)
	}
	if deref(first.RestoreMarker) != deref(first.ArchiveKey) || first.ArchiveRunID != first.RunID || first.OpBackup {
		t.Fatalf("after the backup: marker %s key %s archive run %s run %s", deref(first.RestoreMarker), deref(first.ArchiveKey), first.ArchiveRunID, first.RunID)
	}

	// Ran again: the next backup waits until the last is an interval old.
	h.setDesired(w.ID, workspace.DesiredRunning)
	h.converge(c)
	h.backend.writeHome(w.ID, "v2")
	h.setDesired(w.ID, workspace.DesiredStandby)
	h.converge(c)
	if got := h.expect(w.ID, workspace.PhaseStandby, "volume"); deref(got.ArchiveKey) != deref(first.ArchiveKey) {
		t.Fatal("backed up again before the interval passed")
	}
	h.advance(cfg.BackupInterval)
	h.converge(c)
	second := h.expect(w.ID, workspace.PhaseStandby, "volume")
	if data, _ := h.backend.store.data(deref(second.ArchiveKey)); deref(second.ArchiveKey) == deref(first.ArchiveKey) || data != "v2" {
		t.Fatalf("second backup %s holds %q", deref(second.ArchiveKey), data)
	}

	// Unchanged: no further archive, however long it waits.
	h.advance(3 * cfg.BackupInterval)
	h.converge(c)
	if keys := h.backend.store.keys(w.ID); len(keys) != 2 {
		t.Fatalf("archives after a wait unchanged: %v", keys)
	}

	// S3 fails every backup: the workspace stays usable and never ERROR.
	h.setDesired(w.ID, workspace.DesiredRunning)
	h.converge(c)
	h.backend.writeHome(w.ID, "v3")
	for i := range workspace.MaxErrorCount + 1 {
		h.backend.jobFail[JobArchive] = string(archive.CodeS3Access)
		if i == 0 {
			h.setDesired(w.ID, workspace.DesiredStandby)
		} else {
			h.advance(cfg.BackoffMax)
		}
		h.converge(c)
		if _, pending := h.backend.jobFail[JobArchive]; pending {
			t.Fatalf("attempt %d: no backup was tried", i)
		}
		if r := h.row(w.ID); r.Phase != workspace.PhaseStandby || r.ErrorReason != nil || deref(r.ArchiveKey) != deref(second.ArchiveKey) {
			t.Fatalf("after a failed backup: phase %s error %s key %s", r.Phase, deref(r.ErrorReason), deref(r.ArchiveKey))
		}
	}
	h.advance(cfg.BackoffMax)
	h.converge(c)
	third := h.expect(w.ID, workspace.PhaseStandby, "volume")
	if data, _ := h.backend.store.data(deref(third.ArchiveKey)); data != "v3" {
		t.Fatalf("backup after S3 came back holds %q", data)
	}

	// Archiving for real still frees the volume, and the home comes back.
	h.archiveThenRestore(c, w.ID)
	if home, _ := h.backend.home(w.ID); home != "v3" {
		t.Fatalf("restored home %q", home)
	}
}

// TestRandomHistoriesWithBackupsLoseNoHome is TestRandomHistoriesLoseNoHome
// with backups on: a backup never lets a volume be deleted or restored over
// while it holds work its archive lacks.
func TestRandomHistoriesWithBackupsLoseNoHome(t *testing.T) {
	const histories, steps = 32, 80
	for seed := range uint64(histories) {
		t.Run(fmt.Sprint("seed ", seed), func(t *testing.T) {
			randomHistory(t, rand.New(rand.NewPCG(seed, 0x6261636b75707321)), steps, time.Minute)
		})
	}
}

// TestGCKeepsBackups: with backups piling up, the GC keeps the newest
// gc.keep_archives of them, never the volume's business, and never the
// archive the workspace points to, even when newer complete archives (of
// attempts never committed) push it out of the newest.
func TestGCKeepsBackups(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	cfg := DefaultConfig()
	cfg.BackupInterval = time.Hour
	cfg.NewOpID = func() string { return opAt(h.now()) }
	c := h.controllerWith(cfg)
	w := h.create("dev")
	h.converge(c)
	for i := range 5 {
		h.setDesired(w.ID, workspace.DesiredRunning)
		h.converge(c)
		h.backend.writeHome(w.ID, fmt.Sprint("v", i))
		h.setDesired(w.ID, workspace.DesiredStandby)
		h.converge(c)
		h.advance(cfg.BackupInterval)
		h.converge(c)
	}
	current := h.expect(w.ID, workspace.PhaseStandby, "volume")
	if keys := h.backend.store.keys(w.ID); len(keys) != 5 || keys[4] != deref(current.ArchiveKey) {
		t.Fatalf("archives after five backups: %v, current %s", keys, deref(current.ArchiveKey))
	}

	gc := NewGCRunner(hclog.NewNullLogger(), h.svc, h.backend.store, GCConfig{KeepArchives: 3, DeletedGrace: time.Hour})
	if _, err := gc.RunOnce(ctx); err != nil {
		t.Fatal(err)
	}
	kept := h.backend.store.keys(w.ID)
	if len(kept) != 3 || kept[2] != deref(current.ArchiveKey) {
		t.Fatalf("kept %v, want the newest 3 with the current one", kept)
	}

	// Three newer complete archives no backup committed: the current one
	// is no longer among the newest 3, and stays all the same.
	for range 3 {
		h.advance(time.Minute)
		h.backend.store.put(archive.Key(w.ID, opAt(h.now())), "uncommitted")
	}
	if _, err := gc.RunOnce(ctx); err != nil {
		t.Fatal(err)
	}
	kept = h.backend.store.keys(w.ID)
	if len(kept) != 4 || kept[0] != deref(current.ArchiveKey) {
		t.Fatalf("kept %v, want the current archive and the newest 3", kept)
	}
	if data, _ := h.backend.store.data(deref(current.ArchiveKey)); data != "v4" {
		t.Fatalf("current archive holds %q", data)
	}
	h.expect(w.ID, workspace.PhaseStandby, "volume")
}

// TestPlanBackupYields: a backup tries until S3 takes the home, so it must
// not stand between the user and a wake or a deletion on a node in
// service: its job is stopped, and once nothing of it runs the backup ends
// with no backoff. On a node being emptied it is the home's way off and
// goes on past any deadline; elsewhere the archive timeout ends it, job
// and all.
func TestPlanBackupYields(t *testing.T) {
	archiveT := testCfg.Timeouts[workspace.OpArchiving]
	for _, c := range []struct {
		name     string
		desired  workspace.DesiredState
		deleted  bool
		draining bool
		status   JobStatus
		after    time.Duration
		check    ArchiveCheck
		// want: the operation after the pass, whether the job is
		// stopped, whether the backup failed (a backoff), committed.
		wantOp     workspace.Operation
		wantStop   bool
		wantFailed bool
		wantCommit bool
	}{
		{name: "standby wished: the backup goes on", desired: workspace.DesiredStandby, status: JobRunning,
			wantOp: workspace.OpArchiving},
		{name: "wake wished: its job is stopped", desired: workspace.DesiredRunning, status: JobRunning,
			wantOp: workspace.OpArchiving, wantStop: true},
		{name: "wake wished, not placed yet: stopped", desired: workspace.DesiredRunning, status: JobPending,
			wantOp: workspace.OpArchiving, wantStop: true},
		{name: "wake wished, its job ended: the backup ends", desired: workspace.DesiredRunning, status: JobFailed,
			wantOp: workspace.OpNone},
		{name: "deletion wished: its job is stopped", desired: workspace.DesiredStandby, deleted: true, status: JobRunning,
			wantOp: workspace.OpArchiving, wantStop: true},
		{name: "wake wished, archive made: it commits", desired: workspace.DesiredRunning, status: JobSucceeded,
			check:  ArchiveCheck{Key: keyNew, Meta: archive.Meta{Format: archive.Format}},
			wantOp: workspace.OpNone, wantCommit: true},
		{name: "wake wished on a draining node: the backup goes on", desired: workspace.DesiredRunning, draining: true, status: JobRunning,
			wantOp: workspace.OpArchiving},
		{name: "draining, a day past the archive timeout: goes on", desired: workspace.DesiredStandby, draining: true, status: JobRunning,
			after: archiveT + 24*time.Hour, wantOp: workspace.OpArchiving},
		{name: "in service, past the archive timeout: given up, job stopped", desired: workspace.DesiredStandby, status: JobRunning,
			after: archiveT + time.Minute, wantOp: workspace.OpNone, wantStop: true, wantFailed: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			obs := observed(workspace.PhaseStandby)
			if c.draining {
				obs.NodeAway, obs.NodeDraining = workspace.ReasonNodeIneligible, true
			}
			w := standbyHome(t0.Add(-2 * time.Hour))
			w.DesiredState = c.desired
			if c.deleted {
				w.DeletedAt = ptr(t0.Add(-time.Second))
			}
			w.Operation, w.OpBackup, w.OpID, w.OpAttempt = workspace.OpArchiving, true, ptr(opNew), 2
			w.OpStartedAt = ptr(t0.Add(-time.Minute - c.after))
			obs.Archive = &JobResult{OpID: opNew, ArchiveKey: keyNew, Attempt: 2, Status: c.status}
			a := Plan(w, obs, c.check, t0, testCfg)
			n := a.Next
			if n.Operation != c.wantOp {
				t.Fatalf("op %s, want %s (steps %v)", n.Operation, c.wantOp, a.Steps)
			}
			if got := slices.Contains(a.Steps, StepStopArchiveJob); got != c.wantStop {
				t.Errorf("steps %v: stop %v, want %v", a.Steps, got, c.wantStop)
			}
			if got := n.NextAttemptAt != nil; got != c.wantFailed {
				t.Errorf("next attempt %v, want a backoff %v", n.NextAttemptAt, c.wantFailed)
			}
			if got := deref(n.ArchiveKey) == keyNew; got != c.wantCommit {
				t.Errorf("archive %s, want committed %v", deref(n.ArchiveKey), c.wantCommit)
			}
			if n.ErrorReason != nil || n.Phase == workspace.PhaseError || slices.Contains(a.Steps, StepDeleteVolume) {
				t.Errorf("error %s phase %s steps %v", deref(n.ErrorReason), n.Phase, a.Steps)
			}
			if n.Operation == workspace.OpNone && n.OpBackup {
				t.Error("the backup mark outlived the backup")
			}
		})
	}
}
