package controller

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/codehub-io/codehub/archive"
	"github.com/codehub-io/codehub/workspace"
)

const wsID = "01jb3x7k9q2m5n8p4r6s0t1v2w"

var (
	t0      = time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	opOld   = "01jb3x7k9q2m5n8p4r6s0t1v20"
	opNew   = "01jb3x7k9q2m5n8p4r6s0t1v21"
	keyOld  = archive.Key(wsID, opOld)
	keyNew  = archive.Key(wsID, opNew)
	testCfg = func() Config {
		c := DefaultConfig()
		c.NewOpID = func() string { return opNew }
		return c
	}()
)

func ptr[T any](v T) *T { return &v }

// observed returns the observation that matches a steady phase.
func observed(phase workspace.Phase) Observed {
	switch phase {
	case workspace.PhaseStandby, workspace.PhaseError, workspace.PhaseDeleting:
		return Observed{VolumeExists: true, VolumeReady: true}
	case workspace.PhaseRunning:
		return Observed{VolumeExists: true, VolumeReady: true, ContainerLive: true, UpstreamReady: true}
	}
	return Observed{}
}

// stored returns a workspace row whose last observation is obs, as a
// converged controller would have written it.
func stored(phase workspace.Phase, desired workspace.DesiredState, obs Observed) workspace.Workspace {
	w := workspace.Workspace{ID: wsID, OwnerID: "u", Image: "img", Phase: phase, DesiredState: desired,
		Operation: workspace.OpNone, OpAttempt: 1}
	w.Conditions = observeConditions(w, obs, t0.Add(-time.Hour))
	if phase == workspace.PhaseArchived {
		w.ArchiveKey = ptr(keyOld)
	}
	if phase == workspace.PhaseError {
		w.ErrorReason, w.ErrorCount = ptr(workspace.ReasonImagePullFailed), 1
	}
	derive(w.Conditions, &w, t0.Add(-time.Hour))
	return w
}

func TestPlanIdle(t *testing.T) {
	cases := []struct {
		phase   workspace.Phase
		desired workspace.DesiredState
		op      workspace.Operation
		steps   []Step
	}{
		{workspace.PhasePending, workspace.DesiredRunning, workspace.OpProvisioning, []Step{StepProvisionVolume}},
		{workspace.PhasePending, workspace.DesiredStandby, workspace.OpProvisioning, []Step{StepProvisionVolume}},
		{workspace.PhasePending, workspace.DesiredArchived, workspace.OpCreateEmptyArchive, []Step{StepCreateEmptyArchive}},
		{workspace.PhaseArchived, workspace.DesiredRunning, workspace.OpRestoring, []Step{StepProvisionVolume}},
		{workspace.PhaseArchived, workspace.DesiredStandby, workspace.OpRestoring, []Step{StepProvisionVolume}},
		{workspace.PhaseArchived, workspace.DesiredArchived, workspace.OpNone, nil},
		{workspace.PhaseStandby, workspace.DesiredRunning, workspace.OpStarting, []Step{StepStartWorkspace}},
		{workspace.PhaseStandby, workspace.DesiredStandby, workspace.OpNone, nil},
		{workspace.PhaseStandby, workspace.DesiredArchived, workspace.OpArchiving, []Step{StepSubmitArchive}},
		{workspace.PhaseRunning, workspace.DesiredRunning, workspace.OpNone, nil},
		{workspace.PhaseRunning, workspace.DesiredStandby, workspace.OpStopping, []Step{StepStopWorkspace}},
		{workspace.PhaseRunning, workspace.DesiredArchived, workspace.OpStopping, []Step{StepStopWorkspace}},
		{workspace.PhaseError, workspace.DesiredRunning, workspace.OpNone, nil},
		{workspace.PhaseError, workspace.DesiredStandby, workspace.OpNone, nil},
		{workspace.PhaseError, workspace.DesiredArchived, workspace.OpNone, nil},
	}
	for _, c := range cases {
		t.Run(fmt.Sprintf("%s to %s", c.phase, c.desired), func(t *testing.T) {
			obs := observed(c.phase)
			w := stored(c.phase, c.desired, obs)
			w.RunID = "run0"
			a := Plan(w, obs, ArchiveCheck{}, t0, testCfg)
			if a.Next.Operation != c.op || !slices.Equal(a.Steps, c.steps) {
				t.Fatalf("plan = op %s steps %v, want op %s steps %v", a.Next.Operation, a.Steps, c.op, c.steps)
			}
			// Each start is a new run, with a new upstream token.
			if wantRun := map[bool]string{true: opNew, false: "run0"}[c.op == workspace.OpStarting]; a.Next.RunID != wantRun {
				t.Errorf("run id %q, want %q", a.Next.RunID, wantRun)
			}
			if c.op == workspace.OpNone && a.Write {
				t.Errorf("converged workspace planned a write")
			}
			if c.op != workspace.OpNone {
				if !a.Write || a.WriteLast || a.Next.OpStartedAt == nil || !a.Next.OpStartedAt.Equal(t0) || a.Next.OpAttempt != 2 {
					t.Errorf("claim must be written first with op_started_at and a new attempt: %+v", a)
				}
				if a.Next.Phase != c.phase {
					t.Errorf("claim changed phase %s -> %s", c.phase, a.Next.Phase)
				}
			}
		})
	}
}

