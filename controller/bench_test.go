package controller

import (
	"context"
	"encoding/json"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/jackc/pgx/v5"

	"github.com/codehub-io/codehub/workspace"
)

// staticBackend returns a prepared snapshot and counts calls; it isolates
// the controller's own cost from the fake's bookkeeping.
type staticBackend struct {
	snap      Snapshot
	observes  atomic.Int64
	actuators atomic.Int64
}

func (s *staticBackend) Observe(context.Context) (Snapshot, error) {
	s.observes.Add(1)
	return s.snap, nil
}

func (s *staticBackend) act() error { s.actuators.Add(1); return nil }

func (s *staticBackend) ProvisionVolume(context.Context, VolumeSpec) error     { return s.act() }
func (s *staticBackend) DeleteVolume(context.Context, string, string) error    { return s.act() }
func (s *staticBackend) StartWorkspace(context.Context, WorkspaceSpec) error   { return s.act() }
func (s *staticBackend) StopWorkspace(context.Context, string, StopMode) error { return s.act() }
func (s *staticBackend) GiveUpStopArchive(context.Context, string) error       { return s.act() }
func (s *staticBackend) SubmitArchive(context.Context, JobSpec) error          { return s.act() }
func (s *staticBackend) SubmitRestore(context.Context, JobSpec) error          { return s.act() }
func (s *staticBackend) PurgeJob(context.Context, string, JobKind) error       { return s.act() }
func (s *staticBackend) StopJob(context.Context, string, JobKind) error        { return s.act() }

var runningObs = Observed{VolumeExists: true, VolumeReady: true, ContainerLive: true, UpstreamReady: true}

// seedRunning inserts n converged RUNNING workspaces and returns their ids
// and a backend observing them running.
func seedRunning(tb testing.TB, h *harness, n int) ([]string, *staticBackend) {
	tb.Helper()
	proto := workspace.Workspace{Operation: workspace.OpNone}
	proto.Conditions = observeConditions(proto, runningObs, time.Now())
	derive(proto.Conditions, &proto, time.Now())
	conds, err := json.Marshal(proto.Conditions)
	if err != nil {
		tb.Fatal(err)
	}
	ids := make([]string, n)
	rows := make([][]any, n)
	snap := Snapshot{Workspaces: make(map[string]Observed, n)}
	for i := range n {
		ids[i] = workspace.NewID()
		rows[i] = []any{ids[i], h.owner, fmt.Sprintf("w%d", i), "img:1", "RUNNING", "RUNNING", conds, workspace.NewID()}
		snap.Workspaces[ids[i]] = runningObs
	}
	_, err = h.pool.CopyFrom(context.Background(), pgx.Identifier{"workspaces"},
		[]string{"id", "owner_id", "name", "image", "desired_state", "phase", "conditions", "run_id"}, pgx.CopyFromRows(rows))
	if err != nil {
		tb.Fatal(err)
	}
	return ids, &staticBackend{snap: snap}
}

func benchController(h *harness, backend Backend) *WorkspaceController {
	return NewWorkspaceController(hclog.NewNullLogger(), h.pool, backend, newFakeArchives(), DefaultConfig())
}

// BenchmarkConvergedTick: one pass over converged workspaces by a leader
// that has read them before: every pass full (each row's version listed,
// every workspace planned), passes between full ones as a controller
// ticked without notifications makes them (versions listed, only what
// changed planned), and as the leader makes them (only the rows its
// session's notifications name read).
func BenchmarkConvergedTick(b *testing.B) {
	for _, n := range []int{10000, 100000} {
		for _, mode := range []string{"full", "listed", "notified"} {
			b.Run(fmt.Sprintf("%d/%s", n, mode), func(b *testing.B) {
				h := newHarness(b)
				_, backend := seedRunning(b, h, n)
				cfg := DefaultConfig()
				if mode == "full" {
					cfg.FullPassInterval = 0
				}
				c := NewWorkspaceController(hclog.NewNullLogger(), h.pool, backend, newFakeArchives(), cfg)
				if mode == "notified" {
					c.notes.follow(h.epoch)
				}
				ctx := context.Background()
				if _, err := c.Tick(ctx, h.epoch); err != nil {
					b.Fatal(err)
				}
				backend.observes.Store(0)
				var writes, steps, planned int
				b.ResetTimer()
				for b.Loop() {
					stats, err := c.Tick(ctx, h.epoch)
					if err != nil {
						b.Fatal(err)
					}
					writes += stats.Writes
					steps += stats.Steps
					planned += stats.Planned
				}
				b.ReportMetric(float64(writes)/float64(b.N), "writes/op")
				b.ReportMetric(float64(planned)/float64(b.N), "planned/op")
				b.ReportMetric(float64(backend.observes.Load())/float64(b.N), "observes/op")
				b.ReportMetric(float64(backend.actuators.Load()), "actuator-calls")
				if writes != 0 || steps != 0 {
					b.Fatalf("converged passes wrote %d rows and ran %d steps", writes, steps)
				}
			})
		}
	}
}

