package controller

import (
	"fmt"

	"github.com/codehub-io/codehub/workspace"
)

// Drains: Nomad places nothing on a node that is drained or ineligible, not
// even the archive job that would save a home there. A home whose archive
// holds all of it needs nothing to run there: the volume is given up for
// the archive (the restore marker cleared in the same write that asks for
// its deletion, so its going is not taken for a lost home) and the ladder
// restores it on another node and brings it back to its desired phase.
// A home that changed since its archive, or was never archived, has its
// only copy on that node: it waits, and says why.

// DrainMove reports whether the home of w, idle on a volume whose node is
// up but takes no new allocation, leaves that node without anything
// running there: it was restored from its archive (or backed up, which
// leaves the same mark) and has not run since.
func DrainMove(w workspace.Workspace, obs Observed) bool {
	return w.DeletedAt == nil && w.Operation == workspace.OpNone && w.Phase != workspace.PhaseError &&
		obs.NodeAway == workspace.ReasonNodeIneligible && obs.VolumeReady && !obs.ContainerLive &&
		archiveHoldsHome(w)
}

// archiveHoldsHome reports whether the archive of w holds everything its
// volume does: the volume was filled from that archive (or the archive was
// made of it) and the home has not changed since.
func archiveHoldsHome(w workspace.Workspace) bool {
	return w.ArchiveKey != nil && w.RestoreMarker != nil && *w.RestoreMarker == *w.ArchiveKey && !HomeChanged(w)
}

// drainedMessage is storage.volume_ready's message for a home on a drained
// node: whether it is on its way, or why it waits.
func drainedMessage(w workspace.Workspace, node string) string {
	switch {
	case archiveHoldsHome(w):
		return fmt.Sprintf("node %s is drained: the home's last archive holds all of it, so it is restored on another node", node)
	case w.ArchiveKey == nil:
		return fmt.Sprintf("unavailable: node %s is drained and holds the only copy of the home, which was never archived; an admin evacuates a node before draining it, or backups archive homes that stopped", node)
	}
	return fmt.Sprintf("unavailable: node %s is drained and holds the only copy of the home, which changed since its last archive; an admin evacuates a node before draining it, or backups archive homes that stopped", node)
}

// leaveDrained gives up the volume of a home DrainMove lets go for its
// archive.
func (p *planner) leaveDrained() Action {
	p.next.RestoreMarker = nil
	return p.settle(append(p.purgeStale(), StepDeleteVolume)...)
}