// TestPlanEveryCombination walks phase x desired x operation x archive_key x
// restore marker x deleted, each with the observation matching the phase,
// the same with the volume's node away, and with the volume gone, and
// checks the rules every plan must keep.
func TestPlanEveryCombination(t *testing.T) {
	phases := []workspace.Phase{workspace.PhasePending, workspace.PhaseArchived, workspace.PhaseStandby,
		workspace.PhaseRunning, workspace.PhaseError, workspace.PhaseDeleting, workspace.PhaseDeleted}
	desireds := []workspace.DesiredState{workspace.DesiredRunning, workspace.DesiredStandby,
		workspace.DesiredArchived, workspace.DesiredDeleted}
	ops := []workspace.Operation{workspace.OpNone, workspace.OpProvisioning, workspace.OpRestoring,
		workspace.OpStarting, workspace.OpStopping, workspace.OpArchiving, workspace.OpCreateEmptyArchive, workspace.OpDeleting}
	n := 0
	for _, phase := range phases {
		for _, desired := range desireds {
			for _, op := range ops {
				for _, hasArchive := range []bool{false, true} {
					for _, restored := range []bool{false, true} {
						for _, deleted := range []bool{false, true} {
							for volume, obs := range volumeFates(observed(phase)) {
								w := stored(phase, desired, observed(phase))
								w.Phase = phase
								w.Operation = op
								if op != workspace.OpNone {
									w.OpStartedAt = ptr(t0.Add(-time.Second))
									w.OpID = ptr(opOld)
								}
								w.ArchiveKey = nil
								if hasArchive {
									w.ArchiveKey = ptr(keyOld)
								}
								if restored {
									w.RestoreMarker = ptr(keyOld)
								}
								if deleted {
									w.DeletedAt = ptr(t0.Add(-time.Minute))
								}
								name := fmt.Sprintf("%s/%s/%s/archive=%v/restored=%v/deleted=%v/volume %s",
									phase, desired, op, hasArchive, restored, deleted, volume)
								checkPlanRules(t, name, w, obs, Plan(w, obs, ArchiveCheck{}, t0, testCfg))
								n++
							}
						}
					}
				}
			}
		}
	}
	if n != 7*4*8*2*2*2*3 {
		t.Fatalf("walked %d combinations", n)
	}
}

// volumeFates returns obs as it is, with the volume's node away (the
// volume present but not ready, the container lost), and with the volume
// gone.
func volumeFates(obs Observed) map[string]Observed {
	away, gone := obs, obs
	if obs.VolumeExists {
		away = Observed{VolumeExists: true}
	}
	gone.VolumeExists, gone.VolumeReady = false, false
	return map[string]Observed{"as observed": obs, "away": away, "gone": gone}
}

func checkPlanRules(t *testing.T, name string, w workspace.Workspace, obs Observed, a Action) {
	t.Helper()
	next := a.Next
	if w.Phase == workspace.PhaseDeleted {
		if a.Write || len(a.Steps) > 0 {
			t.Errorf("%s: a DELETED workspace was acted on", name)
		}
		return
	}
	// Non-preemptive: an operation in flight is never swapped for another.
	if w.Operation != workspace.OpNone && next.Operation != workspace.OpNone && next.Operation != w.Operation {
		t.Errorf("%s: operation %s replaced by %s", name, w.Operation, next.Operation)
	}
	// ERROR is atomic: never with an operation.
	if next.Phase == workspace.PhaseError && next.Operation != workspace.OpNone {
		t.Errorf("%s: ERROR with operation %s", name, next.Operation)
	}
	// A claim is a write of the stored operation NONE.
	if w.Operation == workspace.OpNone && next.Operation != workspace.OpNone && (!a.Write || a.WriteLast) {
		t.Errorf("%s: claim of %s not written before its steps", name, next.Operation)
	}
	// ERROR only allows deletion.
	if w.Phase == workspace.PhaseError && workspace.ErrorFinal(w) && w.Operation == workspace.OpNone &&
		next.Operation != workspace.OpNone && next.Operation != workspace.OpDeleting {
		t.Errorf("%s: ERROR workspace claimed %s", name, next.Operation)
	}
	// A deleted workspace without an operation heads for DELETING.
	if w.DeletedAt != nil && w.Operation == workspace.OpNone && next.Operation != workspace.OpDeleting {
		t.Errorf("%s: deleted workspace claimed %s", name, next.Operation)
	}
	// Where the home is, as the pass found it and as the row it writes
	// says: a volume is deleted or restored over only while a committed
	// archive holds the home (or the workspace is being deleted), and an
	// empty archive is made only where there is no home at all.
	home, homeAfter := locateHome(w, obs), locateHome(next, obs)
	for _, s := range a.Steps {
		if s == StepDeleteVolume && next.Operation != workspace.OpDeleting && (!home.Archived() || !homeAfter.Archived()) {
			t.Errorf("%s: volume deletion planned with the home %s, then %s", name, home, homeAfter)
		}
		if s == StepSubmitRestore && (!home.Archived() || !homeAfter.Archived()) {
			t.Errorf("%s: restore planned with the home %s, then %s", name, home, homeAfter)
		}
		if s == StepCreateEmptyArchive && home != workspace.HomeNowhere {
			t.Errorf("%s: empty archive planned with the home %s", name, home)
		}
		if s == StepProvisionVolume && w.DeletedAt == nil && home != workspace.HomeNowhere && !home.Archived() {
			t.Errorf("%s: a new volume planned with the home %s", name, home)
		}
		if s == StepDeleteVolume && obs.ContainerLive {
			t.Errorf("%s: volume deletion planned with a live container", name)
		}
		if (s == StepSubmitArchive || s == StepSubmitRestore) && obs.ContainerLive {
			t.Errorf("%s: %s with a live container", name, s)
		}
		if s == StepSubmitArchive && (next.OpID == nil || next.Operation != workspace.OpArchiving) {
			t.Errorf("%s: archive submitted without a committed op id", name)
		}
	}
	live := w.DeletedAt == nil && w.Operation != workspace.OpDeleting
	// A home nobody can read waits for its volume: no operation starts.
	if home == workspace.HomeUnknown && live && w.Operation == workspace.OpNone && next.Operation != workspace.OpNone {
		t.Errorf("%s: claimed %s with the home %s", name, next.Operation, home)
	}
	// A home that vanished is recorded as lost, at once and for good.
	if home == workspace.HomeLost && live && !workspace.ErrorFinal(w) && (next.Phase != workspace.PhaseError ||
		(deref(next.ErrorReason) != workspace.ReasonDataLost && deref(next.ErrorReason) != workspace.ReasonContainerWithoutVolume)) {
		t.Errorf("%s: the home %s, yet phase %s reason %s", name, home, next.Phase, deref(next.ErrorReason))
	}
	// Planning twice on the planned row is stable (judging is a function).
	if b := Plan(w, obs, ArchiveCheck{}, t0, testCfg); b.Write != a.Write || !slices.Equal(b.Steps, a.Steps) {
		t.Errorf("%s: plan not deterministic", name)
	}
}

