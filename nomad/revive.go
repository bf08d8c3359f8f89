package nomad

import (
	"context"
	"sort"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/codehub-io/codehub/controller"
)

// A client that comes back registers its host volumes again, and Nomad
// calls each unavailable until the client's fingerprint lists it. Now and
// then a volume stays unavailable for minutes on a node that is ready
// (docs/nomad.md, "Node loss"), and no job is placed on it: the
// workspace waits. Sending the volume's create request again, with its id,
// has the client register it at once; its plugin finds the directory there
// and keeps it. That is no new risk to the home: a client runs the same
// create for each of its volumes every time it starts.
const (
	// reviveAfter is how long a home volume may stay unavailable on a ready
	// node before it is registered again: a returning client's volumes
	// normally turn ready within seconds.
	reviveAfter = 20 * time.Second
	// reviveEvery spaces the tries for one volume.
	reviveEvery = time.Minute
	// revivesPerPass bounds the registrations one observation sends, so a
	// node returning with hundreds of homes does not stall a pass.
	revivesPerPass = 4
)

// reviver remembers since when each home volume has been unavailable on a
// ready node and when it was last registered again. Only Observe, which
// the controller calls one at a time, uses it.
type reviver struct {
	stuck map[string]time.Time
	tried map[string]time.Time
}

func newReviver() *reviver {
	return &reviver{stuck: make(map[string]time.Time), tried: make(map[string]time.Time)}
}

// stuckVolume reports a home volume Nomad calls unavailable although its
// node is ready: not one whose node is down or gone, which only the node's
// return can bring back.
func stuckVolume(v *api.HostVolumeStub, nodes map[string]*api.NodeListStub) bool {
	n, ok := nodes[v.NodeID]
	return v.State == api.HostVolumeStateUnavailable && ok && n.Status == api.NodeStatusReady
}

// due records what vols (the newest volume of each name an observation
// holds) show at now and returns the ids of those to register again now,
// oldest stuck first, at most revivesPerPass. complete says vols are every
// home volume, so that what is not among them is forgotten; an observation
// of the changed workspaces only keeps what it did not see.
func (r *reviver) due(vols []*api.HostVolumeStub, nodes map[string]*api.NodeListStub, now time.Time, complete bool) []string {
	seen := make(map[string]bool, len(vols))
	var out []string
	for _, v := range vols {
		seen[v.ID] = true
		if !stuckVolume(v, nodes) {
			delete(r.stuck, v.ID)
			delete(r.tried, v.ID)
			continue
		}
		since, ok := r.stuck[v.ID]
		if !ok {
			r.stuck[v.ID] = now
			continue
		}
		if now.Sub(since) >= reviveAfter && now.Sub(r.tried[v.ID]) >= reviveEvery {
			out = append(out, v.ID)
		}
	}
	if complete {
		for id := range r.stuck {
			if !seen[id] {
				delete(r.stuck, id)
				delete(r.tried, id)
			}
		}
	}
	sort.Slice(out, func(i, k int) bool {
		if a, b := r.stuck[out[i]], r.stuck[out[k]]; !a.Equal(b) {
			return a.Before(b)
		}
		return out[i] < out[k]
	})
	if len(out) > revivesPerPass {
		out = out[:revivesPerPass]
	}
	for _, id := range out {
		r.tried[id] = now
	}
	return out
}

// reviveVolumes registers again the home volumes of l that have stayed
// unavailable on a ready node, and returns the workspaces whose volume is
// stuck, to be observed again on the next pass: no event may come until
// the volume changes.
func (b *Backend) reviveVolumes(ctx context.Context, l listing) []string {
	vols := newestVolumes(l.volumes)
	var stuck []string
	for _, v := range vols {
		if wsID, ok := controller.ParseVolumeName(v.Name); ok && stuckVolume(v, l.nodes) {
			stuck = append(stuck, wsID)
		}
	}
	for _, id := range b.reviver.due(vols, l.nodes, b.now(), l.only == nil) {
		if err := b.reviveVolume(ctx, id); err != nil {
			b.logger.Warn("register unavailable home volume again", "volume_id", id, "error", err)
		}
	}
	return stuck
}

// reviveVolume sends volume id's create request again, with its id and
// what it was created with: Nomad keeps its node, path and capacity.
func (b *Backend) reviveVolume(ctx context.Context, id string) error {
	vol, _, err := b.client.HostVolumes().Get(id, b.query(ctx))
	if err != nil {
		return classify("read host volume "+id, err)
	}
	req := &api.HostVolume{
		Namespace:                 vol.Namespace,
		ID:                        vol.ID,
		Name:                      vol.Name,
		PluginID:                  vol.PluginID,
		NodePool:                  vol.NodePool,
		NodeID:                    vol.NodeID,
		Constraints:               vol.Constraints,
		RequestedCapacityMinBytes: vol.RequestedCapacityMinBytes,
		RequestedCapacityMaxBytes: vol.RequestedCapacityMaxBytes,
		RequestedCapabilities:     vol.RequestedCapabilities,
		Parameters:                vol.Parameters,
	}
	if _, _, err := b.client.HostVolumes().Create(&api.HostVolumeCreateRequest{Volume: req}, b.write(ctx)); err != nil {
		return classify("register host volume "+vol.Name+" again", err)
	}
	b.logger.Info("registered an unavailable home volume again", "volume", vol.Name, "volume_id", id, "node_id", vol.NodeID)
	return nil
}
