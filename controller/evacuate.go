package controller

import (
	"slices"

	"github.com/codehub-io/codehub/workspace"
)

// Moves picks the workspaces whose homes leave an evacuated node in this
// pass. A home moves by the ordinary ladder: down to ARCHIVED (stop,
// archive, and only once the archive is committed, delete the volume),
// then up to its desired phase on a node that is not evacuated. Every
// workspace already on its way keeps moving, so none is left half-way on
// the node; new ones start, in id order, while fewer than parallel move.
// Homes whose node is away (down, drained) cannot move: nothing can run
// there to archive them.
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