type inflight struct {
	name    string
	op      workspace.Operation
	prep    func(w *workspace.Workspace)
	obs     Observed
	check   ArchiveCheck
	wantOp  workspace.Operation
	phase   workspace.Phase
	steps   []Step
	write   bool
	verify  func(t *testing.T, n workspace.Workspace)
	started time.Duration // before t0; default 1s
}

func TestPlanInFlight(t *testing.T) {
	volume := Observed{VolumeExists: true, VolumeReady: true}
	live := Observed{VolumeExists: true, VolumeReady: true, ContainerLive: true}
	running := Observed{VolumeExists: true, VolumeReady: true, ContainerLive: true, UpstreamReady: true}
	restoreJob := func(status JobStatus, code archive.Code) Observed {
		o := volume
		o.Restore = &JobResult{ArchiveKey: keyOld, Attempt: 2, Status: status, ErrorCode: code}
		return o
	}
	archiveJob := func(status JobStatus, code archive.Code) Observed {
		o := volume
		o.Archive = &JobResult{OpID: opOld, ArchiveKey: keyOld, Attempt: 2, Status: status, ErrorCode: code}
		return o
	}
	withArchive := func(w *workspace.Workspace) { w.ArchiveKey = ptr(keyOld) }
	committedArchive := func(w *workspace.Workspace) { w.ArchiveKey = ptr(keyOld); w.OpID = ptr(opOld) }
	retry := func(reason string) func(t *testing.T, n workspace.Workspace) {
		return func(t *testing.T, n workspace.Workspace) {
			if deref(n.ErrorReason) != reason || n.ErrorCount != 1 || n.NextAttemptAt == nil || !n.NextAttemptAt.After(t0) {
				t.Errorf("want retry with %s: reason %s count %d next %v", reason, deref(n.ErrorReason), n.ErrorCount, n.NextAttemptAt)
			}
		}
	}
	terminal := func(reason string) func(t *testing.T, n workspace.Workspace) {
		return func(t *testing.T, n workspace.Workspace) {
			if deref(n.ErrorReason) != reason || n.Conditions[workspace.CondHealthy].Status != workspace.ConditionFalse {
				t.Errorf("want ERROR %s: reason %s healthy %+v", reason, deref(n.ErrorReason), n.Conditions[workspace.CondHealthy])
			}
		}
	}
	succeeded := func(t *testing.T, n workspace.Workspace) {
		if n.ErrorReason != nil || n.ErrorCount != 0 || n.Conditions[workspace.CondHealthy].Status != workspace.ConditionTrue {
			t.Errorf("want success: reason %s count %d healthy %+v", deref(n.ErrorReason), n.ErrorCount, n.Conditions[workspace.CondHealthy])
		}
	}
	cases := []inflight{
		{name: "provisioning done", op: workspace.OpProvisioning, obs: volume, wantOp: workspace.OpNone, phase: workspace.PhaseStandby, write: true},
		{name: "provisioning resubmits", op: workspace.OpProvisioning, obs: Observed{}, wantOp: workspace.OpProvisioning, phase: workspace.PhasePending, steps: []Step{StepProvisionVolume}},
		{name: "provisioning waits", op: workspace.OpProvisioning, obs: Observed{VolumeExists: true}, wantOp: workspace.OpProvisioning, phase: workspace.PhasePending, write: true},
		{name: "starting done", op: workspace.OpStarting, obs: running, wantOp: workspace.OpNone, phase: workspace.PhaseRunning, write: true},
		{name: "starting waits for health", op: workspace.OpStarting, obs: live, wantOp: workspace.OpStarting, phase: workspace.PhaseRunning, write: true},
		{name: "starting resubmits", op: workspace.OpStarting, obs: volume, wantOp: workspace.OpStarting, phase: workspace.PhaseStandby, steps: []Step{StepStartWorkspace}},
		{name: "image pull failed", op: workspace.OpStarting,
			obs:    Observed{VolumeExists: true, VolumeReady: true, Failure: &Failure{Reason: workspace.ReasonImagePullFailed, Terminal: true}},
			wantOp: workspace.OpNone, phase: workspace.PhaseError, write: true, verify: terminal(workspace.ReasonImagePullFailed)},
		{name: "unschedulable retries", op: workspace.OpStarting,
			obs:    Observed{VolumeExists: true, VolumeReady: true, Failure: &Failure{Reason: workspace.ReasonUnschedulable}},
			wantOp: workspace.OpNone, phase: workspace.PhaseStandby, write: true, verify: retry(workspace.ReasonUnschedulable)},
		{name: "starting timeout", op: workspace.OpStarting, obs: volume, started: time.Hour,
			wantOp: workspace.OpNone, phase: workspace.PhaseError, write: true, verify: terminal(workspace.ReasonTimeout)},
		// Work observed finished counts even when the pass that sees it
		// comes late (a leader failover, a slow pass): it is not a timeout.
		{name: "starting done after its timeout", op: workspace.OpStarting, obs: running, started: time.Hour,
			wantOp: workspace.OpNone, phase: workspace.PhaseRunning, write: true, verify: succeeded},
		{name: "stopping done after its timeout", op: workspace.OpStopping, obs: volume, started: time.Hour,
			wantOp: workspace.OpNone, phase: workspace.PhaseStandby, write: true, verify: succeeded},
		{name: "restore done after its timeout", op: workspace.OpRestoring, prep: withArchive, obs: restoreJob(JobSucceeded, ""), started: 2 * time.Hour,
			wantOp: workspace.OpNone, phase: workspace.PhaseStandby, steps: []Step{StepPurgeRestoreJob}, write: true, verify: succeeded},
		{name: "archiving done after its timeout", op: workspace.OpArchiving, prep: committedArchive, obs: Observed{}, started: 2 * time.Hour,
			wantOp: workspace.OpNone, phase: workspace.PhaseArchived, write: true, verify: succeeded},
		// Past the deadline with the archive committed, the data is safe:
		// ARCHIVING ends without ERROR and the idle plan deletes the volume.
		{name: "archive verified at its deadline", op: workspace.OpArchiving, obs: archiveJob(JobSucceeded, ""), started: 2 * time.Hour,
			check:  ArchiveCheck{Key: keyOld, Meta: archive.Meta{Format: archive.Format}},
			wantOp: workspace.OpNone, phase: workspace.PhaseArchived, steps: []Step{StepPurgeArchiveJob}, write: true,
			verify: func(t *testing.T, n workspace.Workspace) {
				succeeded(t, n)
				if deref(n.ArchiveKey) != keyOld {
					t.Errorf("archive key %q not committed", deref(n.ArchiveKey))
				}
			}},
		{name: "committed archive's volume outlasts the deadline", op: workspace.OpArchiving, prep: committedArchive, obs: volume, started: 2 * time.Hour,
			wantOp: workspace.OpNone, phase: workspace.PhaseArchived, steps: []Step{StepDeleteVolume}, write: true, verify: succeeded},
		{name: "restore still running times out", op: workspace.OpRestoring, prep: withArchive, obs: restoreJob(JobRunning, ""), started: 2 * time.Hour,
			wantOp: workspace.OpNone, phase: workspace.PhaseError, write: true, verify: terminal(workspace.ReasonTimeout)},
		{name: "stopping resubmits", op: workspace.OpStopping, obs: running, wantOp: workspace.OpStopping, phase: workspace.PhaseRunning, steps: []Step{StepStopWorkspace}},
		{name: "stopping done when no allocation is live", op: workspace.OpStopping, obs: volume, wantOp: workspace.OpNone, phase: workspace.PhaseStandby, write: true},
		{name: "restoring provisions", op: workspace.OpRestoring, prep: withArchive, obs: Observed{}, wantOp: workspace.OpRestoring, phase: workspace.PhaseArchived, steps: []Step{StepProvisionVolume}},
		{name: "restoring submits", op: workspace.OpRestoring, prep: withArchive, obs: volume, wantOp: workspace.OpRestoring, phase: workspace.PhaseArchived, steps: []Step{StepSubmitRestore}, write: true},
		{name: "restoring waits for job", op: workspace.OpRestoring, prep: withArchive, obs: restoreJob(JobRunning, ""), wantOp: workspace.OpRestoring, phase: workspace.PhaseArchived, write: true},
		{name: "restore done sets marker", op: workspace.OpRestoring, prep: withArchive, obs: restoreJob(JobSucceeded, ""),
			wantOp: workspace.OpNone, phase: workspace.PhaseStandby, steps: []Step{StepPurgeRestoreJob}, write: true,
			verify: func(t *testing.T, n workspace.Workspace) {
				if deref(n.RestoreMarker) != keyOld {
					t.Errorf("restore marker = %q", deref(n.RestoreMarker))
				}
			}},
		{name: "restore of missing archive is data loss", op: workspace.OpRestoring, prep: withArchive, obs: restoreJob(JobFailed, "ARCHIVE_NOT_FOUND"),
			wantOp: workspace.OpNone, phase: workspace.PhaseError, steps: []Step{StepPurgeRestoreJob}, write: true, verify: terminal(workspace.ReasonDataLost)},
		{name: "restore S3 failure retries", op: workspace.OpRestoring, prep: withArchive, obs: restoreJob(JobFailed, "S3_ACCESS_ERROR"),
			wantOp: workspace.OpNone, phase: workspace.PhaseArchived, steps: []Step{StepPurgeRestoreJob}, write: true, verify: retry(workspace.ReasonUnreachable)},
		{name: "restore of an older attempt is resubmitted", op: workspace.OpRestoring, prep: func(w *workspace.Workspace) { withArchive(w); w.OpAttempt = 3 },
			obs: restoreJob(JobFailed, "UNKNOWN"), wantOp: workspace.OpRestoring, phase: workspace.PhaseArchived, steps: []Step{StepSubmitRestore}, write: true},
		{name: "archiving submits", op: workspace.OpArchiving, obs: volume, wantOp: workspace.OpArchiving, phase: workspace.PhaseStandby, steps: []Step{StepSubmitArchive}},
		{name: "archiving waits for job", op: workspace.OpArchiving, obs: archiveJob(JobRunning, ""), wantOp: workspace.OpArchiving, phase: workspace.PhaseStandby},
		{name: "archive verified is committed before the volume goes", op: workspace.OpArchiving, obs: archiveJob(JobSucceeded, ""),
			check:  ArchiveCheck{Key: keyOld, Meta: archive.Meta{Format: archive.Format}},
			wantOp: workspace.OpArchiving, phase: workspace.PhaseArchived, steps: []Step{StepPurgeArchiveJob}, write: true,
			verify: func(t *testing.T, n workspace.Workspace) {
				if deref(n.ArchiveKey) != keyOld || n.Conditions[workspace.CondArchiveReady].Status != workspace.ConditionTrue {
					t.Errorf("archive key %q, archive_ready %+v", deref(n.ArchiveKey), n.Conditions[workspace.CondArchiveReady])
				}
			}},
		{name: "archive unverifiable waits", op: workspace.OpArchiving, obs: archiveJob(JobSucceeded, ""),
			check:  ArchiveCheck{Key: keyOld, Err: fmt.Errorf("stat: %w", &archive.Error{Code: archive.CodeS3Access})},
			wantOp: workspace.OpArchiving, phase: workspace.PhaseStandby},
		{name: "archive missing after success retries", op: workspace.OpArchiving, obs: archiveJob(JobSucceeded, ""),
			check:  ArchiveCheck{Key: keyOld, Err: fmt.Errorf("stat: %w", archive.ErrMetaNotFound)},
			wantOp: workspace.OpNone, phase: workspace.PhaseStandby, steps: []Step{StepPurgeArchiveJob}, write: true, verify: retry(workspace.ReasonArchiveFailed)},
		{name: "archive corrupt is terminal", op: workspace.OpArchiving, obs: archiveJob(JobSucceeded, ""),
			check:  ArchiveCheck{Key: keyOld, Err: fmt.Errorf("stat: %w", archive.ErrChecksumMismatch)},
			wantOp: workspace.OpNone, phase: workspace.PhaseError, steps: []Step{StepPurgeArchiveJob}, write: true, verify: terminal(workspace.ReasonArchiveCorrupted)},
		{name: "archive job failed", op: workspace.OpArchiving, obs: archiveJob(JobFailed, "DISK_FULL"),
			wantOp: workspace.OpNone, phase: workspace.PhaseStandby, steps: []Step{StepPurgeArchiveJob}, write: true, verify: retry(workspace.ReasonArchiveFailed)},
		{name: "committed archive deletes volume", op: workspace.OpArchiving, prep: committedArchive, obs: volume,
			wantOp: workspace.OpArchiving, phase: workspace.PhaseArchived, steps: []Step{StepDeleteVolume}},
		{name: "committed archive waits for the container", op: workspace.OpArchiving, prep: committedArchive, obs: live,
			wantOp: workspace.OpArchiving, phase: workspace.PhaseArchived, write: true},
		{name: "archiving done when volume gone", op: workspace.OpArchiving, prep: committedArchive, obs: Observed{},
			wantOp: workspace.OpNone, phase: workspace.PhaseArchived, write: true},
		{name: "volume lost before commit", op: workspace.OpArchiving, obs: Observed{},
			wantOp: workspace.OpNone, phase: workspace.PhaseError, write: true, verify: terminal(workspace.ReasonDataLost)},
		{name: "empty archive created", op: workspace.OpCreateEmptyArchive, obs: Observed{},
			check:  ArchiveCheck{Key: keyOld, Err: archive.ErrArchiveNotFound},
			wantOp: workspace.OpCreateEmptyArchive, phase: workspace.PhasePending, steps: []Step{StepCreateEmptyArchive}},
		{name: "empty archive committed", op: workspace.OpCreateEmptyArchive, obs: Observed{},
			check:  ArchiveCheck{Key: keyOld},
			wantOp: workspace.OpNone, phase: workspace.PhaseArchived, write: true},
		{name: "deleting stops the container first", op: workspace.OpDeleting, obs: running,
			wantOp: workspace.OpDeleting, phase: workspace.PhaseDeleting, steps: []Step{StepDiscardWorkspace}, write: true},
		{name: "deleting then the jobs and the volume", op: workspace.OpDeleting, obs: archiveJob(JobSucceeded, ""),
			wantOp: workspace.OpDeleting, phase: workspace.PhaseDeleting, steps: []Step{StepPurgeArchiveJob, StepDeleteVolume}},
		{name: "deleting finishes", op: workspace.OpDeleting, obs: Observed{},
			wantOp: workspace.OpNone, phase: workspace.PhaseDeleted, steps: []Step{StepPurgeWorkspaceJob}, write: true},
		{name: "deleting finishes after its timeout", op: workspace.OpDeleting, obs: Observed{}, started: time.Hour,
			wantOp: workspace.OpNone, phase: workspace.PhaseDeleted, steps: []Step{StepPurgeWorkspaceJob}, write: true, verify: succeeded},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			w := workspace.Workspace{ID: wsID, OwnerID: "u", DesiredState: workspace.DesiredRunning,
				Operation: c.op, OpID: ptr(opOld), OpAttempt: 2, RunID: "run1"}
			started := c.started
			if started == 0 {
				started = time.Second
			}
			w.OpStartedAt = ptr(t0.Add(-started))
			// The stored conditions are those of the steady state before
			// the operation: a volume unless the operation creates one.
			before := Observed{VolumeExists: true, VolumeReady: true}
			switch c.op {
			case workspace.OpProvisioning, workspace.OpCreateEmptyArchive, workspace.OpRestoring:
				before = Observed{}
			case workspace.OpStopping:
				before = running
			case workspace.OpDeleting:
				w.DeletedAt = ptr(t0.Add(-time.Minute))
			}
			if c.prep != nil {
				c.prep(&w)
			}
			w.Conditions = observeConditions(w, before, t0.Add(-time.Hour))
			derive(w.Conditions, &w, t0.Add(-time.Hour))
			if c.op == workspace.OpDeleting {
				w.Phase = workspace.PhaseDeleting
			}
			a := Plan(w, c.obs, c.check, t0, testCfg)
			if a.Next.Operation != c.wantOp || a.Next.Phase != c.phase || !slices.Equal(a.Steps, c.steps) {
				t.Fatalf("plan = op %s phase %s steps %v; want op %s phase %s steps %v",
					a.Next.Operation, a.Next.Phase, a.Steps, c.wantOp, c.phase, c.steps)
			}
			if a.Write != c.write {
				t.Errorf("write = %v, want %v", a.Write, c.write)
			}
			// Only a claim starts a run; a resubmission keeps the token.
			if a.Next.RunID != "run1" {
				t.Errorf("run id %q, want the operation's run1", a.Next.RunID)
			}
			if c.verify != nil {
				c.verify(t, a.Next)
			}
		})
	}
}

