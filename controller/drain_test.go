package controller

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/codehub-io/codehub/archive"
	"github.com/codehub-io/codehub/workspace"
)

// drainedHome is a standby home restored from (or backed up to) keyOld,
// observed on a drained node, its turn to move come.
func drainedHome(runID, archiveRunID string) (workspace.Workspace, Observed) {
	obs := observed(workspace.PhaseStandby)
	obs.NodeID, obs.Node, obs.NodeAway, obs.Move = "n1", "node-a", workspace.ReasonNodeIneligible, true
	w := stored(workspace.PhaseStandby, workspace.DesiredStandby, obs)
	w.ArchiveKey, w.RestoreMarker = ptr(keyOld), ptr(keyOld)
	w.RunID, w.ArchiveRunID = runID, archiveRunID
	return w, obs
}

// TestDrainMove: which homes leave a drained node on their own. Only one
// whose archive holds all of it, idle, on a node that is up: anything else
// needs the node (a running program, a home only it holds) or is not on a
// drained node at all.
func TestDrainMove(t *testing.T) {
	cases := []struct {
		name   string
		change func(*workspace.Workspace, *Observed)
		want   bool
	}{
		{"backed up since its last run", func(*workspace.Workspace, *Observed) {}, true},
		{"restored and never started", func(w *workspace.Workspace, _ *Observed) { w.RunID, w.ArchiveRunID = "", "" }, true},
		{"ran since its archive", func(w *workspace.Workspace, _ *Observed) { w.RunID = "run2" }, false},
		{"never archived", func(w *workspace.Workspace, _ *Observed) { w.ArchiveKey, w.RestoreMarker = nil, nil }, false},
		{"archive not restored into the volume", func(w *workspace.Workspace, _ *Observed) { w.RestoreMarker = nil }, false},
		{"program still running", func(_ *workspace.Workspace, o *Observed) { o.ContainerLive = true }, false},
		{"operation in flight", func(w *workspace.Workspace, _ *Observed) { w.Operation = workspace.OpRestoring }, false},
		{"deleted", func(w *workspace.Workspace, _ *Observed) { w.DeletedAt = ptr(t0) }, false},
		{"in error", func(w *workspace.Workspace, _ *Observed) { w.Phase = workspace.PhaseError }, false},
		{"node down", func(_ *workspace.Workspace, o *Observed) { o.NodeAway, o.VolumeReady = workspace.ReasonNodeDown, false }, false},
		{"node gone", func(_ *workspace.Workspace, o *Observed) { o.NodeAway, o.VolumeReady = workspace.ReasonNodeGone, false }, false},
		{"node eligible", func(_ *workspace.Workspace, o *Observed) { o.NodeAway = "" }, false},
		{"volume not ready", func(_ *workspace.Workspace, o *Observed) { o.VolumeReady = false }, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			w, obs := drainedHome("run1", "run1")
			c.change(&w, &obs)
			if got := DrainMove(w, obs); got != c.want {
				t.Errorf("DrainMove = %v, want %v", got, c.want)
			}
		})
	}
}

