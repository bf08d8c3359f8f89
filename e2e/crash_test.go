package e2e

import (
	"bytes"
	"crypto/rand"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/nomad/api"

	"github.com/codehub-io/codehub/archive"
	"github.com/codehub-io/codehub/internal/nomadtest"
)

// homeFiles is what the test puts into each home: a few MiB that do not
// compress, and a small file in a folder.
var homeFiles = []struct {
	name string
	size int
}{{"project.bin", 4 << 20}, {"src/main.go", 16 << 10}}

// TestNomadFleetEvacuateKilled evacuates a node holding a RUNNING, a
// STANDBY and an ARCHIVED workspace and kills the `codehub server` process
// with SIGKILL three times on the way: once an archive is in S3 but not
// yet recorded, while a restore job is live, and once a restore filled its
// volume but is not yet recorded. Each time the batch jobs end without
// codehub, nothing is deleted, and a new server started from the same
// configuration file takes over. The evacuation then completes: every
// home on the other node with its files byte-identical and in its desired
// state, no ERROR, nothing left on the evacuated node, each moved home
// archived exactly once, no batch job left behind and one volume per
// workspace.
func TestNomadFleetEvacuateKilled(t *testing.T) {
	cluster := nomadtest.StartCluster(t, "node-a", "node-b")
	agent := &nomadtest.Agent{Addr: cluster.Addr, Client: cluster.Client}
	cfg := nomadConfig(t, agent)
	// A batch job that fetched codehub from the dead server fails; its
	// retry comes within seconds.
	cfg.coordinator = "  backoff_base = \"1s\"\n  backoff_max  = \"2s\"\n"
	srv := startServer(t, cfg)
	c := login(t, srv)
	a, b := cluster.Node(t, "node-a"), cluster.Node(t, "node-b")
	// Every home starts on node-a: node-b takes none meanwhile.
	if _, err := cluster.Client.Nodes().ToggleEligibility(b.NodeID, false, nil); err != nil {
		t.Fatal(err)
	}
	// One may run per user: the others are created in standby.
	running, standby, archived := c.create("running"), c.create("standby"), c.create("archived")
	moving := []string{running, standby}
	c.settle(running, "RUNNING", time.Now())
	c.settle(standby, "STANDBY", time.Now())
	c.settle(archived, "STANDBY", time.Now())
	files := map[string]map[string][]byte{}
	for _, id := range []string{running, standby, archived} {
		files[id] = writeHomeFiles(t, volumePath(t, agent, id))
	}
	c.setDesired(archived, "ARCHIVED")
	c.settle(archived, "ARCHIVED", time.Now())
	archivedBefore := archives(t, c, archived)
	if _, err := cluster.Client.Nodes().ToggleEligibility(b.NodeID, true, nil); err != nil {
		t.Fatal(err)
	}

	var node apiNode
	if code := c.do("POST", "/api/v1/admin/nodes/node-a/evacuate", nil, &node); code != http.StatusOK || node.Homes != 2 {
		t.Fatalf("evacuate: %d %+v", code, node)
	}
	// Each kill lands where a codehub that forgot or redid something would
	// lose or duplicate a home.
	killPoints := []struct {
		what    string
		reached func() bool
	}{
		// Committed, but not yet recorded (the volume on node-a is all
		// that says so): archiving again would duplicate it, deleting the
		// volume before reading the commit could lose it.
		{"an archive of a moving home is in S3", func() bool {
			return slices.ContainsFunc(moving, func(id string) bool { return len(archiveKeys(t, cfg, id)) > 0 })
		}},
		// Its task fetches codehub from the server that is now gone: the
		// job fails and the next codehub tries again, into the same volume.
		{"a restore job is live", func() bool { return liveJob(t, agent, moving, "restore") != "" }},
		// Restored on disk, but not yet recorded.
		{"a home is restored on node-b", func() bool {
			return slices.ContainsFunc(moving, func(id string) bool { return restoredOn(t, agent, id, b.NodeID) })
		}},
	}
	for _, k := range killPoints {
		waitFor(t, 3*time.Minute, k.what, k.reached)
		kept := homeVolumes(t, agent)
		srv.kill(t)
		t.Logf("killed codehub once %s", k.what)
		nomadtest.Eventually(t, 2*time.Minute, "batch jobs ended without codehub", func() bool {
			return liveJob(t, agent, moving, "archive") == "" && liveJob(t, agent, moving, "restore") == ""
		})
		checkKept(t, agent, kept, a.NodeID, files)
		srv.start(t)
		c = login(t, srv)
	}

	nomadtest.Eventually(t, 5*time.Minute, "every home moved off node-a", func() bool {
		for _, id := range []string{running, standby, archived} {
			if !inDesiredState(t, c, id, slices.Contains(moving, id)) {
				return false
			}
		}
		return homesOn(t, c, "node-a") == 0
	})

	for _, id := range []string{running, standby, archived} {
		var ws apiWorkspace
		if code := c.do("GET", "/api/v1/workspaces/"+id, nil, &ws); code != http.StatusOK || ws.Reason != "" {
			t.Errorf("workspace %s: %d, error %q after its move succeeded", id, code, ws.Reason)
		}
	}
	for _, id := range moving {
		vols := volumes(t, agent, id)
		if len(vols) != 1 || vols[0].NodeID != b.NodeID {
			t.Errorf("workspace %s volumes %+v, want one on node-b", id, vols)
			continue
		}
		checkHomeFiles(t, id, volumePath(t, agent, id), files[id])
		// Uploaded whole once: the stop archive of a running one, then the
		// move's archive on it (what changed since), or the move's alone.
		as := archives(t, c, id)
		if len(as) < 1 || len(as) > 2 || !as[0].Current || len(as) == 2 && as[0].BuildsOn != as[1].ID {
			t.Errorf("workspace %s has archives %+v after one move, want the current one, building on the stop archive if any", id, as)
		}
		list, err := archive.NewStore(hclog.NewNullLogger(), cfg.s3.Client, cfg.s3.Bucket).List(t.Context(), id)
		if err != nil {
			t.Fatal(err)
		}
		if len(list.Complete) != len(as) || len(list.Incomplete) != 0 {
			t.Errorf("workspace %s in S3: %d complete and %d incomplete archives, want the %d listed", id, len(list.Complete), len(list.Incomplete), len(as))
		}
	}
	openWorkbench(t, c, apiWorkspace{ID: running, Name: "running"}, volumePath(t, agent, running))
	if as := archives(t, c, archived); len(as) != 1 || as[0].ID != archivedBefore[0].ID || !as[0].Current {
		t.Errorf("the archived workspace's archives changed: %+v, before %+v", as, archivedBefore)
	}
	if vols := volumes(t, agent, archived); len(vols) != 0 {
		t.Errorf("the archived workspace has volumes %+v", vols)
	}
	for _, v := range homeVolumes(t, agent) {
		if v.NodeID == a.NodeID {
			t.Errorf("evacuated node still holds %s", v.Name)
		}
	}
	// A batch job is purged once its result is recorded: one left behind
	// is an operation codehub lost track of.
	for _, id := range []string{running, standby, archived} {
		for _, j := range jobs(t, agent, id) {
			if strings.HasSuffix(j.ID, "-archive") || strings.HasSuffix(j.ID, "-restore") {
				t.Errorf("%s left in Nomad after the evacuation (%s)", j.ID, j.Status)
			}
		}
	}
}

