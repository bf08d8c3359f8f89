package nomad

import (
	"context"
	"sort"

	"github.com/hashicorp/nomad/api"

	"github.com/codehub-io/codehub/controller"
)

var _ controller.Fleet = (*Backend)(nil)

// Nodes lists the client nodes with the home volumes each holds, in name
// order; volumes of nodes the cluster no longer knows come last, under
// their node id with status gone. Two list calls.
func (b *Backend) Nodes(ctx context.Context) ([]controller.FleetNode, error) {
	nodes, _, err := b.client.Nodes().List(b.query(ctx))
	if err != nil {
		return nil, classify("list nodes", err)
	}
	q := b.query(ctx)
	q.Prefix = controller.NamePrefix
	vols, _, err := b.client.HostVolumes().List(nil, q)
	if err != nil {
		return nil, classify("list host volumes", err)
	}
	return fleet(nodes, vols), nil
}

// fleet groups the home volumes by node. It does no I/O.
func fleet(nodes []*api.NodeListStub, vols []*api.HostVolumeStub) []controller.FleetNode {
	byID := make(map[string]*controller.FleetNode, len(nodes))
	var out []*controller.FleetNode
	for _, n := range nodes {
		fn := &controller.FleetNode{ID: n.ID, Name: n.Name, Datacenter: n.Datacenter, Pool: n.NodePool,
			Status: n.Status, Eligible: n.SchedulingEligibility == api.NodeSchedulingEligible, Draining: n.Drain}
		byID[n.ID] = fn
		out = append(out, fn)
	}
	sort.SliceStable(out, func(i, k int) bool { return out[i].Name < out[k].Name })
	for _, v := range vols {
		wsID, ok := controller.ParseVolumeName(v.Name)
		if !ok {
			continue
		}
		fn, known := byID[v.NodeID]
		if !known {
			fn = &controller.FleetNode{ID: v.NodeID, Name: v.NodeID, Status: controller.NodeGone}
			byID[v.NodeID] = fn
			out = append(out, fn)
		}
		fn.Volumes = append(fn.Volumes, controller.FleetVolume{WorkspaceID: wsID, VolumeID: v.ID, State: string(v.State), CapacityBytes: v.CapacityBytes})
	}
	result := make([]controller.FleetNode, len(out))
	for i, fn := range out {
		sort.Slice(fn.Volumes, func(a, c int) bool { return fn.Volumes[a].WorkspaceID < fn.Volumes[c].WorkspaceID })
		result[i] = *fn
	}
	return result
}