// TestPlanDrainMove: a home its archive holds gives up its volume on a
// drained node for that archive (marker cleared in the same write, so the
// volume's going is no lost home), says it is moving, and once the volume
// is gone is restored elsewhere. A changed home is left alone and says
// why.
func TestPlanDrainMove(t *testing.T) {
	w, obs := drainedHome("run1", "run1")
	a := Plan(w, obs, ArchiveCheck{}, t0, testCfg)
	if a.Next.Operation != workspace.OpNone || !slices.Equal(a.Steps, []Step{StepStopWorkspace, StepDeleteVolume}) || !a.Write || a.Next.RestoreMarker != nil {
		t.Fatalf("plan = op %s steps %v write %v marker %v, want the volume given up and deleted", a.Next.Operation, a.Steps, a.Write, a.Next.RestoreMarker)
	}
	if msg, moving := workspace.Moving(a.Next); !moving || !strings.Contains(msg, "leaving node node-a") {
		t.Errorf("progress %q (%v), want it leaving node-a", msg, moving)
	}
	if got := a.Next.Conditions[workspace.CondVolumeReady].Message; !strings.Contains(got, "restored on another node") {
		t.Errorf("volume message %q, want it on its way", got)
	}

	// Before its turn (Moves bounds how many move at a time) it waits.
	obs.Move = false
	wait := Plan(w, obs, ArchiveCheck{}, t0, testCfg)
	if wait.Next.Operation != workspace.OpNone || len(wait.Steps) != 0 || wait.Next.RestoreMarker == nil {
		t.Fatalf("before its turn: op %s steps %v marker %v, want it to wait", wait.Next.Operation, wait.Steps, wait.Next.RestoreMarker)
	}
	if cond := wait.Next.Conditions[workspace.CondMoving]; cond.Status != workspace.ConditionFalse || cond.Reason != workspace.ReasonMoveWaiting {
		t.Errorf("before its turn: storage.moving %+v, want it waiting", cond)
	}

	// The volume is gone: restored elsewhere, no lost home.
	gone := a.Next
	b := Plan(gone, Observed{}, ArchiveCheck{}, t0, testCfg)
	if b.Next.Operation != workspace.OpRestoring || !slices.Equal(b.Steps, []Step{StepProvisionVolume}) || b.Next.ErrorReason != nil {
		t.Fatalf("after the volume went: op %s steps %v error %v, want a restore elsewhere", b.Next.Operation, b.Steps, deref(b.Next.ErrorReason))
	}
	if msg, moving := workspace.Moving(b.Next); !moving || !strings.Contains(msg, "bringing it back up") {
		t.Errorf("progress %q (%v), want it arriving", msg, moving)
	}

	for _, c := range []struct {
		name, runID string
		archived    bool
		why         string
	}{
		{"changed since its archive", "run2", true, "changed since its last archive"},
		{"never archived", "run1", false, "never archived"},
	} {
		t.Run(c.name, func(t *testing.T) {
			w, obs := drainedHome(c.runID, "run1")
			obs.Move = false // Moves never picks a home DrainMove holds back
			if !c.archived {
				w.ArchiveKey, w.RestoreMarker, w.ArchiveRunID = nil, nil, ""
			}
			a := Plan(w, obs, ArchiveCheck{}, t0, testCfg)
			if a.Next.Operation != workspace.OpNone || len(a.Steps) != 0 || deref(a.Next.RestoreMarker) != deref(w.RestoreMarker) {
				t.Fatalf("plan = op %s steps %v marker %v, want the home left on its node", a.Next.Operation, a.Steps, deref(a.Next.RestoreMarker))
			}
			msg, ok := workspace.Unavailable(a.Next)
			if !ok || !strings.Contains(msg, "node node-a is drained") || !strings.Contains(msg, c.why) || !strings.Contains(msg, "evacuates a node before draining") {
				t.Errorf("unavailable message %q (%v), want node-a, %q and what to do", msg, ok, c.why)
			}
			if _, moving := workspace.Moving(a.Next); moving {
				t.Error("a home that stays is shown as moving")
			}
		})
	}
}

// TestPlanDrainMoveCrash: codehub stopped after giving up the volume and
// before deleting it. The home is the archive's now: the next passes
// delete the volume (a restore cannot be placed on the drained node) and
// never take it for a lost home.
func TestPlanDrainMoveCrash(t *testing.T) {
	w, obs := drainedHome("run1", "run1")
	n := Plan(w, obs, ArchiveCheck{}, t0, testCfg).Next
	deleted := false
	for range 3 {
		a := Plan(n, obs, ArchiveCheck{}, t0, testCfg)
		if a.Next.ErrorReason != nil || a.Next.Phase == workspace.PhaseError {
			t.Fatalf("error %s after a crash mid-move", deref(a.Next.ErrorReason))
		}
		if i := slices.Index(a.Steps, StepDeleteVolume); i >= 0 {
			// The job a drain left wanting to run is stopped first, or
			// Nomad would place it on the restore's new volume.
			if i == 0 || a.Steps[i-1] != StepStopWorkspace {
				t.Fatalf("steps %v delete the volume without stopping the job first", a.Steps)
			}
			deleted = true
		}
		n = a.Next
	}
	if !deleted {
		t.Fatal("the given-up volume on the drained node is never deleted")
	}
}