// writeHomeFiles fills a home with homeFiles and returns their contents.
func writeHomeFiles(t *testing.T, home string) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	for _, f := range homeFiles {
		content := make([]byte, f.size)
		if _, err := rand.Read(content); err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(home, f.name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, content, 0o644); err != nil {
			t.Fatal(err)
		}
		out[f.name] = content
	}
	return out
}

func checkHomeFiles(t *testing.T, id, home string, want map[string][]byte) {
	t.Helper()
	for name, content := range want {
		got, err := os.ReadFile(filepath.Join(home, name))
		if err != nil || !bytes.Equal(got, content) {
			t.Errorf("workspace %s: %s in %s differs from what was written (%v)", id, name, home, err)
		}
	}
}

// liveJob names a pending or running `ws-{id}-{kind}` job of one of ids,
// or is empty.
func liveJob(t *testing.T, agent *nomadtest.Agent, ids []string, kind string) string {
	t.Helper()
	for _, id := range ids {
		for _, j := range jobs(t, agent, id) {
			if j.ID == "ws-"+id+"-"+kind && !j.Stop && j.Status != "dead" {
				return j.ID
			}
		}
	}
	return ""
}

// homeVolumes lists every workspace home volume in the cluster.
func homeVolumes(t *testing.T, agent *nomadtest.Agent) []*api.HostVolumeStub {
	t.Helper()
	vols, _, err := agent.Client.HostVolumes().List(nil, &api.QueryOptions{Prefix: "ws-"})
	if err != nil {
		t.Fatalf("list volumes: %v", err)
	}
	return vols
}

