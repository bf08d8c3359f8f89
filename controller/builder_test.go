package controller

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/codehub-io/codehub/archive"
	"github.com/codehub-io/codehub/workspace"
)

// TestPlanBuilder walks a prebuild's builder through the plan: its volume
// is made (never an empty archive), its archiving is its prebuild, which
// commits the key its job completed with the commit, and a failed build
// is an ERROR at once.
func TestPlanBuilder(t *testing.T) {
	const commit = "0123456789abcdef0123456789abcdef01234567"
	prefix := archive.PrebuildPrefix(wsID, opOld, "web", "v2")
	built := archive.PrebuildKey(prefix, commit)
	builder := func(phase workspace.Phase, op workspace.Operation, obs Observed) workspace.Workspace {
		w := stored(phase, workspace.DesiredArchived, obs)
		w.ArchiveKey = nil
		w.PrebuildOf, w.Template, w.TemplateVersion = ptr("pb1"), "web", "v2"
		if op != workspace.OpNone {
			w.Operation, w.OpID, w.OpAttempt, w.OpStartedAt = op, ptr(opOld), 2, ptr(t0.Add(-time.Second))
		}
		return w
	}
	volume := Observed{VolumeExists: true, VolumeReady: true}
	job := func(status JobStatus, code archive.Code) Observed {
		o := volume
		o.Archive = &JobResult{OpID: opOld, ArchiveKey: prefix, Attempt: 2, Status: status, ErrorCode: code, Message: "npm ci exited 1"}
		return o
	}
	for _, c := range []struct {
		name   string
		w      workspace.Workspace
		obs    Observed
		check  ArchiveCheck
		op     workspace.Operation
		steps  []Step
		verify func(t *testing.T, n workspace.Workspace)
	}{
		{name: "a new builder gets a volume", w: builder(workspace.PhasePending, workspace.OpNone, Observed{}),
			op: workspace.OpProvisioning, steps: []Step{StepProvisionVolume}},
		{name: "its empty volume is built and archived", w: builder(workspace.PhaseStandby, workspace.OpNone, volume), obs: volume,
			op: workspace.OpArchiving, steps: []Step{StepSubmitArchive}},
		{name: "the build runs", w: builder(workspace.PhaseStandby, workspace.OpArchiving, volume), obs: job(JobRunning, ""),
			op: workspace.OpArchiving},
		{name: "the prebuilt home is committed under its commit's key", w: builder(workspace.PhaseStandby, workspace.OpArchiving, volume),
			obs: job(JobSucceeded, ""), check: ArchiveCheck{Key: built}, op: workspace.OpArchiving, steps: []Step{StepPurgeArchiveJob},
			verify: func(t *testing.T, n workspace.Workspace) {
				if deref(n.ArchiveKey) != built || !workspace.ArchiveCommitted(n) || workspace.Building(n) {
					t.Errorf("archive key %q, committed %v", deref(n.ArchiveKey), workspace.ArchiveCommitted(n))
				}
			}},
		{name: "a key under another prefix is not its", w: builder(workspace.PhaseStandby, workspace.OpArchiving, volume),
			obs: job(JobSucceeded, ""), check: ArchiveCheck{Key: archive.PrebuildKey(archive.PrebuildPrefix(wsID, opNew, "web", "v2"), commit)},
			op: workspace.OpArchiving, verify: func(t *testing.T, n workspace.Workspace) {
				if n.ArchiveKey != nil {
					t.Errorf("committed %q", *n.ArchiveKey)
				}
			}},
		{name: "a job that succeeded without an archive is retried", w: builder(workspace.PhaseStandby, workspace.OpArchiving, volume),
			obs: job(JobSucceeded, ""), check: ArchiveCheck{Key: prefix, Err: archive.ErrArchiveNotFound}, op: workspace.OpNone,
			steps: []Step{StepPurgeArchiveJob}, verify: func(t *testing.T, n workspace.Workspace) {
				if deref(n.ErrorReason) != workspace.ReasonArchiveFailed || n.ErrorCount != 1 {
					t.Errorf("reason %q count %d", deref(n.ErrorReason), n.ErrorCount)
				}
			}},
		{name: "a failed build is an error at once, saying why", w: builder(workspace.PhaseStandby, workspace.OpArchiving, volume),
			obs: job(JobFailed, archive.CodeBuildFailed), op: workspace.OpNone, steps: []Step{StepPurgeArchiveJob},
			verify: func(t *testing.T, n workspace.Workspace) {
				if deref(n.ErrorReason) != workspace.ReasonBuildFailed || n.Phase != workspace.PhaseError || !strings.Contains(deref(n.ErrorMessage), "npm ci exited 1") {
					t.Errorf("phase %s reason %q message %q", n.Phase, deref(n.ErrorReason), deref(n.ErrorMessage))
				}
			}},
	} {
		t.Run(c.name, func(t *testing.T) {
			if key := needsArchiveCheck(c.w, c.obs); c.obs.Archive != nil && c.obs.Archive.Status == JobSucceeded && key != prefix {
				t.Errorf("needsArchiveCheck = %q, want the prefix %q", key, prefix)
			}
			a := Plan(c.w, c.obs, c.check, t0, testCfg)
			if a.Next.Operation != c.op || !slices.Equal(a.Steps, c.steps) {
				t.Fatalf("plan = op %s steps %v, want op %s steps %v", a.Next.Operation, a.Steps, c.op, c.steps)
			}
			if c.verify != nil {
				c.verify(t, a.Next)
			}
		})
	}
}
