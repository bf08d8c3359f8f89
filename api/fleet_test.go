package api_test

import (
	"context"
	"strings"
	"testing"

	"github.com/codehub-io/codehub/api/apitest"
	"github.com/codehub-io/codehub/controller"
	"github.com/codehub-io/codehub/workspace"
)

// fleetOf is a backend's node listing, filled in once the test has its
// workspaces.
type fleetOf struct{ nodes []controller.FleetNode }

func (f *fleetOf) Nodes(context.Context) ([]controller.FleetNode, error) { return f.nodes, nil }

type nodeJSON struct {
	ID            string `json:"id"`
	Name          string `json:"name"`
	Status        string `json:"status"`
	Eligible      bool   `json:"eligible"`
	Homes         int    `json:"homes"`
	DiskUsedBytes *int64 `json:"disk_used_bytes"`
	Evacuation    *struct {
		RequestedBy string `json:"requested_by"`
	} `json:"evacuation"`
	Volumes []struct {
		WorkspaceID string `json:"workspace_id"`
		Known       bool   `json:"known"`
		Name        string `json:"workspace_name"`
		Phase       string `json:"phase"`
		Unavailable string `json:"unavailable"`
	} `json:"volumes"`
}

// TestAdminNodes: admins see every node with its homes (named workspaces,
// sizes where reported, why a home waits for its node, ghost volumes under
// a gone node), and evacuate a node by name, which the controller then
// reads; others are refused.
func TestAdminNodes(t *testing.T) {
	fleet := &fleetOf{}
	env := apitest.New(t, apitest.Config{Fleet: fleet})
	alice, admin := env.CreateUser("alice", false), env.CreateUser("root", true)
	w := env.CreateWorkspace(alice, "dev")
	const why = "unavailable: node node-a is drained and holds the only copy of the home, which changed since its last archive"
	env.Exec(`UPDATE workspaces SET conditions = jsonb_build_object('storage.volume_ready',
		jsonb_build_object('status', 'True', 'reason', 'NodeIneligible', 'message', $2::text, 'node', 'node-a',
			'last_transition_time', now())) WHERE id = $1`, w.ID, why)
	orphan := workspace.NewID()
	fleet.nodes = []controller.FleetNode{
		{ID: "n1", Name: "node-a", Status: "ready", Eligible: true, Volumes: []controller.FleetVolume{
			{WorkspaceID: w.ID, VolumeID: "v1", State: "ready", CapacityBytes: 100},
		}},
		{ID: "n2", Name: "node-b", Status: "down"},
		{ID: "n9", Name: "n9", Status: controller.NodeGone, Volumes: []controller.FleetVolume{
			{WorkspaceID: orphan, VolumeID: "v9", State: "unavailable"},
		}},
	}
	c := env.Login(admin)
	v := validate(t, c)

	res := env.Do(c, "GET", "/api/v1/admin/nodes", nil)
	if res.StatusCode != 200 {
		t.Fatalf("list nodes: %d %s", res.StatusCode, res.Body)
	}
	var body struct {
		Nodes []nodeJSON `json:"nodes"`
	}
	res.Decode(t, &body)
	if len(body.Nodes) != 3 {
		t.Fatalf("nodes %+v", body.Nodes)
	}
	a, gone := body.Nodes[0], body.Nodes[2]
	if a.Homes != 1 || a.DiskUsedBytes == nil || *a.DiskUsedBytes != 100 || !a.Volumes[0].Known || a.Volumes[0].Name != "dev" || a.Volumes[0].Phase == "" {
		t.Errorf("node-a: %+v", a)
	}
	if a.Volumes[0].Unavailable != why {
		t.Errorf("node-a's home says %q, want why it waits", a.Volumes[0].Unavailable)
	}
	if gone.Status != "gone" || gone.DiskUsedBytes != nil || gone.Volumes[0].Known || gone.Volumes[0].WorkspaceID != orphan {
		t.Errorf("ghost volumes: %+v", gone)
	}

	res = env.Do(c, "POST", "/api/v1/admin/nodes/node-a/evacuate", nil)
	var n nodeJSON
	res.Decode(t, &n)
	if res.StatusCode != 200 || n.Evacuation == nil || n.Evacuation.RequestedBy != "root" {
		t.Fatalf("evacuate: %d %s", res.StatusCode, res.Body)
	}
	var count int
	if err := env.Pool.QueryRow(context.Background(), `SELECT count(*) FROM node_evacuations WHERE node_id = 'n1'`).Scan(&count); err != nil || count != 1 {
		t.Fatalf("evacuation rows %d, %v", count, err)
	}
	for _, tc := range []struct {
		method, path string
		status       int
		code         string
	}{
		{"POST", "/api/v1/admin/nodes/nope/evacuate", 404, "NOT_FOUND"},
		{"POST", "/api/v1/admin/nodes/n9/evacuate", 409, "INVALID_STATE"},
	} {
		if res := env.Do(c, tc.method, tc.path, nil); res.StatusCode != tc.status || res.ErrorCode() != tc.code {
			t.Errorf("%s %s: %d %s", tc.method, tc.path, res.StatusCode, res.Body)
		}
	}
	res = env.Do(c, "DELETE", "/api/v1/admin/nodes/n1/evacuate", nil)
	res.Decode(t, &n)
	if res.StatusCode != 200 || n.Evacuation != nil {
		t.Fatalf("cancel: %d %s", res.StatusCode, res.Body)
	}

	user := env.Login(alice)
	if res := env.Do(user, "GET", "/api/v1/admin/nodes", nil); res.StatusCode != 403 {
		t.Errorf("a user listed nodes: %d", res.StatusCode)
	}
	// A single-machine backend has no nodes.
	single := apitest.New(t, apitest.Config{})
	root := single.Login(single.CreateUser("root", true))
	if res := single.Do(root, "GET", "/api/v1/admin/nodes", nil); res.StatusCode != 404 {
		t.Errorf("nodes without a fleet: %d %s", res.StatusCode, res.Body)
	}
	if v.seen[200] == 0 {
		t.Error("no response was validated against the OpenAPI document")
	}
}