// checkKept fails unless every volume of kept still exists, those on the
// evacuated node with the files written into them (a restore's volume
// elsewhere may hold part of them).
func checkKept(t *testing.T, agent *nomadtest.Agent, kept []*api.HostVolumeStub, evacuated string, files map[string]map[string][]byte) {
	t.Helper()
	now := map[string]bool{}
	for _, v := range homeVolumes(t, agent) {
		now[v.ID] = true
	}
	for _, v := range kept {
		if !now[v.ID] {
			t.Fatalf("volume %s (%s) was deleted while codehub was down", v.Name, v.ID)
		}
		if v.NodeID != evacuated {
			continue
		}
		vol, _, err := agent.Client.HostVolumes().Get(v.ID, nil)
		if err != nil {
			t.Fatal(err)
		}
		id := strings.TrimSuffix(strings.TrimPrefix(v.Name, "ws-"), "-home")
		checkHomeFiles(t, id, vol.HostPath, files[id])
	}
}

// inDesiredState reports the workspace in its desired phase with no
// operation and, for a moved one, its move recorded; ERROR fails the test.
func inDesiredState(t *testing.T, c *apiClient, id string, moved bool) bool {
	t.Helper()
	var ws struct {
		apiWorkspace
		Conditions map[string]struct {
			Reason string `json:"reason"`
		} `json:"conditions"`
	}
	if code := c.do("GET", "/api/v1/workspaces/"+id, nil, &ws); code != http.StatusOK {
		t.Fatalf("get workspace: %d", code)
	}
	if ws.Phase == "ERROR" {
		t.Fatalf("workspace %s in ERROR: %+v", id, ws.apiWorkspace)
	}
	if ws.Phase != ws.Desired || ws.Operation != "NONE" {
		return false
	}
	return !moved || ws.Conditions["storage.moving"].Reason == "Moved"
}

// homesOn is how many homes the admin node listing counts on the node.
func homesOn(t *testing.T, c *apiClient, name string) int {
	t.Helper()
	var list struct {
		Nodes []apiNode `json:"nodes"`
	}
	if code := c.do("GET", "/api/v1/admin/nodes", nil, &list); code != http.StatusOK {
		t.Fatalf("list nodes: %d", code)
	}
	for _, n := range list.Nodes {
		if n.Name == name {
			return n.Homes
		}
	}
	t.Fatalf("node %s not listed", name)
	return 0
}

// waitFor polls cond more often than nomadtest.Eventually: a home of a
// few MiB is archived or restored in well under a second, and a kill must
// land inside that.
func waitFor(t testing.TB, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting until %s after %s", what, limit)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// restoredOn reports a volume of the workspace on the node that holds the
// home's files at full size: the restore swapped them into place.
func restoredOn(t *testing.T, agent *nomadtest.Agent, id, nodeID string) bool {
	t.Helper()
	for _, v := range volumes(t, agent, id) {
		if v.NodeID != nodeID {
			continue
		}
		vol, _, err := agent.Client.HostVolumes().Get(v.ID, nil)
		if err != nil {
			t.Fatal(err)
		}
		if fi, err := os.Stat(filepath.Join(vol.HostPath, homeFiles[0].name)); err == nil && fi.Size() == int64(homeFiles[0].size) {
			return true
		}
	}
	return false
}
