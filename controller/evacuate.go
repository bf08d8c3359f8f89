package controller

import (
	"fmt"
	"slices"
	"time"

	"github.com/codehub-io/codehub/workspace"
)

// Moves picks the workspaces whose homes leave their node in this pass,
// at most parallel at a time over the whole fleet. A home moves off an
// evacuated node by the ordinary ladder: down to ARCHIVED (stop, archive,
// and only once the archive is committed, delete the volume), then up to
// its desired phase on a node that is not evacuated. Homes whose node is
// away (down, drained) cannot move this way: nothing can run there to
// archive them. On a drained node, those whose archive holds all of them
// move without it (DrainMove). A move counts from its first step until
// the workspace is back in its desired phase elsewhere (storage.moving),
// so the bound holds for the restores that bring homes back too. Every
// move under way keeps going, so none is left half-way; new ones start,
// in id order, while fewer than parallel are under way.
func Moves(ws []*workspace.Workspace, snap Snapshot, evacuating map[string]bool, parallel int) map[string]bool {
	moves := make(map[string]bool)
	under := 0
	var waiting []string
	for _, w := range ws {
		if w.DeletedAt != nil || w.Phase == workspace.PhaseError {
			continue
		}
		if len(evacuating) == 0 && !mayDrainMove(*w) {
			// Neither branch of leaving can hold: no observation needed.
			continue
		}
		switch state, _ := leaving(*w, snap.Workspaces[w.ID], evacuating); state {
		case moveUnderWay:
			moves[w.ID] = true
			under++
		case moveReady:
			waiting = append(waiting, w.ID)
		}
	}
	if len(waiting) == 0 {
		// Those arriving count only against new moves; a pass with none
		// to start skips reading every workspace's conditions.
		return moves
	}
	for _, w := range ws {
		if w.DeletedAt != nil || w.Phase == workspace.PhaseError {
			continue
		}
		if _, node := leaving(*w, snap.Workspaces[w.ID], evacuating); !node && arriving(*w) {
			under++
		}
	}
	slices.Sort(waiting)
	for _, id := range waiting {
		if under >= parallel {
			break
		}
		moves[id] = true
		under++
	}
	return moves
}

// moveState is where a workspace stands in the moves of the fleet.
type moveState int

const (
	moveNone moveState = iota
	// moveReady: its home may start to move.
	moveReady
	// moveUnderWay: its home is leaving an evacuated node.
	moveUnderWay
)

// leaving says whether the home of w may start, or has started, to leave
// its node. node is set when its node (drained, or evacuated) decides
// that; otherwise the home may still be arriving from an earlier move.
func leaving(w workspace.Workspace, obs Observed, evacuating map[string]bool) (state moveState, node bool) {
	if DrainMove(w, obs) {
		return moveReady, true
	}
	if obs.VolumeExists && obs.NodeAway == "" && evacuating[obs.NodeID] {
		home := locateHome(w, obs)
		switch {
		case home == workspace.HomeInBoth, w.Operation != workspace.OpNone,
			workspace.Level(w.Phase) < workspace.Level(workspace.TargetPhase(w.DesiredState)):
			return moveUnderWay, true
		case home == workspace.HomeInVolume:
			return moveReady, true
		}
		return moveNone, true
	}
	return moveNone, false
}

// arriving reports a home that left its node and is being brought back up
// elsewhere: it counts as a move under way.
func arriving(w workspace.Workspace) bool {
	c, ok := w.Conditions[workspace.CondMoving]
	return ok && c.Status == workspace.ConditionTrue && !arrived(w)
}

// moveCondition sets storage.moving on conds, the progress of a home on an
// evacuated node: waiting for its turn, leaving (down to ARCHIVED),
// arriving (restored and brought back up elsewhere), moved. A home that
// leaves a drained node for its archive (DrainMove) shows the same steps.
// A workspace that never moved gets no such condition.
func moveCondition(w workspace.Workspace, obs Observed, conds workspace.Conditions, now time.Time) workspace.Conditions {
	prev, had := w.Conditions[workspace.CondMoving]
	var c workspace.Condition
	switch {
	case obs.Move:
		c = condition(true, workspace.ReasonMoveLeaving, "", fmt.Sprintf("moving to another machine: leaving node %s", obs.Node))
	case savingOnStop(w, obs):
		c = condition(true, workspace.ReasonMoveLeaving, "", fmt.Sprintf("moving to another machine: saving the home on node %s", obs.Node))
	case obs.Evacuating && obs.VolumeExists, DrainMove(w, obs):
		c = condition(false, "", workspace.ReasonMoveWaiting, fmt.Sprintf("waiting to move off node %s", obs.Node))
	case !had:
		return conds
	case prev.Status == workspace.ConditionTrue && !arrived(w):
		c = condition(true, workspace.ReasonMoveArriving, "", "moving to another machine: bringing it back up there")
	default:
		c = condition(false, "", workspace.ReasonMoved, "moved to another machine")
	}
	return withConditions(conds, w.Conditions, now, namedCondition{workspace.CondMoving, c})
}

// arrived reports a moved workspace back in its desired phase, or in
// ERROR, which its error fields explain. A failed attempt that will be
// retried is still on its way.
func arrived(w workspace.Workspace) bool {
	if w.Operation != workspace.OpNone {
		return false
	}
	return w.Phase == workspace.TargetPhase(w.DesiredState) || w.Phase == workspace.PhaseError
}
