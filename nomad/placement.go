package nomad

import (
	"fmt"
	"regexp"
	"slices"
	"sort"

	"github.com/hashicorp/nomad/api"

	"github.com/codehub-io/codehub/controller"
	"github.com/codehub-io/codehub/workspace"
)

// placeNode picks the node for a new home volume: a ready, eligible node
// that is not draining nor in avoid (evacuated), in pool and one of
// datacenters, holding the fewest
// home volumes (ws-*-home, whatever their state); ties go to the node
// whose name sorts first, then its id. With no such node it fails without
// creating anything: Nomad would place the volume on a drained node, where
// no job could use it.
func placeNode(nodes []*api.NodeListStub, vols []*api.HostVolumeStub, pool string, datacenters, avoid []string) (string, error) {
	homes := make(map[string]int)
	for _, v := range vols {
		if _, ok := controller.ParseVolumeName(v.Name); ok {
			homes[v.NodeID]++
		}
	}
	var candidates []*api.NodeListStub
	for _, n := range homeNodes(nodes, pool, datacenters) {
		if !slices.Contains(avoid, n.ID) {
			candidates = append(candidates, n)
		}
	}
	if len(candidates) == 0 {
		return "", &controller.Failure{Reason: workspace.ReasonUnschedulable,
			Message: fmt.Sprintf("no ready, eligible node in pool %q and datacenters %v (evacuated nodes excluded) for a home volume", pool, datacenters)}
	}
	sort.Slice(candidates, func(i, k int) bool {
		a, b := candidates[i], candidates[k]
		if homes[a.ID] != homes[b.ID] {
			return homes[a.ID] < homes[b.ID]
		}
		if a.Name != b.Name {
			return a.Name < b.Name
		}
		return a.ID < b.ID
	})
	return candidates[0].ID, nil
}

// homeNodes are the nodes a new home may go to: ready, eligible, not
// draining, in pool (any for "all") and one of datacenters.
func homeNodes(nodes []*api.NodeListStub, pool string, datacenters []string) []*api.NodeListStub {
	inDC := datacenterMatcher(datacenters)
	var out []*api.NodeListStub
	for _, n := range nodes {
		if n.Status != api.NodeStatusReady || n.Drain || n.SchedulingEligibility != api.NodeSchedulingEligible {
			continue
		}
		if (pool != api.NodePoolAll && n.NodePool != pool) || !inDC(n.Datacenter) {
			continue
		}
		out = append(out, n)
	}
	return out
}

// datacenterMatcher reports whether a datacenter is one of datacenters,
// which may hold "*" globs as a job's datacenters do.
func datacenterMatcher(datacenters []string) func(string) bool {
	cs := datacenterConstraints(datacenters)
	if len(cs) == 0 {
		return func(string) bool { return true }
	}
	re := regexp.MustCompile(cs[0].RTarget)
	return func(dc string) bool { return re.MatchString(dc) }
}