// TestPlanStopArchive follows a running home through a drain: the drain
// stops its program and the workspace job's stop-archive task archives the
// home under the run's key. The workspace says it is moving while that
// runs; once S3 shows the archive complete it is committed as the home's
// archive (marker set, no longer changed), and the home leaves the node
// like any its archive holds. An archive of another run, one S3 does not
// have, or a failed one is never committed: the home waits on its node,
// saying why. (TestPlanArchiveOnStop: the same without a drain.)
func TestPlanStopArchive(t *testing.T) {
	const run = "01jb3x7k9q2m5n8p4r6s0t1run"
	key := archive.Key(wsID, run)
	drained := func(status JobStatus) (workspace.Workspace, Observed) {
		obs := observed(workspace.PhaseRunning)
		obs.NodeID, obs.Node, obs.NodeAway = "n1", "node-a", workspace.ReasonNodeIneligible
		w := stored(workspace.PhaseRunning, workspace.DesiredRunning, obs)
		w.RunID = run
		obs.UpstreamReady = false
		obs.ContainerLive = status == JobRunning
		obs.StopArchive = &JobResult{OpID: run, ArchiveKey: key, Status: status}
		return w, obs
	}

	w, obs := drained(JobRunning)
	a := Plan(w, obs, ArchiveCheck{}, t0, testCfg)
	if len(a.Steps) != 0 || a.Next.Operation != workspace.OpNone || needsArchiveCheck(w, obs) != "" {
		t.Fatalf("while it archives: op %s steps %v check %q, want to wait", a.Next.Operation, a.Steps, needsArchiveCheck(w, obs))
	}
	if msg, moving := workspace.Moving(a.Next); !moving || !strings.Contains(msg, "saving the home on node node-a") {
		t.Errorf("progress %q (%v), want it saving the home", msg, moving)
	}

	w, obs = drained(JobSucceeded)
	if got := needsArchiveCheck(w, obs); got != key {
		t.Fatalf("archive check of %q, want the run's archive %q", got, key)
	}
	if a := Plan(w, obs, ArchiveCheck{}, t0, testCfg); a.Next.ArchiveKey != nil || len(a.Steps) != 0 {
		t.Fatalf("before S3 was looked at: archive %v steps %v, want to wait", deref(a.Next.ArchiveKey), a.Steps)
	}
	a = Plan(w, obs, ArchiveCheck{Key: key}, t0, testCfg)
	if deref(a.Next.ArchiveKey) != key || deref(a.Next.RestoreMarker) != key || HomeChanged(a.Next) || !a.Write || len(a.Steps) != 0 {
		t.Fatalf("committed: archive %s marker %s changed %v write %v steps %v, want the run's archive as the home's",
			deref(a.Next.ArchiveKey), deref(a.Next.RestoreMarker), HomeChanged(a.Next), a.Write, a.Steps)
	}
	if a.Next.DesiredState != workspace.DesiredRunning || a.Next.ErrorReason != nil {
		t.Errorf("desired %s error %s, want RUNNING and none", a.Next.DesiredState, deref(a.Next.ErrorReason))
	}
	// Its turn come, it leaves the node for the archive.
	obs.Move = true
	if !DrainMove(a.Next, obs) {
		t.Fatal("a home its stop archive holds does not leave the drained node")
	}
	if b := Plan(a.Next, obs, ArchiveCheck{}, t0, testCfg); !slices.Equal(b.Steps, []Step{StepStopWorkspace, StepDeleteVolume}) {
		t.Fatalf("leaving: steps %v, want the job stopped and the volume deleted", b.Steps)
	}

	for _, c := range []struct {
		name   string
		change func(*workspace.Workspace, *Observed) ArchiveCheck
		why    string
	}{
		{"not in S3", func(*workspace.Workspace, *Observed) ArchiveCheck {
			return ArchiveCheck{Key: key, Err: archive.ErrArchiveNotFound}
		}, "archiving it as its program stopped failed"},
		{"of another run", func(w *workspace.Workspace, _ *Observed) ArchiveCheck {
			w.RunID = "01jb3x7k9q2m5n8p4r6s0t1new"
			return ArchiveCheck{Key: key}
		}, "only copy"},
		{"failed", func(_ *workspace.Workspace, o *Observed) ArchiveCheck {
			o.StopArchive.Status, o.StopArchive.ErrorCode = JobFailed, archive.CodeS3Access
			return ArchiveCheck{Key: key}
		}, "archiving it as its program stopped failed"},
	} {
		t.Run(c.name, func(t *testing.T) {
			w, obs := drained(JobSucceeded)
			check := c.change(&w, &obs)
			a := Plan(w, obs, check, t0, testCfg)
			if a.Next.ArchiveKey != nil || a.Next.RestoreMarker != nil || slices.Contains(a.Steps, StepDeleteVolume) {
				t.Fatalf("archive %s marker %s steps %v, want nothing committed or deleted", deref(a.Next.ArchiveKey), deref(a.Next.RestoreMarker), a.Steps)
			}
			msg, away := workspace.Unavailable(a.Next)
			if c.why != "" && (!away || !strings.Contains(msg, c.why)) {
				t.Errorf("unavailable message %q (%v), want %q", msg, away, c.why)
			}
			if _, moving := workspace.Moving(a.Next); moving && c.why != "" {
				t.Error("a home that stays is shown as moving")
			}
		})
	}
}