// BenchmarkColdTick: the first pass of a new leader over 10 000 converged
// workspaces, reading every row.
func BenchmarkColdTick(b *testing.B) {
	h := newHarness(b)
	_, backend := seedRunning(b, h, 10000)
	ctx := context.Background()
	var writes int
	for b.Loop() {
		stats, err := benchController(h, backend).Tick(ctx, h.epoch)
		if err != nil {
			b.Fatal(err)
		}
		writes += stats.Writes
	}
	b.ReportMetric(float64(writes)/float64(b.N), "writes/op")
}

// BenchmarkTickWithChanges: 10 000 workspaces of which 1 000 change their
// observation (health check flips) on every pass.
func BenchmarkTickWithChanges(b *testing.B) {
	h := newHarness(b)
	ids, backend := seedRunning(b, h, 10000)
	c := benchController(h, backend)
	ctx := context.Background()
	flip := false
	var writes, planned int
	b.ResetTimer()
	for b.Loop() {
		b.StopTimer()
		flip = !flip
		snap := Snapshot{Workspaces: make(map[string]Observed, len(ids))}
		for i, id := range ids {
			o := runningObs
			if i < 1000 && flip {
				o.UpstreamReady = false
			}
			snap.Workspaces[id] = o
		}
		backend.snap = snap
		b.StartTimer()
		stats, err := c.Tick(ctx, h.epoch)
		if err != nil {
			b.Fatal(err)
		}
		writes += stats.Writes
		planned += stats.Planned
	}
	b.ReportMetric(float64(writes)/float64(b.N), "writes/op")
	b.ReportMetric(float64(planned)/float64(b.N), "planned/op")
	b.ReportMetric(float64(backend.observes.Load())/float64(b.N), "observes/op")
}

// TestBackendCallsPerTickConstant: a converged pass costs one Observe and
// no actuator call, at 10 and at 2 000 workspaces alike.
func TestBackendCallsPerTickConstant(t *testing.T) {
	for _, n := range []int{10, 2000} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			h := newHarness(t)
			_, backend := seedRunning(t, h, n)
			c := benchController(h, backend)
			for range 3 {
				stats, err := c.Tick(context.Background(), h.epoch)
				if err != nil || stats.Writes != 0 || stats.Workspaces != n {
					t.Fatalf("pass: %+v, %v", stats, err)
				}
			}
			if backend.observes.Load() != 3 || backend.actuators.Load() != 0 {
				t.Fatalf("%d observes, %d actuator calls for 3 passes", backend.observes.Load(), backend.actuators.Load())
			}
		})
	}
}

// BenchmarkFailoverTakeover: time from the leader's session dying to the
// other replica leading, with the production retry interval.
func BenchmarkFailoverTakeover(b *testing.B) {
	h := newHarness(b)
	h.setClockReal()
	cfg := testCoordinatorConfig()
	cfg.RetryInterval = DefaultCoordinatorConfig("", "").RetryInterval
	a := startReplica(h, "a", cfg)
	c := startReplica(h, "b", cfg)
	waitFor(b, "a leader", func() bool { return a.coord.Leading() || c.coord.Leading() })
	for b.Loop() {
		l, _ := leader(a, c)
		epoch := l.coord.Epoch()
		killLeaderSession(b, h)
		waitFor(b, "takeover", func() bool {
			return (a.coord.Leading() && a.coord.Epoch() > epoch) || (c.coord.Leading() && c.coord.Epoch() > epoch)
		})
	}
}

// BenchmarkPlanConverged: the pure planner's cost for one converged
// workspace; a converged pass must not allocate per workspace.
func BenchmarkPlanConverged(b *testing.B) {
	w := stored(workspace.PhaseRunning, workspace.DesiredRunning, runningObs)
	now := time.Now()
	b.ReportAllocs()
	for b.Loop() {
		Plan(w, runningObs, ArchiveCheck{}, now, testCfg)
	}
}
