package controller

import (
	"fmt"
	"slices"
	"time"

	"github.com/codehub-io/codehub/workspace"
)

// Moves picks the workspaces whose homes leave an evacuated node in this
// pass. A home moves by the ordinary ladder: down to ARCHIVED (stop,
// archive, and only once the archive is committed, delete the volume),
// then up to its desired phase on a node that is not evacuated. Every
// workspace already on its way keeps moving, so none is left half-way on
// the node; new ones start, in id order, while fewer than parallel move.
// Homes whose node is away (down, drained) cannot move this way: nothing
// can run there to archive them. On a drained node, those whose archive
// holds all of them move without it (DrainMove).
func Moves(ws []*workspace.Workspace, snap Snapshot, evacuating map[string]bool, parallel int) map[string]bool {
	moves := make(map[string]bool)
	var waiting []string
	for _, w := range ws {
		obs := snap.Workspaces[w.ID]
		if w.DeletedAt != nil || !obs.VolumeExists || obs.NodeAway != "" || !evacuating[obs.NodeID] || w.Phase == workspace.PhaseError {
			continue
		}
		home := locateHome(*w, obs)
		switch {
		case home == workspace.HomeInBoth, w.Operation != workspace.OpNone,
			workspace.Level(w.Phase) < workspace.Level(workspace.TargetPhase(w.DesiredState)):
			moves[w.ID] = true
		case home == workspace.HomeInVolume:
			waiting = append(waiting, w.ID)
		}
	}
	slices.Sort(waiting)
	for _, id := range waiting {
		if len(moves) >= parallel {
			break
		}
		moves[id] = true
	}
	return moves
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
	case obs.Move || DrainMove(w, obs):
		c = condition(true, workspace.ReasonMoveLeaving, "", fmt.Sprintf("moving to another machine: leaving node %s", obs.Node))
	case obs.Evacuating && obs.VolumeExists:
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