// TestPlanArchiveOnStop: every stop archives the home, not only a drain's.
// Once S3 shows the stop archive of the current run complete it is
// committed, with the time its meta gives, whatever the node; the home is
// then in S3 (a drain moves it without anything running there), and
// archiving it later uploads only what changed since. A stop archive that
// failed is replaced by a backup at once, backups off or not.
func TestPlanArchiveOnStop(t *testing.T) {
	const run = "01jb3x7k9q2m5n8p4r6s0t1run"
	key := archive.Key(wsID, run)
	made := t0.Add(-30 * time.Second)
	stopped := func(status JobStatus) (workspace.Workspace, Observed) {
		obs := observed(workspace.PhaseStandby)
		w := stored(workspace.PhaseStandby, workspace.DesiredStandby, obs)
		w.RunID = run
		obs.StopArchive = &JobResult{OpID: run, ArchiveKey: key, Status: status}
		return w, obs
	}

	w, obs := stopped(JobSucceeded)
	if got := needsArchiveCheck(w, obs); got != key {
		t.Fatalf("archive check of %q, want the run's archive %q", got, key)
	}
	a := Plan(w, obs, ArchiveCheck{Key: key, Meta: archive.Meta{CreatedAt: made}}, t0, testCfg)
	if deref(a.Next.ArchiveKey) != key || deref(a.Next.RestoreMarker) != key || HomeChanged(a.Next) || len(a.Steps) != 0 {
		t.Fatalf("archive %s marker %s changed %v steps %v, want the stop archive committed as the home's",
			deref(a.Next.ArchiveKey), deref(a.Next.RestoreMarker), HomeChanged(a.Next), a.Steps)
	}
	if a.Next.ArchivedAt == nil || !a.Next.ArchivedAt.Equal(made) {
		t.Errorf("archived at %v, want the archive's own time %v", a.Next.ArchivedAt, made)
	}
	if a.Next.Phase != workspace.PhaseStandby || a.Next.Operation != workspace.OpNone {
		t.Errorf("phase %s op %s, want STANDBY and nothing running", a.Next.Phase, a.Next.Operation)
	}
	if !workspace.RecoveryOf(a.Next).Current {
		t.Error("the recovery point of a home its stop archive holds is not current")
	}

	// Archived later: an ARCHIVING like any, whose archive job uploads
	// only what changed since the stop archive (its parent), so a file put
	// into the volume behind the program's back is not lost.
	stored := a.Next
	stored.DesiredState = workspace.DesiredArchived
	b := Plan(stored, obs, ArchiveCheck{}, t0, testCfg)
	if b.Next.Operation != workspace.OpArchiving || !slices.Equal(b.Steps, []Step{StepSubmitArchive}) {
		t.Fatalf("archiving a home its stop archive holds: op %s steps %v, want an archive job", b.Next.Operation, b.Steps)
	}
	if got := parentArchive(b.Next, archive.Key(wsID, deref(b.Next.OpID))); got != key {
		t.Errorf("the archive job builds on %q, want the stop archive %s", got, key)
	}

	// Its archive failed: a backup, now.
	w, obs = stopped(JobFailed)
	d := Plan(w, obs, ArchiveCheck{}, t0, testCfg)
	if d.Next.Operation != workspace.OpArchiving || !d.Next.OpBackup || !slices.Equal(d.Steps, []Step{StepSubmitArchive}) {
		t.Fatalf("after a failed stop archive: op %s backup %v steps %v, want a backup at once", d.Next.Operation, d.Next.OpBackup, d.Steps)
	}
	// Still running: nothing to commit yet.
	w, obs = stopped(JobRunning)
	obs.ContainerLive = true
	if needsArchiveCheck(w, obs) != "" {
		t.Error("an archive still being made is looked for in S3")
	}
}

