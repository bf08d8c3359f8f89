package nomad

import (
	"encoding/json"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/codehub-io/codehub/controller"
)

func TestReviverDue(t *testing.T) {
	t0 := time.Date(2026, 11, 2, 9, 0, 0, 0, time.UTC)
	nodes := map[string]*api.NodeListStub{
		"n-up":      {ID: "n-up", Status: api.NodeStatusReady, SchedulingEligibility: api.NodeSchedulingEligible},
		"n-drained": {ID: "n-drained", Status: api.NodeStatusReady, SchedulingEligibility: api.NodeSchedulingIneligible},
		"n-down":    {ID: "n-down", Status: api.NodeStatusDown},
		"n-init":    {ID: "n-init", Status: api.NodeStatusInit},
	}
	vol := func(id, node string, state api.HostVolumeState) *api.HostVolumeStub {
		return &api.HostVolumeStub{ID: id, Name: controller.VolumeName("01" + id), NodeID: node, State: state}
	}
	stuck := func(id string) *api.HostVolumeStub { return vol(id, "n-up", api.HostVolumeStateUnavailable) }
	type look struct {
		at       time.Duration
		vols     []*api.HostVolumeStub
		complete bool
		want     []string
	}
	tests := []struct {
		name  string
		looks []look
	}{
		{"unavailable on a ready node, registered again once it lasted", []look{
			{0, []*api.HostVolumeStub{stuck("a")}, true, nil},
			{reviveAfter - time.Second, []*api.HostVolumeStub{stuck("a")}, true, nil},
			{reviveAfter, []*api.HostVolumeStub{stuck("a")}, true, []string{"a"}},
			{reviveAfter + time.Second, []*api.HostVolumeStub{stuck("a")}, true, nil},
			{reviveAfter + reviveEvery, []*api.HostVolumeStub{stuck("a")}, true, []string{"a"}},
		}},
		{"turning ready starts the clock again", []look{
			{0, []*api.HostVolumeStub{stuck("a")}, true, nil},
			{10 * time.Second, []*api.HostVolumeStub{vol("a", "n-up", api.HostVolumeStateReady)}, true, nil},
			{reviveAfter, []*api.HostVolumeStub{stuck("a")}, true, nil},
			{2 * reviveAfter, []*api.HostVolumeStub{stuck("a")}, true, []string{"a"}},
		}},
		{"a drained but ready node counts", []look{
			{0, []*api.HostVolumeStub{vol("a", "n-drained", api.HostVolumeStateUnavailable)}, true, nil},
			{reviveAfter, []*api.HostVolumeStub{vol("a", "n-drained", api.HostVolumeStateUnavailable)}, true, []string{"a"}},
		}},
		{"only the node's return helps a node down, gone or not ready yet", []look{
			{0, []*api.HostVolumeStub{
				vol("a", "n-down", api.HostVolumeStateUnavailable),
				vol("b", "n-gone", api.HostVolumeStateUnavailable),
				vol("c", "n-init", api.HostVolumeStateUnavailable),
			}, true, nil},
			{time.Hour, []*api.HostVolumeStub{
				vol("a", "n-down", api.HostVolumeStateUnavailable),
				vol("b", "n-gone", api.HostVolumeStateUnavailable),
				vol("c", "n-init", api.HostVolumeStateUnavailable),
			}, true, nil},
		}},
		{"pending and ready volumes are left alone", []look{
			{0, []*api.HostVolumeStub{vol("a", "n-up", api.HostVolumeStatePending), vol("b", "n-up", api.HostVolumeStateReady)}, true, nil},
			{time.Hour, []*api.HostVolumeStub{vol("a", "n-up", api.HostVolumeStatePending), vol("b", "n-up", api.HostVolumeStateReady)}, true, nil},
		}},
		{"a partial observation keeps what it did not see", []look{
			{0, []*api.HostVolumeStub{stuck("a")}, true, nil},
			{time.Second, nil, false, nil},
			{reviveAfter, []*api.HostVolumeStub{stuck("a")}, false, []string{"a"}},
		}},
		{"a complete observation forgets a volume gone", []look{
			{0, []*api.HostVolumeStub{stuck("a")}, true, nil},
			{time.Second, nil, true, nil},
			{reviveAfter, []*api.HostVolumeStub{stuck("a")}, true, nil},
		}},
		{"a few per pass, longest stuck first", []look{
			{0, []*api.HostVolumeStub{stuck("f")}, false, nil},
			{time.Second, []*api.HostVolumeStub{stuck("a"), stuck("b"), stuck("c"), stuck("d"), stuck("e")}, false, nil},
			{time.Minute, []*api.HostVolumeStub{stuck("a"), stuck("b"), stuck("c"), stuck("d"), stuck("e"), stuck("f")}, true, []string{"f", "a", "b", "c"}},
			{time.Minute + time.Second, []*api.HostVolumeStub{stuck("a"), stuck("b"), stuck("c"), stuck("d"), stuck("e"), stuck("f")}, true, []string{"d", "e"}},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newReviver()
			for i, l := range tt.looks {
				got := r.due(l.vols, nodes, t0.Add(l.at), l.complete)
				if !slices.Equal(got, l.want) {
					t.Errorf("look %d (at %v): due %v, want %v", i, l.at, got, l.want)
				}
			}
		})
	}
}

