package controller

import "context"

// Fleet is implemented by backends whose workspaces live on several nodes
// (Nomad): what admins see of where homes are.
type Fleet interface {
	// Nodes lists every node with the home volumes on it, and as nodes of
	// status NodeGone the ids that volumes name but the cluster no
	// longer knows (ghost volumes).
	Nodes(ctx context.Context) ([]FleetNode, error)
}

// NodeGone is the status of a node that volumes name but that has left
// the cluster.
const NodeGone = "gone"

// FleetNode is one node and the home volumes it holds.
type FleetNode struct {
	ID         string
	Name       string
	Datacenter string
	Pool       string
	// Status is the backend's (ready, down, disconnected, initializing)
	// or NodeGone.
	Status   string
	Eligible bool
	Draining bool
	Volumes  []FleetVolume
}

// FleetVolume is one home volume.
type FleetVolume struct {
	WorkspaceID string
	VolumeID    string
	State       string
	// CapacityBytes is the size the backend reports; 0 when it reports
	// none (Nomad's mkdir plugin).
	CapacityBytes int64
}
