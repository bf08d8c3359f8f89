package controller

import (
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/codehub-io/codehub/workspace"
)

// TestPlanMove: a home leaving an evacuated node goes down the ladder to
// ARCHIVED whatever its desired state (stop, archive, delete the volume
// once the archive is committed), and once its volume is gone comes back
// up to the desired state like any archived workspace.
func TestPlanMove(t *testing.T) {
	moving := func(phase workspace.Phase) Observed {
		obs := observed(phase)
		obs.NodeID, obs.Node, obs.Evacuating, obs.Move = "n1", "node-a", true, true
		return obs
	}
	committed := func() workspace.Workspace {
		w := stored(workspace.PhaseStandby, workspace.DesiredRunning, observed(workspace.PhaseStandby))
		w.OpID, w.ArchiveKey = ptr(opOld), ptr(keyOld)
		return w
	}()
	cases := []struct {
		name  string
		w     workspace.Workspace
		obs   Observed
		op    workspace.Operation
		steps []Step
	}{
		{"running is stopped", stored(workspace.PhaseRunning, workspace.DesiredRunning, observed(workspace.PhaseRunning)),
			moving(workspace.PhaseRunning), workspace.OpStopping, []Step{StepStopWorkspace}},
		{"stopped, wanted running, is archived", stored(workspace.PhaseStandby, workspace.DesiredRunning, observed(workspace.PhaseStandby)),
			moving(workspace.PhaseStandby), workspace.OpArchiving, []Step{StepSubmitArchive}},
		{"standby is archived", stored(workspace.PhaseStandby, workspace.DesiredStandby, observed(workspace.PhaseStandby)),
			moving(workspace.PhaseStandby), workspace.OpArchiving, []Step{StepSubmitArchive}},
		{"archived with its volume left deletes the volume", committed,
			moving(workspace.PhaseStandby), workspace.OpArchiving, []Step{StepDeleteVolume}},
		{"volume gone: restored elsewhere", stored(workspace.PhaseArchived, workspace.DesiredRunning, Observed{}),
			Observed{}, workspace.OpRestoring, []Step{StepProvisionVolume}},
		{"waiting for its turn stays", stored(workspace.PhaseStandby, workspace.DesiredStandby, observed(workspace.PhaseStandby)),
			func() Observed { o := moving(workspace.PhaseStandby); o.Move = false; return o }(), workspace.OpNone, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			a := Plan(c.w, c.obs, ArchiveCheck{}, t0, testCfg)
			if a.Next.Operation != c.op || !slices.Equal(a.Steps, c.steps) {
				t.Fatalf("plan = op %s steps %v, want op %s steps %v", a.Next.Operation, a.Steps, c.op, c.steps)
			}
			if a.Next.DesiredState != c.w.DesiredState {
				t.Errorf("a move changed the desired state to %s", a.Next.DesiredState)
			}
			msg, moving := workspace.Moving(a.Next)
			switch cond := a.Next.Conditions[workspace.CondMoving]; {
			case c.obs.Move && (!moving || !strings.Contains(msg, "leaving node node-a")):
				t.Errorf("progress %q (%v), want it leaving node-a", msg, moving)
			case c.obs.Evacuating && !c.obs.Move && (moving || cond.Reason != workspace.ReasonMoveWaiting):
				t.Errorf("progress %+v, want it waiting", cond)
			case !c.obs.Evacuating && moving:
				t.Errorf("moving %q without an evacuation", msg)
			}
		})
	}
}