func TestPlanRules(t *testing.T) {
	t.Run("backoff delays the next attempt", func(t *testing.T) {
		w := stored(workspace.PhaseStandby, workspace.DesiredRunning, observed(workspace.PhaseStandby))
		w.ErrorReason, w.ErrorCount, w.NextAttemptAt = ptr(workspace.ReasonStartFailed), 1, ptr(t0.Add(time.Second))
		if a := Plan(w, observed(workspace.PhaseStandby), ArchiveCheck{}, t0, testCfg); a.Next.Operation != workspace.OpNone || a.Write {
			t.Errorf("claimed %s during backoff", a.Next.Operation)
		}
		a := Plan(w, observed(workspace.PhaseStandby), ArchiveCheck{}, t0.Add(2*time.Second), testCfg)
		if a.Next.Operation != workspace.OpStarting || deref(a.Next.ErrorReason) != workspace.ReasonStartFailed {
			t.Errorf("after backoff: op %s, error kept %v", a.Next.Operation, a.Next.ErrorReason)
		}
	})
	t.Run("third failure is ERROR", func(t *testing.T) {
		w := stored(workspace.PhaseStandby, workspace.DesiredRunning, observed(workspace.PhaseStandby))
		w.Operation, w.OpStartedAt, w.ErrorReason, w.ErrorCount = workspace.OpStarting, ptr(t0), ptr(workspace.ReasonUnschedulable), 2
		obs := observed(workspace.PhaseStandby)
		obs.Failure = &Failure{Reason: workspace.ReasonUnschedulable}
		a := Plan(w, obs, ArchiveCheck{}, t0, testCfg)
		if a.Next.Phase != workspace.PhaseError || a.Next.ErrorCount != 3 || a.Next.Operation != workspace.OpNone {
			t.Errorf("phase %s count %d op %s", a.Next.Phase, a.Next.ErrorCount, a.Next.Operation)
		}
	})
	t.Run("container without volume", func(t *testing.T) {
		w := stored(workspace.PhaseRunning, workspace.DesiredRunning, observed(workspace.PhaseRunning))
		obs := Observed{ContainerLive: true}
		a := Plan(w, obs, ArchiveCheck{}, t0, testCfg)
		if a.Next.Phase != workspace.PhaseError || deref(a.Next.ErrorReason) != workspace.ReasonContainerWithoutVolume {
			t.Fatalf("phase %s reason %s", a.Next.Phase, deref(a.Next.ErrorReason))
		}
		if b := Plan(a.Next, obs, ArchiveCheck{}, t0.Add(time.Minute), testCfg); b.Write || len(b.Steps) > 0 {
			t.Errorf("recorded violation planned again: %+v", b)
		}
	})
	t.Run("unavailable home is neither replaced nor deleted", func(t *testing.T) {
		// A volume whose node is down exists but is not ready. Restored
		// from its archive (marker = key), or never archived, it still
		// holds the home: no restore over it, no empty archive in its
		// place, no deletion as a leftover of a failed restore.
		unavailable := Observed{VolumeExists: true}
		restored := stored(workspace.PhaseStandby, workspace.DesiredStandby, observed(workspace.PhaseStandby))
		restored.ArchiveKey, restored.RestoreMarker = ptr(keyOld), ptr(keyOld)
		derive(restored.Conditions, &restored, t0.Add(-time.Hour))
		fresh := stored(workspace.PhaseStandby, workspace.DesiredArchived, observed(workspace.PhaseStandby))
		for name, w := range map[string]workspace.Workspace{
			"restored, desired RUNNING":        withDesired(restored, workspace.DesiredRunning),
			"restored, desired ARCHIVED":       withDesired(restored, workspace.DesiredArchived),
			"never archived, desired ARCHIVED": fresh,
			// Before, these claimed PROVISIONING, which timed out into
			// ERROR while the node was away.
			"never archived, desired RUNNING": withDesired(fresh, workspace.DesiredRunning),
			"never archived, desired STANDBY": withDesired(fresh, workspace.DesiredStandby),
		} {
			for pass := range 2 {
				a := Plan(w, unavailable, ArchiveCheck{}, t0.Add(time.Duration(pass)*time.Minute), testCfg)
				if a.Next.Operation != workspace.OpNone || len(a.Steps) > 0 {
					t.Errorf("%s, pass %d: claimed %s with steps %v", name, pass, a.Next.Operation, a.Steps)
				}
				w = a.Next
			}
		}
	})
	t.Run("unavailable home that vanishes is data loss", func(t *testing.T) {
		restored := stored(workspace.PhaseStandby, workspace.DesiredRunning, observed(workspace.PhaseStandby))
		restored.ArchiveKey, restored.RestoreMarker = ptr(keyOld), ptr(keyOld)
		derive(restored.Conditions, &restored, t0.Add(-time.Hour))
		// Before, a never-archived home lost this way was provisioned
		// again, empty, without a word.
		fresh := stored(workspace.PhaseStandby, workspace.DesiredRunning, observed(workspace.PhaseStandby))
		fresh.RunID = "01jb3x7k9q2m5n8p4r6s0t1ran"
		for name, w := range map[string]workspace.Workspace{"restored": restored, "never archived": fresh} {
			// The node goes down: the pass records the volume as not ready.
			a := Plan(w, Observed{VolumeExists: true}, ArchiveCheck{}, t0, testCfg)
			// It never comes back; its volume is gone.
			b := Plan(a.Next, Observed{}, ArchiveCheck{}, t0.Add(time.Hour), testCfg)
			if b.Next.Phase != workspace.PhaseError || deref(b.Next.ErrorReason) != workspace.ReasonDataLost || len(b.Steps) > 0 {
				t.Errorf("%s: phase %s op %s reason %s steps %v", name, b.Next.Phase, b.Next.Operation, deref(b.Next.ErrorReason), b.Steps)
			}
		}
	})
	t.Run("home volume vanished", func(t *testing.T) {
		w := stored(workspace.PhaseStandby, workspace.DesiredStandby, observed(workspace.PhaseStandby))
		w.RunID = "01jb3x7k9q2m5n8p4r6s0t1ran"
		a := Plan(w, Observed{}, ArchiveCheck{}, t0, testCfg)
		if a.Next.Phase != workspace.PhaseError || deref(a.Next.ErrorReason) != workspace.ReasonDataLost {
			t.Fatalf("phase %s reason %s", a.Next.Phase, deref(a.Next.ErrorReason))
		}
	})
	t.Run("a volume no program ran on vanished", func(t *testing.T) {
		// Empty: it is made again, wherever the volume goes.
		w := stored(workspace.PhaseStandby, workspace.DesiredStandby, observed(workspace.PhaseStandby))
		a := Plan(w, Observed{}, ArchiveCheck{}, t0, testCfg)
		if a.Next.Phase != workspace.PhasePending || a.Next.Operation != workspace.OpProvisioning || !slices.Equal(a.Steps, []Step{StepProvisionVolume}) {
			t.Fatalf("phase %s op %s steps %v, want a new volume", a.Next.Phase, a.Next.Operation, a.Steps)
		}
	})
	t.Run("archive retry reuses an uncommitted op id", func(t *testing.T) {
		w := stored(workspace.PhaseStandby, workspace.DesiredArchived, observed(workspace.PhaseStandby))
		w.OpID = ptr(opOld)
		if a := Plan(w, observed(workspace.PhaseStandby), ArchiveCheck{}, t0, testCfg); deref(a.Next.OpID) != opOld {
			t.Errorf("op id %s, want reused %s", deref(a.Next.OpID), opOld)
		}
		// A home restored from its archive that ran since.
		w.ArchiveKey, w.RestoreMarker, w.RunID = ptr(keyOld), ptr(keyOld), "01jb3x7k9q2m5n8p4r6s0t1ran"
		if a := Plan(w, observed(workspace.PhaseStandby), ArchiveCheck{}, t0, testCfg); deref(a.Next.OpID) != opNew {
			t.Errorf("op id %s, want a new one after a committed archive", deref(a.Next.OpID))
		}
	})
	t.Run("other operations drop the op id", func(t *testing.T) {
		w := stored(workspace.PhaseStandby, workspace.DesiredRunning, observed(workspace.PhaseStandby))
		w.OpID = ptr(opOld)
		if a := Plan(w, observed(workspace.PhaseStandby), ArchiveCheck{}, t0, testCfg); a.Next.OpID != nil {
			t.Errorf("STARTING kept op id %s", deref(a.Next.OpID))
		}
	})
	t.Run("deleted workspace finishes its operation first", func(t *testing.T) {
		w := stored(workspace.PhaseStandby, workspace.DesiredDeleted, observed(workspace.PhaseStandby))
		w.Operation, w.OpStartedAt, w.DeletedAt = workspace.OpStarting, ptr(t0), ptr(t0)
		if a := Plan(w, observed(workspace.PhaseStandby), ArchiveCheck{}, t0, testCfg); a.Next.Operation != workspace.OpStarting {
			t.Errorf("operation %s", a.Next.Operation)
		}
	})
	t.Run("stale batch jobs are purged when converged, an archive job of no operation stopped", func(t *testing.T) {
		w := stored(workspace.PhaseStandby, workspace.DesiredStandby, observed(workspace.PhaseStandby))
		obs := observed(workspace.PhaseStandby)
		obs.Restore = &JobResult{Status: JobSucceeded}
		obs.Archive = &JobResult{Status: JobRunning}
		if a := Plan(w, obs, ArchiveCheck{}, t0, testCfg); a.Write || !slices.Equal(a.Steps, []Step{StepStopArchiveJob, StepPurgeRestoreJob}) {
			t.Errorf("write %v steps %v", a.Write, a.Steps)
		}
	})
	t.Run("interrupted archive deletes the leftover volume", func(t *testing.T) {
		w := stored(workspace.PhaseArchived, workspace.DesiredArchived, observed(workspace.PhaseStandby))
		w.OpID = ptr(opOld)
		a := Plan(w, observed(workspace.PhaseStandby), ArchiveCheck{}, t0, testCfg)
		if a.Next.Operation != workspace.OpArchiving || deref(a.Next.OpID) != opOld || !slices.Equal(a.Steps, []Step{StepDeleteVolume}) {
			t.Errorf("op %s op id %s steps %v", a.Next.Operation, deref(a.Next.OpID), a.Steps)
		}
	})
	t.Run("a failed restore's volume goes once the workspace is to stay archived", func(t *testing.T) {
		// RESTORING provisioned a volume and its job failed; then the user
		// chose to keep the workspace archived.
		w := stored(workspace.PhaseArchived, workspace.DesiredArchived, observed(workspace.PhaseStandby))
		w.OpID = ptr(opNew)
		w.ErrorReason, w.ErrorCount = ptr(workspace.ReasonRestoreFailed), 1
		obs := observed(workspace.PhaseStandby)
		obs.Restore = &JobResult{Status: JobRunning}
		if a := Plan(w, obs, ArchiveCheck{}, t0, testCfg); len(a.Steps) > 0 || a.Next.Operation != workspace.OpNone {
			t.Errorf("with the restore job still running: op %s steps %v", a.Next.Operation, a.Steps)
		}
		obs.Restore = &JobResult{Status: JobFailed}
		a := Plan(w, obs, ArchiveCheck{}, t0, testCfg)
		if a.Next.Operation != workspace.OpNone || !slices.Equal(a.Steps, []Step{StepPurgeRestoreJob, StepStopWorkspace, StepDeleteVolume}) {
			t.Errorf("op %s steps %v", a.Next.Operation, a.Steps)
		}
		if deref(a.Next.ArchiveKey) != keyOld || a.Next.Phase != workspace.PhaseArchived {
			t.Errorf("archive key %s phase %s: the archive must stay the workspace's", deref(a.Next.ArchiveKey), a.Next.Phase)
		}
		// Restored volumes are the home: never deleted this way.
		w.RestoreMarker = ptr(keyOld)
		w.Phase = workspace.PhaseStandby
		if a := Plan(w, observed(workspace.PhaseStandby), ArchiveCheck{}, t0, testCfg); slices.Contains(a.Steps, StepDeleteVolume) {
			t.Errorf("a restored home was planned for deletion: %v", a.Steps)
		}
	})
	t.Run("backoff doubles up to the cap", func(t *testing.T) {
		got := []time.Duration{testCfg.backoff(1), testCfg.backoff(2), testCfg.backoff(3), testCfg.backoff(30)}
		want := []time.Duration{5 * time.Second, 10 * time.Second, 20 * time.Second, 5 * time.Minute}
		if !slices.Equal(got, want) {
			t.Errorf("backoff = %v, want %v", got, want)
		}
	})
}

