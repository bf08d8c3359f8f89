package e2e

import (
	"bytes"
	"crypto/rand"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/codehub-io/codehub/internal/nomadtest"
)

type apiNode struct {
	ID         string `json:"id"`
	Name       string `json:"name"`
	Homes      int    `json:"homes"`
	Evacuation *struct {
		RequestedBy string `json:"requested_by"`
	} `json:"evacuation"`
}

// TestNomadFleetEvacuate is an operator's evacuation of a node, through
// the REST API of a server started from its configuration file, on a
// loopback cluster of two clients with the real code-server: a running and
// a stopped workspace on node-a move to node-b with their files, the
// running one's user sees the "moving to another machine" page meanwhile,
// and the node listing shows node-a empty.
func TestNomadFleetEvacuate(t *testing.T) {
	cluster := nomadtest.StartCluster(t, "node-a", "node-b")
	agent := &nomadtest.Agent{Addr: cluster.Addr, Client: cluster.Client}
	srv := startServer(t, nomadConfig(t, agent))
	c := login(t, srv)
	b := cluster.Node(t, "node-b")
	// Both homes start on node-a: node-b takes none meanwhile.
	if _, err := cluster.Client.Nodes().ToggleEligibility(b.NodeID, false, nil); err != nil {
		t.Fatal(err)
	}
	create := func(name string) string {
		var ws apiWorkspace
		if code := c.do("POST", "/api/v1/workspaces", map[string]string{"name": name}, &ws); code != http.StatusCreated {
			t.Fatalf("create: %d", code)
		}
		return ws.ID
	}
	running, stopped := create("running"), create("stopped")
	c.setDesired(stopped, "STANDBY")
	c.settle(running, "RUNNING", time.Now())
	c.settle(stopped, "STANDBY", time.Now())
	files := map[string][]byte{}
	for _, id := range []string{running, stopped} {
		content := make([]byte, 1<<20)
		if _, err := rand.Read(content); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(volumePath(t, agent, id), "notes.bin"), content, 0o644); err != nil {
			t.Fatal(err)
		}
		files[id] = content
	}
	if _, err := cluster.Client.Nodes().ToggleEligibility(b.NodeID, true, nil); err != nil {
		t.Fatal(err)
	}

	var node apiNode
	if code := c.do("POST", "/api/v1/admin/nodes/node-a/evacuate", nil, &node); code != http.StatusOK || node.Evacuation == nil || node.Homes != 2 {
		t.Fatalf("evacuate: %d %+v", code, node)
	}
	sawMoving := false
	nomadtest.Eventually(t, 5*time.Minute, "node-a empty", func() bool {
		resp := browserGet(t, c, "/w/"+running+"/")
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode == http.StatusServiceUnavailable && strings.Contains(string(body), "moving to another machine") {
			sawMoving = true
		}
		var list struct {
			Nodes []apiNode `json:"nodes"`
		}
		if code := c.do("GET", "/api/v1/admin/nodes", nil, &list); code != http.StatusOK {
			t.Fatalf("list nodes: %d", code)
		}
		for _, n := range list.Nodes {
			if n.Name == "node-a" {
				return n.Homes == 0
			}
		}
		return false
	})
	if !sawMoving {
		t.Error("the running workspace's user never saw the moving page")
	}
	c.settle(running, "RUNNING", time.Now())
	c.settle(stopped, "STANDBY", time.Now())
	for _, id := range []string{running, stopped} {
		vols := volumes(t, agent, id)
		if len(vols) != 1 || vols[0].NodeID != b.NodeID {
			t.Fatalf("workspace %s volumes %+v, want one on node-b", id, vols)
		}
		got, err := os.ReadFile(filepath.Join(volumePath(t, agent, id), "notes.bin"))
		if err != nil || !bytes.Equal(got, files[id]) {
			t.Fatalf("workspace %s: moved file differs (%v)", id, err)
		}
	}
}