// TestMoves: every home already on its way keeps moving; new ones start in
// id order up to the bound; homes on other nodes, on an evacuated node
// that is away, in ERROR or deleted never move.
func TestMoves(t *testing.T) {
	ids := []string{"01a", "01b", "01c", "01d", "01e", "01f", "01g", "01h", "01i"}
	row := func(id string, phase workspace.Phase, desired workspace.DesiredState, op workspace.Operation) *workspace.Workspace {
		w := stored(phase, desired, observed(phase))
		w.ID, w.Operation = id, op
		if op != workspace.OpNone {
			w.OpStartedAt = ptr(t0)
		}
		return &w
	}
	on := func(node string, phase workspace.Phase) Observed {
		o := observed(phase)
		o.NodeID = node
		return o
	}
	deleted := row(ids[7], workspace.PhaseStandby, workspace.DesiredStandby, workspace.OpNone)
	deleted.DeletedAt = ptr(t0)
	ws := []*workspace.Workspace{
		row(ids[0], workspace.PhaseStandby, workspace.DesiredStandby, workspace.OpNone),
		row(ids[1], workspace.PhaseRunning, workspace.DesiredRunning, workspace.OpNone),
		row(ids[2], workspace.PhaseRunning, workspace.DesiredRunning, workspace.OpStopping),
		// Stopped on its way out, desired still RUNNING.
		row(ids[3], workspace.PhaseStandby, workspace.DesiredRunning, workspace.OpNone),
		row(ids[4], workspace.PhaseStandby, workspace.DesiredStandby, workspace.OpNone),
		row(ids[5], workspace.PhaseStandby, workspace.DesiredStandby, workspace.OpNone),
		row(ids[6], workspace.PhaseError, workspace.DesiredStandby, workspace.OpNone),
		deleted,
		row(ids[8], workspace.PhaseStandby, workspace.DesiredStandby, workspace.OpNone),
	}
	away := on("gone", workspace.PhaseStandby)
	away.NodeAway, away.VolumeReady = workspace.ReasonNodeDown, false
	snap := Snapshot{Workspaces: map[string]Observed{
		ids[0]: on("n1", workspace.PhaseStandby),
		ids[1]: on("n1", workspace.PhaseRunning),
		ids[2]: on("n1", workspace.PhaseRunning),
		ids[3]: on("n1", workspace.PhaseStandby),
		ids[4]: on("n2", workspace.PhaseStandby),
		ids[5]: away,
		ids[6]: on("n1", workspace.PhaseStandby),
		ids[7]: on("n1", workspace.PhaseStandby),
		ids[8]: on("n1", workspace.PhaseStandby),
	}}
	evacuating := map[string]bool{"n1": true, "gone": true}
	for _, c := range []struct {
		parallel int
		want     []string
	}{
		{1, []string{ids[2], ids[3]}},
		{3, []string{ids[0], ids[2], ids[3]}},
		{10, []string{ids[0], ids[1], ids[2], ids[3], ids[8]}},
	} {
		got := slices.Sorted(maps.Keys(Moves(ws, snap, evacuating, c.parallel)))
		if !slices.Equal(got, c.want) {
			t.Errorf("parallel %d: moves %v, want %v", c.parallel, got, c.want)
		}
	}
	if got := Moves(ws, snap, nil, 10); len(got) != 0 {
		t.Errorf("moves %v with no node evacuated", got)
	}
}

