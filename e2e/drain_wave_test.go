package e2e

import (
	"os"
	"testing"
	"time"

	"github.com/codehub-io/codehub/internal/nomadtest"
)

// drainWaveWorkspaces is how many workspaces TestNomadFleetDrainDuringWave
// wakes at once: more than coordinator.parallel (8), so the wave takes
// several passes and the drain lands in the middle of it.
const drainWaveWorkspaces = 12

// TestNomadFleetDrainDuringWave drains, with `nomad node drain` as an
// operator types it, the client holding every home while a mass wake of
// them is under way, as autostart's at nine would be: the wake asks all of
// them to run at once, and the drain begins once a third runs. Every
// workspace ends RUNNING on the other client with its files, none passes
// through ERROR, nothing stays on the drained client, and the drain
// command returns. The program is the small test server, so that a dozen
// fit beside the rest on two cores.
func TestNomadFleetDrainDuringWave(t *testing.T) {
	nomadBin, cluster, agent, cfg := drainCluster(t)
	bins := t.TempDir()
	if err := os.Chmod(bins, 0o755); err != nil {
		t.Fatal(err)
	}
	wsserver := nomadtest.BuildProgram(t, bins, "../nomad/testdata/wsserver", "wsserver")
	cfg = nomadProgram(cfg, agent, wsserver, `args   = ["-listen", "127.0.0.1:%PORT%", "-home", "%HOME%"]
  cpu    = 20
  memory = 32`)
	cfg.maxRunning = drainWaveWorkspaces
	srv := startServer(t, cfg)
	c := login(t, srv)
	a, b := cluster.Node(t, "node-a"), cluster.Node(t, "node-b")
	// Every home starts on node-a: node-b takes none until the wave.
	if _, err := cluster.Client.Nodes().ToggleEligibility(b.NodeID, false, nil); err != nil {
		t.Fatal(err)
	}

	ids := make([]string, drainWaveWorkspaces)
	for i := range ids {
		ids[i] = c.create("wave-" + string(rune('a'+i)))
	}
	c.awaitAll(ids, "RUNNING", time.Now(), 10*time.Minute)
	files := map[string]map[string][]byte{}
	for _, id := range ids {
		if !onNode(t, agent, id, a.NodeID) {
			t.Fatalf("workspace %s is not on node-a before the wave", id)
		}
		files[id] = writeHomeFiles(t, volumePath(t, agent, id))
	}
	c.each(ids, func(id string) error { return c.trySetDesired(id, "STANDBY") })
	c.awaitAll(ids, "STANDBY", time.Now(), 10*time.Minute)
	// Stopped long before nine: each stop archive has committed.
	for _, id := range ids {
		nomadtest.Eventually(t, 2*time.Minute, "the stop archive of "+id+" committed", func() bool {
			rp := recoveryPoint(t, c, id)
			return rp.Current && rp.ArchivedAt != nil
		})
	}
	if _, err := cluster.Client.Nodes().ToggleEligibility(b.NodeID, true, nil); err != nil {
		t.Fatal(err)
	}

	c.each(ids, func(id string) error { return c.trySetDesired(id, "RUNNING") })
	c.awaitCount(ids, "RUNNING", drainWaveWorkspaces/3, 10*time.Minute)
	drain := startDrain(t, nomadBin, cluster.Addr, a.NodeID, "-deadline", "10m")

	// awaitAll fails the test on a workspace in ERROR.
	c.awaitAll(ids, "RUNNING", time.Now(), 15*time.Minute)
	waitFor(t, 10*time.Minute, "every home running off node-a", func() bool {
		for _, ws := range c.listAll() {
			if ws.Phase == "ERROR" {
				t.Fatalf("workspace %s in ERROR: %+v", ws.ID, ws)
			}
			if ws.Phase != "RUNNING" || ws.Operation != "NONE" || onNode(t, agent, ws.ID, a.NodeID) {
				return false
			}
		}
		return homesOn(t, c, "node-a") == 0
	})
	drain.wait(t)
	homesMovedTo(t, agent, b.NodeID, files)
	for _, v := range homeVolumes(t, agent) {
		if v.NodeID == a.NodeID {
			t.Errorf("the drained node still holds %s", v.Name)
		}
	}
}
