package controller

import (
	"context"
	"errors"
	"math"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/codehub-io/codehub/archive"
	"github.com/codehub-io/codehub/workspace"
)

func newTestMetrics(t *testing.T) (*Metrics, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	m, err := NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	return m, reg
}

// histogram returns the sample count and sum of the histogram named name
// with the given labels.
func histogram(t *testing.T, reg *prometheus.Registry, name string, labels map[string]string) (uint64, float64) {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
	metrics:
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if labels[l.GetName()] != l.GetValue() {
					continue metrics
				}
			}
			return m.GetHistogram().GetSampleCount(), m.GetHistogram().GetSampleSum()
		}
	}
	t.Fatalf("no histogram %s %v", name, labels)
	return 0, 0
}

func TestNewMetricsRefusesSecondRegistration(t *testing.T) {
	m, reg := newTestMetrics(t)
	if m == nil {
		t.Fatal("no metrics")
	}
	var already prometheus.AlreadyRegisteredError
	if _, err := NewMetrics(reg); !errors.As(err, &already) {
		t.Fatalf("second registration: %v", err)
	}
}

func TestControllerMetrics(t *testing.T) {
	h := newHarness(t)
	m, reg := newTestMetrics(t)
	c := h.controllerWithMetrics(m)
	w := h.create("dev")

	passes := 0
	for {
		stats, err := c.Tick(context.Background(), h.epoch)
		if err != nil {
			t.Fatal(err)
		}
		passes++
		if stats.Writes == 0 && stats.Steps == 0 && stats.InFlight == 0 {
			break
		}
		if passes == 60 {
			t.Fatal("no convergence after 60 passes")
		}
		h.advance(2 * time.Second)
	}
	h.expect(w.ID, workspace.PhaseRunning, "volume", "container")

	transitions := map[[2]workspace.Phase]float64{
		{workspace.PhasePending, workspace.PhaseStandby}: 1,
		{workspace.PhaseStandby, workspace.PhaseRunning}: 1,
	}
	if n := testutil.CollectAndCount(m.transitions); n != len(transitions) {
		t.Errorf("%d transition series, want %d", n, len(transitions))
	}
	for tr, want := range transitions {
		if got := testutil.ToFloat64(m.transitions.WithLabelValues(string(tr[0]), string(tr[1]))); got != want {
			t.Errorf("transitions %s -> %s = %v, want %v", tr[0], tr[1], got, want)
		}
	}

	ops := []workspace.Operation{workspace.OpProvisioning, workspace.OpStarting}
	if n := operationsCounted(m); n != float64(2*len(ops)) {
		t.Errorf("%v operations counted, want %d (started and succeeded of %v)", n, 2*len(ops), ops)
	}
	for _, op := range ops {
		for _, result := range []string{resultStarted, resultSucceeded} {
			if got := testutil.ToFloat64(m.operations.WithLabelValues(string(op), result)); got != 1 {
				t.Errorf("operations %s %s = %v, want 1", op, result, got)
			}
		}
		// Durations run on the controller's clock, which moves 2 s between
		// passes: a whole positive number of steps (op_started_at is stored
		// to the microsecond), never wall time.
		count, sum := histogram(t, reg, "codehub_operation_duration_seconds", map[string]string{"operation": string(op)})
		if steps := math.Round(sum / 2); count != 1 || steps < 1 || math.Abs(sum-2*steps) > 1e-3 {
			t.Errorf("%s duration: %d samples, sum %v s", op, count, sum)
		}
	}

	if got, _ := histogram(t, reg, "codehub_controller_pass_duration_seconds", nil); got != uint64(passes) {
		t.Errorf("%d passes observed, want %d", got, passes)
	}
	if got, _ := histogram(t, reg, "codehub_controller_observe_duration_seconds", nil); got != uint64(passes) {
		t.Errorf("%d observations timed, want %d", got, passes)
	}
	// A failed pass is not observed.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := c.Tick(ctx, h.epoch); err == nil {
		t.Fatal("pass under a cancelled context succeeded")
	}
	if got, _ := histogram(t, reg, "codehub_controller_pass_duration_seconds", nil); got != uint64(passes) {
		t.Errorf("%d passes observed after a failed pass, want %d", got, passes)
	}
}