// TestPlanDrainStartNeverPlaced: a saved home whose start was claimed just
// before its node was drained, so that Nomad never placed the program, is
// as the run before left it: the start ends, the home gets that run back,
// and it leaves the node as any home its archive holds. A start whose
// program was placed may have written to the home: it stays.
func TestPlanDrainStartNeverPlaced(t *testing.T) {
	for _, started := range []bool{false, true} {
		t.Run(fmt.Sprintf("started=%v", started), func(t *testing.T) {
			w, obs := drainedHome("run1", "run1")
			obs.Move = false
			w.DesiredState = workspace.DesiredRunning
			claim := Plan(w, Observed{VolumeExists: true, VolumeReady: true, NodeID: "n1", Node: "node-a"}, ArchiveCheck{}, t0, testCfg)
			if claim.Next.Operation != workspace.OpStarting || claim.Next.PreviousRunID != "run1" || claim.Next.RunID == "run1" {
				t.Fatalf("claim: op %s run %q previous %q; want STARTING a new run after run1", claim.Next.Operation, claim.Next.RunID, claim.Next.PreviousRunID)
			}
			obs.RunStarted = started
			ended := Plan(claim.Next, obs, ArchiveCheck{}, t0.Add(time.Second), testCfg)
			if ended.Next.Operation != workspace.OpNone || !slices.Contains(ended.Steps, StepStopWorkspace) {
				t.Fatalf("on the drained node: op %s steps %v; want the start ended and its job stopped", ended.Next.Operation, ended.Steps)
			}
			wantRun := claim.Next.RunID
			if !started {
				wantRun = "run1"
			}
			if ended.Next.RunID != wantRun {
				t.Errorf("run %q after the start ended, want %q", ended.Next.RunID, wantRun)
			}
			if got := DrainMove(ended.Next, obs); got != !started {
				t.Errorf("DrainMove = %v, want %v", got, !started)
			}
		})
	}
}

// TestPlanDrainNeverRan: a new workspace's volume made on a node that is
// then drained, before any program ran on it, is empty: it is given up and
// made again on another node, rather than waiting for a node that takes
// nothing.
func TestPlanDrainNeverRan(t *testing.T) {
	obs := observed(workspace.PhaseStandby)
	obs.NodeID, obs.Node, obs.NodeAway, obs.Move = "n1", "node-a", workspace.ReasonNodeIneligible, true
	w := stored(workspace.PhaseStandby, workspace.DesiredRunning, obs)
	if !DrainMove(w, obs) {
		t.Fatal("an empty home does not leave the drained node")
	}
	a := Plan(w, obs, ArchiveCheck{}, t0, testCfg)
	if !slices.Equal(a.Steps, []Step{StepStopWorkspace, StepDeleteVolume}) {
		t.Fatalf("steps %v, want the job stopped and the volume deleted", a.Steps)
	}
	b := Plan(a.Next, Observed{}, ArchiveCheck{}, t0.Add(time.Second), testCfg)
	if b.Next.Phase == workspace.PhaseError || b.Next.Operation != workspace.OpProvisioning || !slices.Equal(b.Steps, []Step{StepProvisionVolume}) {
		t.Fatalf("once gone: phase %s op %s steps %v, want a new volume", b.Next.Phase, b.Next.Operation, b.Steps)
	}
	// One a program ran on holds its only copy there: it stays.
	w.RunID = "01jb3x7k9q2m5n8p4r6s0t1ran"
	if DrainMove(w, obs) {
		t.Fatal("a home that ran and was never archived leaves the drained node")
	}
}

// TestPlanStoppingWhileSaving: STOPPING lasts until the allocation ends,
// which includes the stop archive, and the stop archive tries again until
// S3 takes the home. On a node in service it is given up (after its next
// failed attempt) once the stop has taken the stop timeout, and bounded by
// the archive timeout; on a node being drained it is the home's only way
// off, and goes on, however long, with no failure.
func TestPlanStoppingWhileSaving(t *testing.T) {
	const run = "01jb3x7k9q2m5n8p4r6s0t1run"
	stopT, archiveT := testCfg.Timeouts[workspace.OpStopping], testCfg.Timeouts[workspace.OpArchiving]
	for _, c := range []struct {
		name     string
		away     string
		draining bool
		after    time.Duration
		giveUp   bool
		fail     bool
	}{
		{"within the stop timeout", "", false, stopT - time.Second, false, false},
		{"past the stop timeout", "", false, stopT + time.Minute, true, false},
		{"past the archive timeout", "", false, archiveT + time.Minute, false, true},
		{"drained, past the archive timeout", workspace.ReasonNodeIneligible, true, archiveT + time.Minute, false, false},
		{"drained for a day", workspace.ReasonNodeIneligible, true, 24 * time.Hour, false, false},
		{"draining and down", workspace.ReasonNodeDown, true, stopT + time.Minute, false, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			obs := observed(workspace.PhaseRunning)
			obs.UpstreamReady = false
			obs.NodeAway, obs.NodeDraining = c.away, c.draining
			w := stored(workspace.PhaseRunning, workspace.DesiredStandby, obs)
			w.RunID, w.Operation = run, workspace.OpStopping
			obs.StopArchive = &JobResult{OpID: run, ArchiveKey: archive.Key(wsID, run), Status: JobRunning}
			started := t0.Add(-c.after)
			w.OpStartedAt = &started
			a := Plan(w, obs, ArchiveCheck{}, t0, testCfg)
			if failed := deref(a.Next.ErrorReason) == workspace.ReasonTimeout; failed != c.fail {
				t.Fatalf("op %s phase %s error %s; want failed %v", a.Next.Operation, a.Next.Phase, deref(a.Next.ErrorReason), c.fail)
			}
			if got := slices.Contains(a.Steps, StepGiveUpStopArchive); got != c.giveUp {
				t.Errorf("steps %v: give up %v, want %v", a.Steps, got, c.giveUp)
			}
		})
	}
}