func withDesired(w workspace.Workspace, d workspace.DesiredState) workspace.Workspace {
	w.DesiredState = d
	return w
}

func TestWithOutput(t *testing.T) {
	// code-server's own failure: the cause is several lines above the end.
	out := "node:internal/modules/cjs/loader:1210\n  throw err;\n  ^\n\nError: Cannot find module './cli'\n" +
		"Require stack:\n- /usr/lib/code-server/out/node/entry.js\n    at Module._resolveFilename (node:internal)\n\nNode.js v20.20.2\n\n"
	got := WithOutput("exited with code 1", out)
	if !strings.HasPrefix(got, "exited with code 1, its output ending:\n") || !strings.Contains(got, "Cannot find module './cli'") ||
		!strings.HasSuffix(got, "Node.js v20.20.2") || strings.Contains(got, "\n\n") {
		t.Errorf("WithOutput = %q", got)
	}
	if got := WithOutput("failed", "\n \n"); got != "failed" {
		t.Errorf("no output: %q", got)
	}
	var many []string
	for i := range 20 {
		many = append(many, fmt.Sprint("line ", i))
	}
	if got := WithOutput("m", strings.Join(many, "\n")); !strings.HasSuffix(got, "\n"+strings.Join(many[20-OutputLines:], "\n")) || strings.Contains(got, "line 7\n") {
		t.Errorf("line bound: %q", got)
	}
	if got := WithOutput("m", strings.Repeat("x", OutputBytes+1)+"\nshort\n"); got != "m, its output ending:\nshort" {
		t.Errorf("byte bound: %q", got)
	}
}