func TestControllerMetricsTimeout(t *testing.T) {
	h := newHarness(t)
	m, _ := newTestMetrics(t)
	h.archiveTimesOut(h.controllerWithMetrics(m))
	archiving := string(workspace.OpArchiving)
	for result, want := range map[string]float64{resultStarted: 1, resultTimeout: 1, resultFailed: 0, resultSucceeded: 0} {
		if got := testutil.ToFloat64(m.operations.WithLabelValues(archiving, result)); got != want {
			t.Errorf("operations %s %s = %v, want %v", archiving, result, got, want)
		}
	}
	if got := testutil.ToFloat64(m.transitions.WithLabelValues(string(workspace.PhaseStandby), string(workspace.PhaseError))); got != 1 {
		t.Errorf("transitions STANDBY -> ERROR = %v, want 1", got)
	}
}

func TestMetricsCommitted(t *testing.T) {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	now := start.Add(90 * time.Second)
	running := workspace.Workspace{Phase: workspace.PhaseStandby, Operation: workspace.OpStarting, OpStartedAt: &start}
	ended := func(phase workspace.Phase, reason *string) workspace.Workspace {
		return workspace.Workspace{Phase: phase, Operation: workspace.OpNone, ErrorReason: reason}
	}
	cases := []struct {
		name       string
		prev, next workspace.Workspace
		transition bool
		result     string
	}{
		{"succeeded", running, ended(workspace.PhaseRunning, nil), true, resultSucceeded},
		{"failed, retry later", running, ended(workspace.PhaseStandby, ptr(workspace.ReasonStartFailed)), false, resultFailed},
		{"timed out", running, ended(workspace.PhaseError, ptr(workspace.ReasonTimeout)), true, resultTimeout},
		{"conditions only", running, running, false, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			m, reg := newTestMetrics(t)
			m.committed(tc.prev, tc.next, now)
			wantTransitions := 0
			if tc.transition {
				wantTransitions = 1
			}
			if n := testutil.CollectAndCount(m.transitions); n != wantTransitions {
				t.Errorf("%d transition series, want %d", n, wantTransitions)
			}
			if tc.result == "" {
				if n := operationsCounted(m); n != 0 {
					t.Errorf("%v operations counted for an unchanged operation", n)
				}
				if count, _ := histogram(t, reg, "codehub_operation_duration_seconds", map[string]string{"operation": string(workspace.OpStarting)}); count != 0 {
					t.Errorf("%d durations observed for an unchanged operation", count)
				}
				return
			}
			if got := testutil.ToFloat64(m.operations.WithLabelValues(string(workspace.OpStarting), tc.result)); got != 1 {
				t.Errorf("operations STARTING %s = %v, want 1", tc.result, got)
			}
			count, sum := histogram(t, reg, "codehub_operation_duration_seconds", map[string]string{"operation": string(workspace.OpStarting)})
			if count != 1 || sum != 90 {
				t.Errorf("duration: %d samples, sum %v, want one of 90 s", count, sum)
			}
		})
	}
}

// TestNilMetricsRecordNothing: a controller built without metrics must not
// panic on any event.
func TestNilMetricsRecordNothing(t *testing.T) {
	var m *Metrics
	m.committed(workspace.Workspace{Operation: workspace.OpNone}, workspace.Workspace{Phase: workspace.PhaseRunning, Operation: workspace.OpStarting}, time.Now())
	m.pass(time.Second)
	m.ttlExpired(workspace.DesiredStandby)
	m.gcDeletedArchive()
}