// TestObserveRevivesStuckVolume: a home volume Nomad keeps unavailable on
// a ready node is sent again as the create request it was made with, its
// id included, once it has stayed so for reviveAfter; the workspace waits
// meanwhile, and one on a node that is down is left to the node's return.
func TestObserveRevivesStuckVolume(t *testing.T) {
	const wsStuck, wsAway = "01ssssssssssssssssssssssss", "01tttttttttttttttttttttttt"
	f := newFakeNomad(t)
	f.json("GET /v1/nodes", []*api.NodeListStub{
		{ID: "n-up", Name: "node-up", Status: api.NodeStatusReady, SchedulingEligibility: api.NodeSchedulingEligible},
		{ID: "n-down", Name: "node-down", Status: api.NodeStatusDown, SchedulingEligibility: api.NodeSchedulingEligible},
	})
	f.json("GET /v1/jobs", []*api.JobListStub{})
	f.json("GET /v1/allocations", []*api.AllocationListStub{})
	f.json("GET /v1/services", []*api.ServiceRegistrationListStub{})
	f.json("GET /v1/volumes", []*api.HostVolumeStub{
		{ID: "v-stuck", Name: controller.VolumeName(wsStuck), State: api.HostVolumeStateUnavailable, NodeID: "n-up"},
		{ID: "v-away", Name: controller.VolumeName(wsAway), State: api.HostVolumeStateUnavailable, NodeID: "n-down"},
	})
	caps := []*api.HostVolumeCapability{
		{AttachmentMode: api.HostVolumeAttachmentModeFilesystem, AccessMode: api.HostVolumeAccessModeSingleNodeWriter},
	}
	f.json("GET /v1/volume/host/v-stuck", &api.HostVolume{
		Namespace: "default", ID: "v-stuck", Name: controller.VolumeName(wsStuck), PluginID: "mkdir", NodePool: "default",
		NodeID: "n-up", RequestedCapabilities: caps, Parameters: map[string]string{"uid": "1000", "mode": "0700"},
		HostPath: "/opt/nomad/host_volumes/v-stuck", State: api.HostVolumeStateUnavailable, CapacityBytes: 1,
	})
	f.json("PUT /v1/volume/host/create", &api.HostVolumeCreateResponse{Volume: &api.HostVolume{ID: "v-stuck"}})
	b := newTestBackend(t, f, testOptions())
	now := time.Date(2026, 11, 2, 9, 0, 0, 0, time.UTC)
	b.now = func() time.Time { return now }

	for _, after := range []time.Duration{0, reviveAfter - time.Second} {
		now = now.Add(after)
		snap, err := b.Observe(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if o := snap.Workspaces[wsStuck]; !o.VolumeExists || o.VolumeReady || o.NodeAway != "" {
			t.Fatalf("stuck volume observed as %+v; want existing, not ready, its node here", o)
		}
		if got := f.calls("PUT /v1/volume/host/create"); len(got) != 0 {
			t.Fatalf("registered again after %v: %v", after, got)
		}
	}
	now = now.Add(time.Second)
	if _, err := b.Observe(t.Context()); err != nil {
		t.Fatal(err)
	}
	creates := f.calls("PUT /v1/volume/host/create")
	if len(creates) != 1 {
		t.Fatalf("create requests after %v unavailable: %d, want 1 (of the volume on the ready node)", reviveAfter, len(creates))
	}
	var req api.HostVolumeCreateRequest
	if err := json.Unmarshal([]byte(creates[0].Body), &req); err != nil {
		t.Fatal(err)
	}
	v := req.Volume
	if v.ID != "v-stuck" || v.Name != controller.VolumeName(wsStuck) || v.NodeID != "n-up" || v.PluginID != "mkdir" ||
		v.NodePool != "default" || v.Parameters["uid"] != "1000" || len(v.RequestedCapabilities) != 1 {
		t.Errorf("create request %+v; want the volume's own, id included", v)
	}
	if v.HostPath != "" || v.State != "" || v.CapacityBytes != 0 {
		t.Errorf("create request carries what Nomad owns: path %q, state %q, capacity %d", v.HostPath, v.State, v.CapacityBytes)
	}

	// A refused registration is tried again reviveEvery later, not before.
	f.status("PUT /v1/volume/host/create", http.StatusBadRequest, "cannot update a volume in use")
	now = now.Add(reviveEvery - time.Second)
	if _, err := b.Observe(t.Context()); err != nil {
		t.Fatal(err)
	}
	now = now.Add(time.Second)
	if _, err := b.Observe(t.Context()); err != nil {
		t.Fatalf("a refused registration failed the observation: %v", err)
	}
	if got := len(f.calls("PUT /v1/volume/host/create")); got != 2 {
		t.Errorf("create requests after %v more: %d, want 2", reviveEvery, got)
	}
}
