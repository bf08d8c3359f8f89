package controller

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/codehub-io/codehub/workspace"
)

// away is the observation of phase with the volume's node away for reason:
// a node that is down or gone makes the volume unready; a drained one
// leaves it ready, but nothing new is placed there.
func away(phase workspace.Phase, reason string) Observed {
	obs := observed(phase)
	obs.Node, obs.NodeAway = "node-a", reason
	if reason != workspace.ReasonNodeIneligible {
		obs.VolumeReady, obs.ContainerLive, obs.UpstreamReady = false, false, false
	}
	return obs
}

// TestPlanNodeAway: a home whose node cannot serve it waits, whatever is
// asked, and says which node it waits for; nothing is provisioned, archived,
// restored or deleted in its place, and no ERROR follows.
func TestPlanNodeAway(t *testing.T) {
	cases := []struct {
		name    string
		phase   workspace.Phase
		desired workspace.DesiredState
		reason  string
		display string
	}{
		{"never archived, standby, node down", workspace.PhaseStandby, workspace.DesiredStandby, workspace.ReasonNodeDown, workspace.DisplayUnavailable},
		{"never archived, opened, node down", workspace.PhaseStandby, workspace.DesiredRunning, workspace.ReasonNodeDown, workspace.DisplayUnavailable},
		{"never archived, to archive, node down", workspace.PhaseStandby, workspace.DesiredArchived, workspace.ReasonNodeDown, workspace.DisplayUnavailable},
		{"running, node down", workspace.PhaseRunning, workspace.DesiredRunning, workspace.ReasonNodeDown, workspace.DisplayUnavailable},
		{"ghost volume, node gone", workspace.PhaseStandby, workspace.DesiredRunning, workspace.ReasonNodeGone, workspace.DisplayUnavailable},
		{"standby, opened, node drained", workspace.PhaseStandby, workspace.DesiredRunning, workspace.ReasonNodeIneligible, workspace.DisplayUnavailable},
		{"standby, to archive, node drained", workspace.PhaseStandby, workspace.DesiredArchived, workspace.ReasonNodeIneligible, workspace.DisplayUnavailable},
		{"standby stays, node drained", workspace.PhaseStandby, workspace.DesiredStandby, workspace.ReasonNodeIneligible, workspace.DisplayUnavailable},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			w := stored(c.phase, c.desired, observed(c.phase))
			obs := away(c.phase, c.reason)
			for pass := range 3 {
				a := Plan(w, obs, ArchiveCheck{}, t0.Add(time.Duration(pass)*time.Hour), testCfg)
				if a.Next.Operation != workspace.OpNone || len(a.Steps) != 0 {
					t.Fatalf("pass %d: plan = op %s steps %v, want a wait", pass, a.Next.Operation, a.Steps)
				}
				if a.Next.Phase == workspace.PhaseError {
					t.Fatalf("pass %d: ERROR while the node is away", pass)
				}
				w = a.Next
			}
			if got := workspace.DisplayPhase(w); got != c.display {
				t.Errorf("display %s, want %s", got, c.display)
			}
			msg, ok := workspace.Unavailable(w)
			if !ok || !strings.Contains(msg, "node node-a") {
				t.Errorf("unavailable message %q (%v) does not name the node", msg, ok)
			}
			if n := w.Conditions[workspace.CondVolumeReady].Node; n != "node-a" {
				t.Errorf("volume condition names node %q", n)
			}
		})
	}
}

// TestPlanNodeBack: once the node serves again the workspace resumes with
// the volume it had, and is no longer shown unavailable.
func TestPlanNodeBack(t *testing.T) {
	w := stored(workspace.PhaseStandby, workspace.DesiredRunning, observed(workspace.PhaseStandby))
	a := Plan(w, away(workspace.PhaseStandby, workspace.ReasonNodeDown), ArchiveCheck{}, t0, testCfg)
	w = a.Next
	back := observed(workspace.PhaseStandby)
	back.Node = "node-a"
	a = Plan(w, back, ArchiveCheck{}, t0.Add(time.Hour), testCfg)
	if a.Next.Operation != workspace.OpStarting || !slices.Equal(a.Steps, []Step{StepStartWorkspace}) {
		t.Fatalf("plan = op %s steps %v, want STARTING", a.Next.Operation, a.Steps)
	}
	if _, away := workspace.Unavailable(a.Next); away {
		t.Errorf("still unavailable once the node is back")
	}
}