// TestPlanDrainedNodeLost: a drained node whose client is then lost (killed,
// its disk gone) can run nothing, not even a volume deletion; a home its
// archive holds leaves all the same (the volume is only forgotten), while
// one that changed waits for the node, and a node that is down without a
// drain keeps its homes.
func TestPlanDrainedNodeLost(t *testing.T) {
	down := func(draining bool) Observed {
		obs := Observed{VolumeExists: true, VolumeID: "v1", NodeID: "n1", Node: "node-a",
			NodeAway: workspace.ReasonNodeDown, NodeDraining: draining, Move: true}
		return obs
	}
	w := stored(workspace.PhaseStandby, workspace.DesiredStandby, observed(workspace.PhaseStandby))
	w.ArchiveKey, w.RestoreMarker = ptr(keyOld), ptr(keyOld)
	a := Plan(w, down(true), ArchiveCheck{}, t0, testCfg)
	if !slices.Equal(a.Steps, []Step{StepStopWorkspace, StepDeleteVolume}) || a.Next.RestoreMarker != nil {
		t.Fatalf("saved home on a drained node that went down: steps %v marker %s, want it given up for its archive", a.Steps, deref(a.Next.RestoreMarker))
	}
	if b := Plan(w, down(false), ArchiveCheck{}, t0, testCfg); len(b.Steps) != 0 || b.Next.RestoreMarker == nil {
		t.Errorf("a node down without a drain: steps %v, want to wait for it", b.Steps)
	}
	w.RunID = "01jb3x7k9q2m5n8p4r6s0t1ran"
	if c := Plan(w, down(true), ArchiveCheck{}, t0, testCfg); slices.Contains(c.Steps, StepDeleteVolume) {
		t.Errorf("a home that ran since its archive: steps %v, want it kept", c.Steps)
	}
}

// TestPlanProvisioningNodeAway: the volume of a new workspace, made on a
// node that goes down or is drained before the volume is ready, holds
// nothing: it is deleted and made again on another node within the same
// PROVISIONING, instead of waiting into a Timeout.
func TestPlanProvisioningNodeAway(t *testing.T) {
	for _, away := range []string{workspace.ReasonNodeDown, workspace.ReasonNodeIneligible} {
		obs := Observed{VolumeExists: true, VolumeID: "v1", NodeID: "n1", Node: "node-a", NodeAway: away}
		w := stored(workspace.PhasePending, workspace.DesiredRunning, Observed{})
		w.Operation, w.OpStartedAt = workspace.OpProvisioning, ptr(t0.Add(-time.Minute))
		a := Plan(w, obs, ArchiveCheck{}, t0, testCfg)
		if a.Next.Operation != workspace.OpProvisioning || !slices.Equal(a.Steps, []Step{StepDeleteVolume}) || a.Next.ErrorReason != nil {
			t.Errorf("%s: op %s steps %v error %s, want the volume made again", away, a.Next.Operation, a.Steps, deref(a.Next.ErrorReason))
		}
		b := Plan(a.Next, Observed{}, ArchiveCheck{}, t0.Add(time.Second), testCfg)
		if !slices.Equal(b.Steps, []Step{StepProvisionVolume}) {
			t.Errorf("%s: once gone, steps %v, want a new volume", away, b.Steps)
		}
	}
}