// TestPlanStartDeadlineCountsTheProgram: a start's deadline does not run
// while its node prepares the program (a wave's last starts wait there for
// minutes on a busy node), and runs from when the program began if that
// came later than the operation; a program that runs unhealthy past it,
// or a start nothing was placed for, still times out.
func TestPlanStartDeadlineCountsTheProgram(t *testing.T) {
	limit := testCfg.Timeouts[workspace.OpStarting]
	live := Observed{VolumeExists: true, VolumeReady: true, ContainerLive: true, RunStarted: true}
	for _, c := range []struct {
		name      string
		obs       Observed
		after     time.Duration
		wantError bool
	}{
		{"within the deadline", live, limit - time.Second, false},
		{"past it, the program running all along", live, limit + time.Second, true},
		{"past it, still being prepared", Observed{VolumeExists: true, VolumeReady: true, ContainerLive: true, Preparing: true}, 3 * limit, false},
		{"past it, running for a minute", withRunning(live, t0.Add(-time.Minute)), 3 * limit, false},
		{"past it, running unhealthy for longer", withRunning(live, t0.Add(-limit-time.Second)), 3 * limit, true},
		{"running since before the operation", withRunning(live, t0.Add(-4*limit)), limit + time.Second, true},
		{"past it, nothing placed", Observed{VolumeExists: true, VolumeReady: true}, limit + time.Second, true},
	} {
		t.Run(c.name, func(t *testing.T) { checkStartDeadline(t, testCfg, c.obs, c.after, c.wantError) })
	}
}

