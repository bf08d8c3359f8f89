package nomad

import (
	"crypto/rand"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/codehub-io/codehub/controller"
	"github.com/codehub-io/codehub/internal/nomadtest"
	"github.com/codehub-io/codehub/store"
	"github.com/codehub-io/codehub/workspace"
)

// BenchmarkFleetEvacuate measures how long an evacuation of node-a takes
// on a loopback cluster of two clients: from the admin's request until the
// last home, each holding 100 MiB of random bytes, is STANDBY on node-b.
// The controller runs passes back to back (100 ms apart) with the default
// configuration: the homes move coordinator.evacuation_parallel (2) at a
// time. Run it with
// -benchtime 1x: each size sets up its own cluster.
func BenchmarkFleetEvacuate(b *testing.B) {
	benchmarkMoves(b, []int{1, 10, 50}, evacuationFixture, "evacuation-s", func(f *fleetHarness, a *nomadtest.ClusterClient) error {
		_, err := store.StartEvacuation(b.Context(), f.pool, store.Evacuation{NodeID: a.NodeID, NodeName: a.Name, RequestedBy: "bench"})
		return err
	})
}

// drainNode drains node a as `nomad node drain -enable -deadline 10m`.
func drainNode(f *fleetHarness, a *nomadtest.ClusterClient) error {
	_, err := f.cluster.Client.Nodes().UpdateDrain(a.NodeID, &api.DrainSpec{Deadline: 10 * time.Minute}, false, nil)
	return err
}

// benchmarkMoves times, for each number of homes that fixture puts on
// node-a, from move (which asks for the homes to leave node-a) until the
// last home is back in its desired phase on another node with its move
// recorded, reported as metric.
func benchmarkMoves(b *testing.B, sizes []int, fixture func(*testing.B, int) (*fleetHarness, []string), metric string, move func(*fleetHarness, *nomadtest.ClusterClient) error) {
	for _, homes := range sizes {
		b.Run(fmt.Sprintf("homes=%d", homes), func(b *testing.B) {
			for range b.N {
				b.StopTimer()
				f, ids := fixture(b, homes)
				a := f.cluster.Node(b, "node-a")
				b.StartTimer()
				start := time.Now()
				if err := move(f, a); err != nil {
					b.Fatal(err)
				}
				// Fifty homes two at a time take minutes on this machine.
				f.tickAllWithin(b, 20*time.Minute, "every home moved", ids, func(w workspace.Workspace) bool {
					return w.Operation == workspace.OpNone && w.Phase == workspace.TargetPhase(w.DesiredState) &&
						w.Conditions[workspace.CondMoving].Reason == workspace.ReasonMoved
				})
				elapsed := time.Since(start)
				b.StopTimer()
				b.ReportMetric(elapsed.Seconds(), metric)
				b.ReportMetric(elapsed.Seconds()/float64(homes), "s/home")
			}
		})
	}
}

// evacuationFixture makes homes STANDBY workspaces on node-a, each with a
// 100 MiB file of random bytes (which no compression shrinks).
func evacuationFixture(b *testing.B, homes int) (*fleetHarness, []string) {
	f := newFleetHarness(b, true, controller.DefaultConfig())
	other := f.cluster.Node(b, "node-b")
	setEligible(b, f, other, false)
	var ids []string
	for i := range homes {
		id := f.create(b, fmt.Sprintf("home-%d", i))
		f.desire(b, id, workspace.DesiredStandby)
		ids = append(ids, id)
	}
	f.tickAllUntil(b, "every home STANDBY", ids, settled(workspace.PhaseStandby))
	fillHomes(b, f, ids)
	setEligible(b, f, other, true)
	return f, ids
}

// setEligible makes node eligible for new allocations or not, and waits
// until the server says it is eligible again.
func setEligible(b *testing.B, f *fleetHarness, node *nomadtest.ClusterClient, on bool) {
	b.Helper()
	if _, err := f.cluster.Client.Nodes().ToggleEligibility(node.NodeID, on, nil); err != nil {
		b.Fatal(err)
	}
	if !on {
		return
	}
	nomadtest.Eventually(b, time.Minute, node.Name+" eligible", func() bool {
		n, _, err := f.cluster.Client.Nodes().Info(node.NodeID, nil)
		return err == nil && n.SchedulingEligibility == api.NodeSchedulingEligible
	})
}

// BenchmarkFleetDrain measures a failover by a plain drain: from the drain
// request (as `nomad node drain -enable -deadline 10m`) until the last
// home, each holding 100 MiB of random bytes whose archive holds all of
// it, is STANDBY on node-b. Nothing runs on the drained node: each home is
// restored from its archive elsewhere. Passes run back to back (100 ms
// apart) with the default configuration. Run it with -benchtime 1x: each
// size sets up its own cluster.
func BenchmarkFleetDrain(b *testing.B) {
	benchmarkMoves(b, []int{1, 10, 50}, drainFixture, "failover-s", drainNode)
}

