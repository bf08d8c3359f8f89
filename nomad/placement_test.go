package nomad

import (
	"errors"
	"reflect"
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
		avoid       []string
		want        string
	}{
		{"fewest homes", []*api.NodeListStub{node("1", "a", nil), node("2", "b", nil)},
			[]*api.HostVolumeStub{home("1"), home("1"), home("2")}, "default", []string{"*"}, nil, "2"},
		{"tie goes to the first name", []*api.NodeListStub{node("1", "b", nil), node("2", "a", nil)},
			[]*api.HostVolumeStub{home("1"), home("2")}, "default", []string{"*"}, nil, "2"},
		{"other volumes do not count", []*api.NodeListStub{node("1", "a", nil), node("2", "b", nil)},
			[]*api.HostVolumeStub{{Name: "scratch", NodeID: "1"}, {Name: "scratch2", NodeID: "1"}, home("2")}, "default", []string{"*"}, nil, "1"},
		{"drained node never, however empty", []*api.NodeListStub{node("1", "a", drained), node("2", "b", nil)},
			[]*api.HostVolumeStub{home("2"), home("2")}, "default", []string{"*"}, nil, "2"},
		{"draining node never", []*api.NodeListStub{node("1", "a", func(n *api.NodeListStub) { n.Drain = true }), node("2", "b", nil)},
			[]*api.HostVolumeStub{home("2")}, "default", []string{"*"}, nil, "2"},
		{"down node never", []*api.NodeListStub{node("1", "a", func(n *api.NodeListStub) { n.Status = api.NodeStatusDown }), node("2", "b", nil)},
			[]*api.HostVolumeStub{home("2")}, "default", []string{"*"}, nil, "2"},
		{"other pool never", []*api.NodeListStub{node("1", "a", func(n *api.NodeListStub) { n.NodePool = "gpu" }), node("2", "b", nil)},
			[]*api.HostVolumeStub{home("2")}, "default", []string{"*"}, nil, "2"},
		{"pool all takes any pool", []*api.NodeListStub{node("1", "a", func(n *api.NodeListStub) { n.NodePool = "gpu" }), node("2", "b", nil)},
			[]*api.HostVolumeStub{home("2")}, api.NodePoolAll, []string{"*"}, nil, "1"},
		{"datacenter globs", []*api.NodeListStub{node("1", "a", nil), node("2", "b", func(n *api.NodeListStub) { n.Datacenter = "eu-west" })},
			[]*api.HostVolumeStub{home("2")}, "default", []string{"eu-*"}, nil, "2"},
	}
	cases = append(cases, struct {
		name        string
		nodes       []*api.NodeListStub
		vols        []*api.HostVolumeStub
		pool        string
		datacenters []string
		avoid       []string
		want        string
	}{"evacuated node never, however empty", []*api.NodeListStub{node("1", "a", nil), node("2", "b", nil)},
		[]*api.HostVolumeStub{home("2"), home("2")}, "default", []string{"*"}, []string{"1"}, "2"})
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := placeNode(c.nodes, c.vols, c.pool, c.datacenters, c.avoid)
			if err != nil || got != c.want {
				t.Fatalf("placeNode = %q, %v; want %q", got, err, c.want)
			}
		})
	}

	_, err := placeNode([]*api.NodeListStub{node("1", "a", drained)}, nil, "default", []string{"*"}, nil)
	var f *controller.Failure
	if !errors.As(err, &f) || f.Reason != workspace.ReasonUnschedulable || f.Terminal {
		t.Fatalf("no eligible node: err = %v, want a retryable Unschedulable failure", err)
	}
}