// checkStartDeadline plans a start of run opOld that began ago, as obs
// shows it, and checks that it timed out or goes on as wantError says.
func checkStartDeadline(t *testing.T, cfg Config, obs Observed, ago time.Duration, wantError bool) {
	t.Helper()
	w := stored(workspace.PhaseStandby, workspace.DesiredRunning, observed(workspace.PhaseStandby))
	w.Operation, w.RunID = workspace.OpStarting, opOld
	started := t0.Add(-ago)
	w.OpStartedAt = &started
	a := Plan(w, obs, ArchiveCheck{}, t0, cfg)
	if failed := deref(a.Next.ErrorReason) == workspace.ReasonTimeout; failed != wantError {
		t.Fatalf("op %s phase %s error %s; want a timeout: %v", a.Next.Operation, a.Next.Phase, deref(a.Next.ErrorReason), wantError)
	}
	if !wantError && a.Next.Operation != workspace.OpStarting {
		t.Errorf("operation %s, want STARTING still", a.Next.Operation)
	}
}

// TestPlanStartDeadlineCountsFromSubmission: where the backend reports
// submissions, a start's deadline does not run before the controller
// has submitted this run, and counts from that submission.
func TestPlanStartDeadlineCountsFromSubmission(t *testing.T) {
	limit := testCfg.Timeouts[workspace.OpStarting]
	cfg := testCfg
	cfg.submissions = true
	ready := Observed{VolumeExists: true, VolumeReady: true}
	submitted := func(o Observed, run string, ago time.Duration) Observed {
		o.Submitted, o.SubmittedRun = t0.Add(-ago), run
		return o
	}
	live := Observed{VolumeExists: true, VolumeReady: true, ContainerLive: true, RunStarted: true}
	for _, c := range []struct {
		name      string
		obs       Observed
		wantError bool
	}{
		{"not submitted yet", ready, false},
		{"an earlier run's registration", submitted(ready, opOld+"x", 3*limit), false},
		{"submitted a minute ago, not placed", submitted(ready, opOld, time.Minute), false},
		{"submitted long ago, never placed", submitted(ready, opOld, limit+time.Second), true},
		{"submitted long ago, still being prepared", withPreparing(submitted(ready, opOld, 2*limit)), false},
		{"submitted long ago, running a minute", withRunning(submitted(live, opOld, 2*limit), t0.Add(-time.Minute)), false},
		{"submitted long ago, running unhealthy for longer", withRunning(submitted(live, opOld, 2*limit), t0.Add(-limit-time.Second)), true},
	} {
		t.Run(c.name, func(t *testing.T) { checkStartDeadline(t, cfg, c.obs, 3*limit, c.wantError) })
	}
	// The same start past its deadline, from a backend that reports no
	// submissions: it counts from the operation.
	t.Run("no submissions reported", func(t *testing.T) { checkStartDeadline(t, testCfg, ready, 3*limit, true) })
}

func withPreparing(o Observed) Observed {
	o.ContainerLive, o.Preparing = true, true
	return o
}

func withRunning(o Observed, since time.Time) Observed {
	o.RunningSince = since
	return o
}

// submittingBackend reports submissions, as the Nomad backend does.
type submittingBackend struct{ staticBackend }

func (*submittingBackend) ReportsSubmissions() bool { return true }

// TestControllerCountsFromSubmissionsWhereReported: the controller asks
// its backend whether it reports submissions, and plans by the answer.
func TestControllerCountsFromSubmissionsWhereReported(t *testing.T) {
	if c := NewWorkspaceController(hclog.NewNullLogger(), nil, &staticBackend{}, nil, DefaultConfig()); c.cfg.submissions {
		t.Error("a backend that says nothing of submissions: the deadline waits for one")
	}
	if c := NewWorkspaceController(hclog.NewNullLogger(), nil, &submittingBackend{}, nil, DefaultConfig()); !c.cfg.submissions {
		t.Error("a backend that reports submissions: the deadline does not wait for one")
	}
}