// TestPlanNodeAwayInFlight: an operation that needs a new allocation on
// the home's node ends without error when the node goes away, its unplaced
// job stopped; a restore onto such a node deletes the volume it made (the
// archive holds the home) and starts over elsewhere.
func TestPlanNodeAwayInFlight(t *testing.T) {
	inFlight := func(w workspace.Workspace, op workspace.Operation) workspace.Workspace {
		w.Operation, w.OpStartedAt, w.OpAttempt = op, ptr(t0.Add(-time.Minute)), 2
		return w
	}
	cases := []struct {
		name   string
		w      workspace.Workspace
		obs    Observed
		op     workspace.Operation
		steps  []Step
		errors bool
	}{
		{
			name:  "starting on a drained node",
			w:     inFlight(stored(workspace.PhaseStandby, workspace.DesiredRunning, observed(workspace.PhaseStandby)), workspace.OpStarting),
			obs:   away(workspace.PhaseStandby, workspace.ReasonNodeIneligible),
			op:    workspace.OpNone,
			steps: []Step{StepStopWorkspace},
		},
		{
			name: "archive job waiting on a drained node",
			w: func() workspace.Workspace {
				w := inFlight(stored(workspace.PhaseStandby, workspace.DesiredArchived, observed(workspace.PhaseStandby)), workspace.OpArchiving)
				w.OpID = ptr(opNew)
				return w
			}(),
			obs: func() Observed {
				o := away(workspace.PhaseStandby, workspace.ReasonNodeIneligible)
				o.Archive = &JobResult{OpID: opNew, Attempt: 2, Status: JobPending}
				return o
			}(),
			op:    workspace.OpNone,
			steps: []Step{StepStopArchiveJob},
		},
		{
			name: "archive job running on a drained node finishes",
			w: func() workspace.Workspace {
				w := inFlight(stored(workspace.PhaseStandby, workspace.DesiredArchived, observed(workspace.PhaseStandby)), workspace.OpArchiving)
				w.OpID = ptr(opNew)
				return w
			}(),
			obs: func() Observed {
				o := away(workspace.PhaseStandby, workspace.ReasonNodeIneligible)
				o.Archive = &JobResult{OpID: opNew, Attempt: 2, Status: JobRunning}
				return o
			}(),
			op: workspace.OpArchiving,
		},
		{
			name: "restore onto a drained node",
			w: func() workspace.Workspace {
				return inFlight(stored(workspace.PhaseArchived, workspace.DesiredRunning, Observed{}), workspace.OpRestoring)
			}(),
			obs: func() Observed {
				o := away(workspace.PhaseStandby, workspace.ReasonNodeIneligible)
				o.Restore = &JobResult{ArchiveKey: keyOld, Attempt: 2, Status: JobPending}
				return o
			}(),
			op:    workspace.OpRestoring,
			steps: []Step{StepStopRestoreJob, StepStopWorkspace, StepDeleteVolume},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			a := Plan(c.w, c.obs, ArchiveCheck{}, t0, testCfg)
			if a.Next.Operation != c.op || !slices.Equal(a.Steps, c.steps) {
				t.Fatalf("plan = op %s steps %v, want op %s steps %v", a.Next.Operation, a.Steps, c.op, c.steps)
			}
			if a.Next.ErrorReason != nil || a.Next.Phase == workspace.PhaseError {
				t.Errorf("recorded an error: %v", *a.Next.ErrorReason)
			}
		})
	}
}