func TestFleet(t *testing.T) {
	ws1, ws2, ws3 := workspace.NewID(), workspace.NewID(), workspace.NewID()
	nodes := []*api.NodeListStub{
		{ID: "2", Name: "node-b", Status: api.NodeStatusReady, SchedulingEligibility: api.NodeSchedulingEligible, NodePool: "default", Datacenter: "dc1"},
		{ID: "1", Name: "node-a", Status: api.NodeStatusDown, SchedulingEligibility: api.NodeSchedulingIneligible, Drain: true},
	}
	vols := []*api.HostVolumeStub{
		{ID: "v1", Name: controller.VolumeName(ws1), NodeID: "1", State: "ready", CapacityBytes: 5},
		{ID: "v2", Name: controller.VolumeName(ws2), NodeID: "2", State: "ready"},
		{ID: "v3", Name: controller.VolumeName(ws3), NodeID: "9", State: "unavailable"},
		{ID: "v4", Name: "scratch", NodeID: "1"},
	}
	got := fleet(nodes, vols)
	want := []controller.FleetNode{
		{ID: "1", Name: "node-a", Status: api.NodeStatusDown, Draining: true,
			Volumes: []controller.FleetVolume{{WorkspaceID: ws1, VolumeID: "v1", State: "ready", CapacityBytes: 5}}},
		{ID: "2", Name: "node-b", Status: api.NodeStatusReady, Eligible: true, Pool: "default", Datacenter: "dc1",
			Volumes: []controller.FleetVolume{{WorkspaceID: ws2, VolumeID: "v2", State: "ready"}}},
		{ID: "9", Name: "9", Status: controller.NodeGone,
			Volumes: []controller.FleetVolume{{WorkspaceID: ws3, VolumeID: "v3", State: "unavailable"}}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("fleet:\n got %+v\nwant %+v", got, want)
	}
}

// TestDeleteVolumeOnAwayNode: Nomad cannot run the plugin's delete on a
// node that is down or gone, so the delete is forced there (Nomad forgets
// the volume); on a ready node it never is.
func TestDeleteVolumeOnAwayNode(t *testing.T) {
	for _, tc := range []struct {
		name  string
		node  func(f *fakeNomad)
		force string
	}{
		{"ready", func(f *fakeNomad) { f.json("GET /v1/node/n1", &api.Node{ID: "n1", Status: api.NodeStatusReady}) }, ""},
		{"down", func(f *fakeNomad) { f.json("GET /v1/node/n1", &api.Node{ID: "n1", Status: api.NodeStatusDown}) }, "true"},
		{"gone", func(*fakeNomad) {}, "true"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeNomad(t)
			f.json("GET /v1/volume/host/vol-1", &api.HostVolume{ID: "vol-1", Name: controller.VolumeName(testWS), NodeID: "n1"})
			f.json("DELETE /v1/volume/host/vol-1", struct{}{})
			tc.node(f)
			if err := newTestBackend(t, f, testOptions()).DeleteVolume(t.Context(), testWS, "vol-1"); err != nil {
				t.Fatal(err)
			}
			calls := f.calls("DELETE /v1/volume/host/vol-1")
			if len(calls) != 1 || calls[0].Query.Get("force") != tc.force {
				t.Fatalf("deletes %+v, want one with force=%q", calls, tc.force)
			}
		})
	}
}

// TestObserveGhostVolume: of two volumes of one name (a ghost its node
// registered again after Nomad forgot it), the newer is the home.
func TestObserveGhostVolume(t *testing.T) {
	ws := workspace.NewID()
	snap := assemble(listing{
		volumes: []*api.HostVolumeStub{
			{ID: "new", Name: controller.VolumeName(ws), NodeID: "b", State: api.HostVolumeStateReady, CreateIndex: 20},
			{ID: "ghost", Name: controller.VolumeName(ws), NodeID: "a", State: api.HostVolumeStateReady, CreateIndex: 10},
		},
		nodes: map[string]*api.NodeListStub{
			"a": {ID: "a", Name: "node-a", Status: api.NodeStatusReady, SchedulingEligibility: api.NodeSchedulingEligible},
			"b": {ID: "b", Name: "node-b", Status: api.NodeStatusReady, SchedulingEligibility: api.NodeSchedulingEligible},
		},
	})
	if o := snap.Workspaces[ws]; o.VolumeID != "new" || o.Node != "node-b" {
		t.Fatalf("observed %+v, want the newer volume", o)
	}
}
