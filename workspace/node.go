package workspace

import "fmt"

// Reasons of storage.volume_ready while the node holding the home volume
// cannot serve it. The volume is kept: it may hold the only copy of the
// home, until an admin gives it up for the last archive
// (Service.RestoreElsewhere).
const (
	// ReasonNodeDown: the node is down or disconnected; nobody can read
	// the volume until it returns.
	ReasonNodeDown = "NodeDown"
	// ReasonNodeGone: the volume's node is no longer in the cluster (a
	// ghost volume).
	ReasonNodeGone = "NodeGone"
	// ReasonNodeIneligible: the node is drained or marked ineligible. The
	// volume is intact, but nothing new (the workspace, an archive job)
	// can be placed on it.
	ReasonNodeIneligible = "NodeIneligible"
)

// NodeAwayReason reports whether reason says the volume's node cannot
// serve it.
func NodeAwayReason(reason string) bool {
	switch reason {
	case ReasonNodeDown, ReasonNodeGone, ReasonNodeIneligible:
		return true
	}
	return false
}

// NodeAwayMessage is what users and admins read while the home's node is
// away, naming the node.
func NodeAwayMessage(reason, node string) string {
	switch reason {
	case ReasonNodeDown:
		return fmt.Sprintf("unavailable: node %s is down", node)
	case ReasonNodeGone:
		return fmt.Sprintf("unavailable: node %s has left the cluster", node)
	case ReasonNodeIneligible:
		return fmt.Sprintf("unavailable: node %s is drained", node)
	}
	return ""
}

// Unavailable returns the message of a workspace whose home volume sits on
// a node that cannot serve it, as the last observation recorded it.
func Unavailable(w Workspace) (string, bool) {
	v, ok := w.Conditions[CondVolumeReady]
	if !ok || !NodeAwayReason(v.Reason) {
		return "", false
	}
	return v.Message, true
}

// Reasons of storage.moving.
const (
	ReasonMoveWaiting  = "Waiting"
	ReasonMoveLeaving  = "Leaving"
	ReasonMoveArriving = "Arriving"
	ReasonMoved        = "Moved"
)

// Moving returns the progress message of a workspace whose home is moving
// to another node.
func Moving(w Workspace) (string, bool) {
	c, ok := w.Conditions[CondMoving]
	if !ok || c.Status != ConditionTrue {
		return "", false
	}
	return c.Message, true
}
