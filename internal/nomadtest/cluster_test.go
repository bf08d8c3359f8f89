package nomadtest

import (
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"
)

// TestCluster starts a server and two clients, kills one with SIGKILL
// until the server calls it down, and brings it back as the same node.
func TestCluster(t *testing.T) {
	c := StartCluster(t, "node-a", "node-b")
	a, b := c.Node(t, "node-a"), c.Node(t, "node-b")
	if a.NodeID == "" || a.NodeID == b.NodeID || a.HostVolumesDir == b.HostVolumesDir {
		t.Fatalf("clients are not distinct nodes: %+v %+v", a, b)
	}
	id := a.NodeID
	a.Kill(t)
	a.WaitStatus(t, time.Minute, api.NodeStatusDown)
	b.WaitStatus(t, time.Second, api.NodeStatusReady)
	a.Start(t)
	a.WaitReady(t)
	if a.NodeID != id {
		t.Fatalf("node came back as %s, was %s", a.NodeID, id)
	}
}