func TestTTLMetrics(t *testing.T) {
	h := newHarness(t)
	m, _ := newTestMetrics(t)
	ctx := context.Background()
	r := NewTTLRunner(hclog.NewNullLogger(), h.svc, newRedis(t), TTLConfig{
		Interval: time.Minute, StandbyTTL: 10 * time.Minute, ArchiveTTL: 30 * time.Minute, Metrics: m,
	})
	idle, busy, standby, fresh := h.create("idle"), h.create("busy"), h.create("standby"), h.create("fresh")
	h.exec(`UPDATE workspaces SET phase = 'RUNNING', last_access_at = now() - interval '1 hour'`)
	// Running for an hour: the phase change above stamped now.
	h.exec(`UPDATE workspaces SET phase_changed_at = now() - interval '1 hour'`)
	h.exec(`UPDATE workspaces SET operation = 'STOPPING' WHERE id = $1`, busy.ID)
	h.exec(`UPDATE workspaces SET phase = 'STANDBY', desired_state = 'STANDBY' WHERE id = $1`, standby.ID)
	h.exec(`UPDATE workspaces SET phase_changed_at = now() - interval '1 hour' WHERE id = $1`, standby.ID)
	h.exec(`UPDATE workspaces SET last_access_at = now() WHERE id = $1`, fresh.ID)

	for range 2 {
		// The second pass finds the desired states already lowered.
		if _, err := r.RunOnce(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if got := h.row(idle.ID).DesiredState; got != workspace.DesiredStandby {
		t.Fatalf("idle workspace desired %s", got)
	}
	for kind, want := range map[string]float64{expiryStandby: 1, expiryArchive: 1} {
		if got := testutil.ToFloat64(m.ttlExpiries.WithLabelValues(kind)); got != want {
			t.Errorf("ttl expiries %s = %v, want %v", kind, got, want)
		}
	}
	if n := testutil.CollectAndCount(m.ttlExpiries); n != 2 {
		t.Errorf("%d ttl expiry series, want 2", n)
	}
}

func TestGCMetrics(t *testing.T) {
	h := newHarness(t)
	m, _ := newTestMetrics(t)
	w := h.create("live")
	for range 5 {
		h.backend.store.put(archive.Key(w.ID, workspace.NewID()), "x")
	}
	cfg := GCConfig{KeepArchives: 3, DeletedGrace: 2 * time.Hour, DryRun: true, Metrics: m}
	if _, err := NewGCRunner(hclog.NewNullLogger(), h.svc, h.backend.store, cfg).RunOnce(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := testutil.ToFloat64(m.gcDeleted); got != 0 {
		t.Fatalf("dry run counted %v deletions", got)
	}
	cfg.DryRun = false
	deleted, err := NewGCRunner(hclog.NewNullLogger(), h.svc, h.backend.store, cfg).RunOnce(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if got := testutil.ToFloat64(m.gcDeleted); len(deleted) != 2 || got != 2 {
		t.Fatalf("deleted %v, counted %v", deleted, got)
	}
}

// The gauges of a pass say what the leader's last pass saw, by the phase
// the API shows; a replica that stops leading reports zero.
func TestMetricsPassGauges(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	m.leading(true)
	started := t0.Add(-90 * time.Second)
	stopping := workspace.Workspace{Phase: workspace.PhaseRunning, Operation: workspace.OpStopping, OpStartedAt: &started}
	running := workspace.Workspace{Phase: workspace.PhaseRunning}
	var seen passTally
	for _, w := range []workspace.Workspace{stopping, running, running} {
		seen.add(w, t0)
	}
	m.passSeen(seen)
	if got := testutil.ToFloat64(m.workspaces.WithLabelValues(workspace.DisplayStopping)); got != 1 {
		t.Errorf("STOPPING = %v, want 1", got)
	}
	if got := testutil.ToFloat64(m.workspaces.WithLabelValues(string(workspace.PhaseRunning))); got != 2 {
		t.Errorf("RUNNING = %v, want 2", got)
	}
	if got := testutil.ToFloat64(m.opAge.WithLabelValues(string(workspace.OpStopping))); got != 90 {
		t.Errorf("oldest STOPPING = %vs, want 90", got)
	}
	if got := testutil.ToFloat64(m.leader); got != 1 {
		t.Errorf("leader = %v while leading", got)
	}
	m.leading(false)
	if got := testutil.ToFloat64(m.workspaces.WithLabelValues(string(workspace.PhaseRunning))); got != 0 {
		t.Errorf("RUNNING = %v on a follower, want 0", got)
	}
	if got, terms := testutil.ToFloat64(m.leader), testutil.ToFloat64(m.terms); got != 0 || terms != 1 {
		t.Errorf("leader = %v, terms = %v after one term", got, terms)
	}
}

// operationsCounted sums codehub_operations_total over every series, which
// all exist from the start.
func operationsCounted(m *Metrics) float64 {
	var n float64
	for _, op := range operations {
		for _, result := range []string{resultStarted, resultSucceeded, resultFailed, resultTimeout} {
			n += testutil.ToFloat64(m.operations.WithLabelValues(string(op), result))
		}
	}
	return n
}