// BenchmarkFleetDrainRunning measures the failover of running workspaces
// by a plain drain: from the drain request until the last workspace, each
// home holding 100 MiB of random bytes it was never archived with, runs
// again on node-b. Each home is archived on node-a by its job's
// stop-archive task as the drain stops its program, then restored on
// node-b and started. Run it with -benchtime 1x.
func BenchmarkFleetDrainRunning(b *testing.B) {
	benchmarkMoves(b, []int{1, 10}, runningFixture, "failover-s", drainNode)
}

// runningFixture makes homes RUNNING workspaces on node-a, each with a
// 100 MiB file of random bytes written while it runs.
func runningFixture(b *testing.B, homes int) (*fleetHarness, []string) {
	f := newFleetHarness(b, true, controller.DefaultConfig())
	other := f.cluster.Node(b, "node-b")
	setEligible(b, f, other, false)
	var ids []string
	for i := range homes {
		ids = append(ids, f.create(b, fmt.Sprintf("home-%d", i)))
	}
	f.tickAllUntil(b, "every workspace RUNNING", ids, settled(workspace.PhaseRunning))
	fillHomes(b, f, ids)
	setEligible(b, f, other, true)
	return f, ids
}

// fillHomes writes a 100 MiB file of random bytes (which no compression
// shrinks) into each home.
func fillHomes(b *testing.B, f *fleetHarness, ids []string) {
	content := make([]byte, 100<<20)
	for _, id := range ids {
		if _, err := rand.Read(content); err != nil {
			b.Fatal(err)
		}
		home, err := f.backend.HomeDir(b.Context(), id)
		if err != nil {
			b.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(home, "data.bin"), content, 0o600); err != nil {
			b.Fatal(err)
		}
	}
}

// drainFixture is evacuationFixture with each home archived and restored
// on node-a, so that its archive holds all of it.
func drainFixture(b *testing.B, homes int) (*fleetHarness, []string) {
	f, ids := evacuationFixture(b, homes)
	other := f.cluster.Node(b, "node-b")
	setEligible(b, f, other, false)
	for _, d := range []workspace.DesiredState{workspace.DesiredArchived, workspace.DesiredStandby} {
		for _, id := range ids {
			f.desire(b, id, d)
		}
		f.tickAllUntil(b, "every home "+string(d), ids, settled(workspace.TargetPhase(d)))
	}
	setEligible(b, f, other, true)
	return f, ids
}

// BenchmarkFleetDrainMixed measures a plain drain with the default
// configuration (no backups) of a node whose homes are in mixed states:
// every other workspace runs, the others ran and were stopped (each saved
// by its stop archive). Each home holds 100 MiB of random bytes and a
// source tree with a node_modules folder of small files. The time runs
// from the drain request until the last home is back in its desired phase
// on node-b. Run it with -benchtime 1x.
func BenchmarkFleetDrainMixed(b *testing.B) {
	benchmarkMoves(b, []int{1, 10, 50}, mixedFixture, "drain-s", drainNode)
}

// mixedFixture makes homes workspaces on node-a, every other one RUNNING
// and the rest STANDBY after a run, each filled while it ran.
func mixedFixture(b *testing.B, homes int) (*fleetHarness, []string) {
	f := newFleetHarness(b, true, controller.DefaultConfig())
	other := f.cluster.Node(b, "node-b")
	setEligible(b, f, other, false)
	var ids, stopped []string
	for i := range homes {
		id := f.create(b, fmt.Sprintf("home-%d", i))
		ids = append(ids, id)
		if i%2 == 1 {
			stopped = append(stopped, id)
		}
	}
	f.tickAllUntil(b, "every workspace RUNNING", ids, settled(workspace.PhaseRunning))
	fillHomes(b, f, ids)
	for _, id := range ids {
		home, err := f.backend.HomeDir(b.Context(), id)
		if err != nil {
			b.Fatal(err)
		}
		writeSourceTree(b, home)
	}
	for _, id := range stopped {
		f.desire(b, id, workspace.DesiredStandby)
	}
	f.tickAllUntil(b, "the stopped homes saved", stopped, func(w workspace.Workspace) bool {
		return settled(workspace.PhaseStandby)(w) && workspace.RecoveryOf(w).Current
	})
	setEligible(b, f, other, true)
	return f, ids
}

// writeSourceTree writes a source checkout's shape into home: a few source
// files and a node_modules folder of 300 packages of six small text files
// each, the same bytes every time.
func writeSourceTree(b *testing.B, home string) {
	b.Helper()
	write := func(path string, n int) {
		full := filepath.Join(home, path)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			b.Fatal(err)
		}
		line := fmt.Sprintf("// %s\nexport function f(x) { return x + %d; }\n", path, n)
		content := make([]byte, 0, n*len(line))
		for range n {
			content = append(content, line...)
		}
		if err := os.WriteFile(full, content, 0o644); err != nil {
			b.Fatal(err)
		}
	}
	for i := range 20 {
		write(fmt.Sprintf("src/module%02d.js", i), 80)
	}
	for p := range 300 {
		dir := fmt.Sprintf("node_modules/pkg-%03d", p)
		write(dir+"/package.json", 2)
		write(dir+"/index.js", 20)
		for k := range 4 {
			write(fmt.Sprintf("%s/lib/part%d.js", dir, k), 10+p%30)
		}
	}
}
