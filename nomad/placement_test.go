package nomad

import (
	"errors"
	"testing"

	"github.com/hashicorp/nomad/api"

	"github.com/codehub-io/codehub/controller"
	"github.com/codehub-io/codehub/workspace"
)

func TestPlaceNode(t *testing.T) {
	node := func(id, name string, edit func(*api.NodeListStub)) *api.NodeListStub {
		n := &api.NodeListStub{ID: id, Name: name, Status: api.NodeStatusReady, NodePool: "default",
			Datacenter: "dc1", SchedulingEligibility: api.NodeSchedulingEligible}
		if edit != nil {
			edit(n)
		}
		return n
	}
	home := func(node string) *api.HostVolumeStub {
		return &api.HostVolumeStub{Name: controller.VolumeName(workspace.NewID()), NodeID: node}
	}
	drained := func(n *api.NodeListStub) { n.SchedulingEligibility = api.NodeSchedulingIneligible }
	cases := []struct {
		name        string
		nodes       []*api.NodeListStub
		vols        []*api.HostVolumeStub
		pool        string
		datacenters []string
		want        string
	}{
		{"fewest homes", []*api.NodeListStub{node("1", "a", nil), node("2", "b", nil)},
			[]*api.HostVolumeStub{home("1"), home("1"), home("2")}, "default", []string{"*"}, "2"},
		{"tie goes to the first name", []*api.NodeListStub{node("1", "b", nil), node("2", "a", nil)},
			[]*api.HostVolumeStub{home("1"), home("2")}, "default", []string{"*"}, "2"},
		{"other volumes do not count", []*api.NodeListStub{node("1", "a", nil), node("2", "b", nil)},
			[]*api.HostVolumeStub{{Name: "scratch", NodeID: "1"}, {Name: "scratch2", NodeID: "1"}, home("2")}, "default", []string{"*"}, "1"},
		{"drained node never, however empty", []*api.NodeListStub{node("1", "a", drained), node("2", "b", nil)},
			[]*api.HostVolumeStub{home("2"), home("2")}, "default", []string{"*"}, "2"},
		{"draining node never", []*api.NodeListStub{node("1", "a", func(n *api.NodeListStub) { n.Drain = true }), node("2", "b", nil)},
			[]*api.HostVolumeStub{home("2")}, "default", []string{"*"}, "2"},
		{"down node never", []*api.NodeListStub{node("1", "a", func(n *api.NodeListStub) { n.Status = api.NodeStatusDown }), node("2", "b", nil)},
			[]*api.HostVolumeStub{home("2")}, "default", []string{"*"}, "2"},
		{"other pool never", []*api.NodeListStub{node("1", "a", func(n *api.NodeListStub) { n.NodePool = "gpu" }), node("2", "b", nil)},
			[]*api.HostVolumeStub{home("2")}, "default", []string{"*"}, "2"},
		{"pool all takes any pool", []*api.NodeListStub{node("1", "a", func(n *api.NodeListStub) { n.NodePool = "gpu" }), node("2", "b", nil)},
			[]*api.HostVolumeStub{home("2")}, api.NodePoolAll, []string{"*"}, "1"},
		{"datacenter globs", []*api.NodeListStub{node("1", "a", nil), node("2", "b", func(n *api.NodeListStub) { n.Datacenter = "eu-west" })},
			[]*api.HostVolumeStub{home("2")}, "default", []string{"eu-*"}, "2"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := placeNode(c.nodes, c.vols, c.pool, c.datacenters)
			if err != nil || got != c.want {
				t.Fatalf("placeNode = %q, %v; want %q", got, err, c.want)
			}
		})
	}

	_, err := placeNode([]*api.NodeListStub{node("1", "a", drained)}, nil, "default", []string{"*"})
	var f *controller.Failure
	if !errors.As(err, &f) || f.Reason != workspace.ReasonUnschedulable || f.Terminal {
		t.Fatalf("no eligible node: err = %v, want a retryable Unschedulable failure", err)
	}
}