// TestAdminRestoreElsewhere: the admin is told what restoring a lost
// home's last archive elsewhere would lose, and nothing changes until they
// confirm with that archive's key.
func TestAdminRestoreElsewhere(t *testing.T) {
	env := apitest.New(t, apitest.Config{})
	alice, admin := env.CreateUser("alice", false), env.CreateUser("root", true)
	w := env.CreateWorkspace(alice, "dev")
	key := "archives/" + w.ID + "/01jb3x7k9q2m5n8p4r6s0t1v20/home.tar.zst"
	env.Exec(`UPDATE workspaces SET phase = 'PENDING', archive_key = $2, restore_marker = $2, conditions = jsonb_build_object('storage.volume_ready',
		jsonb_build_object('status', 'False', 'reason', 'NodeDown', 'message', 'unavailable: node node-a is down', 'node', 'node-a',
			'last_transition_time', now())) WHERE id = $1`, w.ID, key)
	c := env.Login(admin)
	v := validate(t, c)
	path := "/api/v1/admin/workspaces/" + w.ID + "/restore-elsewhere"

	res := env.Do(c, "POST", path, map[string]string{})
	if res.StatusCode != 409 || res.ErrorCode() != "CONFIRMATION_REQUIRED" || !strings.Contains(string(res.Body), "node-a") {
		t.Fatalf("unconfirmed: %d %s", res.StatusCode, res.Body)
	}
	if got := env.Workspace(w.ID).RestoreMarker; got == nil {
		t.Fatal("an unconfirmed request changed the workspace")
	}
	if res := env.Do(env.Login(alice), "POST", path, map[string]string{"confirm_archive_key": key}); res.StatusCode != 403 {
		t.Errorf("a user restored elsewhere: %d", res.StatusCode)
	}
	if res := env.Do(c, "POST", path, map[string]string{"confirm_archive_key": key}); res.StatusCode != 200 {
		t.Fatalf("confirmed: %d %s", res.StatusCode, res.Body)
	}
	if got := env.Workspace(w.ID).RestoreMarker; got != nil {
		t.Fatalf("restore marker %s after a confirmed restore elsewhere", *got)
	}
	if res := env.Do(c, "POST", path, map[string]string{"confirm_archive_key": key}); res.StatusCode != 409 || res.ErrorCode() != "INVALID_STATE" {
		t.Errorf("again: %d %s", res.StatusCode, res.Body)
	}
	if v.seen[409] == 0 {
		t.Error("no 409 was validated against the OpenAPI document")
	}
}