// TestMovesBound: homes that leave a drained node for their archive share
// the bound with evacuations, and a move counts until the workspace is
// back in its desired phase elsewhere, so the restores that bring homes
// back are bounded too.
func TestMovesBound(t *testing.T) {
	drained := func(id string) (*workspace.Workspace, Observed) {
		w, obs := drainedHome("run1", "run1")
		w.ID = id
		obs.Move = false
		return &w, obs
	}
	a, obsA := drained("01a")
	b, obsB := drained("01b")
	c, obsC := drained("01c")
	// Left its drained node and is being restored elsewhere.
	arriving := stored(workspace.PhaseArchived, workspace.DesiredRunning, Observed{})
	arriving.ID, arriving.ArchiveKey = "01z", ptr(keyOld)
	arriving.Conditions[workspace.CondMoving] = workspace.Condition{Status: workspace.ConditionTrue, Reason: workspace.ReasonMoveArriving}
	// Moved, and running there.
	moved := stored(workspace.PhaseRunning, workspace.DesiredRunning, observed(workspace.PhaseRunning))
	moved.ID = "01y"
	moved.Conditions[workspace.CondMoving] = workspace.Condition{Status: workspace.ConditionTrue, Reason: workspace.ReasonMoveArriving}
	snap := Snapshot{Workspaces: map[string]Observed{"01a": obsA, "01b": obsB, "01c": obsC, "01y": observed(workspace.PhaseRunning)}}
	for _, tc := range []struct {
		name     string
		ws       []*workspace.Workspace
		parallel int
		want     []string
	}{
		{"drained homes in id order", []*workspace.Workspace{c, b, a}, 2, []string{"01a", "01b"}},
		{"all at a wide bound", []*workspace.Workspace{c, b, a}, 5, []string{"01a", "01b", "01c"}},
		{"an arriving home takes a place", []*workspace.Workspace{c, b, a, &arriving}, 2, []string{"01a"}},
		{"an arrived home takes none", []*workspace.Workspace{c, b, a, &moved}, 2, []string{"01a", "01b"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := slices.Sorted(maps.Keys(Moves(tc.ws, snap, nil, tc.parallel)))
			if !slices.Equal(got, tc.want) {
				t.Errorf("moves %v, want %v", got, tc.want)
			}
		})
	}
}

// TestMoveProgress follows the storage.moving condition of one home along
// its move: leaving while it goes down the ladder, arriving while it comes
// back up elsewhere, moved once in its desired state.
func TestMoveProgress(t *testing.T) {
	w := stored(workspace.PhaseRunning, workspace.DesiredRunning, observed(workspace.PhaseRunning))
	steps := []struct {
		phase  workspace.Phase
		op     workspace.Operation
		obs    Observed
		status workspace.ConditionStatus
		reason string
	}{
		{workspace.PhaseRunning, workspace.OpNone, Observed{VolumeExists: true, VolumeReady: true, ContainerLive: true, UpstreamReady: true,
			NodeID: "n1", Node: "node-a", Evacuating: true, Move: true}, workspace.ConditionTrue, workspace.ReasonMoveLeaving},
		{workspace.PhaseArchived, workspace.OpNone, Observed{}, workspace.ConditionTrue, workspace.ReasonMoveArriving},
		{workspace.PhaseArchived, workspace.OpRestoring, Observed{VolumeExists: true, VolumeReady: true, NodeID: "n2", Node: "node-b"},
			workspace.ConditionTrue, workspace.ReasonMoveArriving},
		// A failed start that will be retried is still on its way.
		{workspace.PhaseStandby, workspace.OpNone, Observed{VolumeExists: true, VolumeReady: true, NodeID: "n2", Node: "node-b"},
			workspace.ConditionTrue, workspace.ReasonMoveArriving},
		{workspace.PhaseRunning, workspace.OpNone, Observed{VolumeExists: true, VolumeReady: true, ContainerLive: true, UpstreamReady: true,
			NodeID: "n2", Node: "node-b"}, workspace.ConditionFalse, workspace.ReasonMoved},
	}
	for i, s := range steps {
		w.Phase, w.Operation = s.phase, s.op
		w.ErrorReason = nil
		if i == 3 {
			w.ErrorReason = ptr(workspace.ReasonStartFailed)
		}
		got := moveCondition(w, s.obs, w.Conditions, t0)[workspace.CondMoving]
		if got.Status != s.status || got.Reason != s.reason {
			t.Fatalf("step %d: storage.moving %+v, want %s %s", i, got, s.status, s.reason)
		}
		w.Conditions = moveCondition(w, s.obs, w.Conditions, t0)
	}
	if c := moveCondition(stored(workspace.PhaseStandby, workspace.DesiredStandby, observed(workspace.PhaseStandby)),
		observed(workspace.PhaseStandby), nil, t0); c != nil {
		t.Errorf("a workspace that never moved got %v", c)
	}
}
