package controller

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/codehub-io/codehub/store"
	"github.com/codehub-io/codehub/workspace"
)

// probe is a leader loop that records whether it runs.
type probe struct {
	running atomic.Int32
	starts  atomic.Int32
}

func (p *probe) Run(ctx context.Context) error {
	p.starts.Add(1)
	p.running.Add(1)
	defer p.running.Add(-1)
	<-ctx.Done()
	return nil
}

type replica struct {
	coord  *Coordinator
	ctrl   *WorkspaceController
	probe  *probe
	cancel context.CancelFunc
	done   chan struct{}
}

func startReplica(h *harness, holder string, cfg CoordinatorConfig, loops ...Loop) *replica {
	return startReplicaOf(h, h.controller(), holder, cfg, loops...)
}

// startReplicaOf starts a replica whose leader runs ctrl.
func startReplicaOf(h *harness, ctrl *WorkspaceController, holder string, cfg CoordinatorConfig, loops ...Loop) *replica {
	ctx, cancel := context.WithCancel(context.Background())
	r := &replica{ctrl: ctrl, probe: &probe{}, cancel: cancel, done: make(chan struct{})}
	cfg.DatabaseURL, cfg.Holder = h.url, holder
	r.coord = NewCoordinator(hclog.NewNullLogger(), cfg, r.ctrl, append(loops, r.probe)...)
	go func() {
		defer close(r.done)
		if err := r.coord.Run(ctx); err != nil {
			h.t.Errorf("coordinator %s: %v", holder, err)
		}
	}()
	h.t.Cleanup(r.stop)
	return r
}

func (r *replica) stop() {
	r.cancel()
	<-r.done
}

func testCoordinatorConfig() CoordinatorConfig {
	cfg := DefaultCoordinatorConfig("", "")
	// Only a wake (NOTIFY) or an active pass makes the controller tick again.
	cfg.IdleInterval = time.Hour
	cfg.ActiveInterval = 20 * time.Millisecond
	cfg.RetryInterval = 50 * time.Millisecond
	return cfg
}

// waitFor polls cond; the deadline only guards against a hang.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// leaderPID is the backend pid of the session holding the leader lock.
func leaderPID(t testing.TB, h *harness) int {
	t.Helper()
	var pid int
	err := h.pool.QueryRow(context.Background(), `SELECT pid FROM pg_locks
		WHERE locktype = 'advisory' AND granted AND objsubid = 1
		  AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
		  AND classid = ($1::bigint >> 32)::oid AND objid = ($1::bigint & 4294967295)::oid`, store.LeaderLockKey).Scan(&pid)
	if err != nil {
		t.Fatalf("find leader session: %v", err)
	}
	return pid
}

// killLeaderSession ends the leader's database session as a crash or a
// network cut would: the server drops it and with it the lock.
func killLeaderSession(t testing.TB, h *harness) {
	t.Helper()
	if _, err := h.pool.Exec(context.Background(), `SELECT pg_terminate_backend($1)`, leaderPID(t, h)); err != nil {
		t.Fatal(err)
	}
}

func leader(a, b *replica) (l, f *replica) {
	if a.coord.Leading() {
		return a, b
	}
	return b, a
}

func TestLeaderFailover(t *testing.T) {
	h := newHarness(t)
	h.setClockReal()
	a := startReplica(h, "a", testCoordinatorConfig())
	b := startReplica(h, "b", testCoordinatorConfig())
	waitFor(t, "a leader", func() bool { return a.coord.Leading() || b.coord.Leading() })
	l, f := leader(a, b)
	waitFor(t, "leader loops", func() bool { return l.probe.running.Load() == 1 })
	if f.coord.Leading() || f.probe.starts.Load() != 0 {
		t.Fatalf("follower runs leader loops")
	}

	// A new workspace is NOTIFYed: the leader's controller wakes although
	// its idle interval is an hour, and drives it to RUNNING.
	w := h.create("dev")
	// Phase RUNNING comes with the container; STARTING ends only when the
	// upstream is ready, and until then a desired change is refused.
	waitFor(t, "workspace running", func() bool {
		r := h.row(w.ID)
		return r.Phase == workspace.PhaseRunning && r.Operation == workspace.OpNone
	})

	// Kill the leader's session until the other replica wins the next
	// election (the killed one campaigns again at once and may win).
	oldEpoch := l.coord.Epoch()
	for !f.coord.Leading() {
		killLeaderSession(t, h)
		waitFor(t, "a new term", func() bool {
			return (a.coord.Leading() && a.coord.Epoch() > oldEpoch) || (b.coord.Leading() && b.coord.Epoch() > oldEpoch)
		})
		waitFor(t, "one leader", func() bool { return a.coord.Leading() != b.coord.Leading() })
		if l.coord.Leading() {
			oldEpoch = l.coord.Epoch()
		}
	}
	waitFor(t, "old leader's loops to stop", func() bool { return l.probe.running.Load() == 0 })

	// The deposed leader's controller cannot commit anything.
	// Either its claim is fenced (ErrDeposed), or the new leader, woken by
	// the same change, claimed the operation first (a later version) and
	// the deposed pass found nothing to do. The fence itself is pinned
	// down deterministically by TestEpochFence.
	before := h.row(w.ID)
	h.setDesired(w.ID, workspace.DesiredStandby)
	_, err := l.ctrl.Tick(context.Background(), oldEpoch)
	if after := h.row(w.ID); !errors.Is(err, ErrDeposed) && after.Version <= before.Version+1 {
		t.Fatalf("deposed tick: %v (version %d -> %d)", err, before.Version, after.Version)
	}
	waitFor(t, "new leader stops the workspace", func() bool {
		r := h.row(w.ID)
		return r.Phase == workspace.PhaseStandby && r.Operation == workspace.OpNone
	})

	// The old replica campaigns again but follows; a graceful stop of the
	// new leader hands over to it.
	if l.coord.Leading() {
		t.Fatalf("both replicas lead")
	}
	f.stop()
	waitFor(t, "handover after shutdown", func() bool { return l.coord.Leading() })
	if f.probe.running.Load() != 0 {
		t.Fatalf("stopped replica's loops still run")
	}
}

// TestEpochFence: a write under the current epoch holds the epoch row in
// share mode until it commits, so the next leader's bump waits for it; once
// the bump commits, every write of the old epoch matches nothing.
func TestEpochFence(t *testing.T) {
	h := newHarness(t)
	w := h.create("dev")
	ctx := context.Background()
	state := func(phase string) store.ControllerState {
		return store.ControllerState{Conditions: []byte("{}"), Phase: phase, Operation: "NONE"}
	}
	tx, err := h.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	v, err := store.WriteControllerState(ctx, tx, w.ID, w.Version, h.epoch, state("PENDING"))
	if err != nil {
		t.Fatal(err)
	}
	bumped := make(chan int64)
	go func() {
		e, err := store.BumpEpoch(ctx, h.pool, "next")
		if err != nil {
			t.Error(err)
		}
		bumped <- e
	}()
	waitFor(t, "the bump to wait on the in-flight write", func() bool {
		var waiting bool
		err := h.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_stat_activity
			WHERE wait_event_type = 'Lock' AND query LIKE 'UPDATE coordinator_epoch%')`).Scan(&waiting)
		return err == nil && waiting
	})
	select {
	case <-bumped:
		t.Fatal("epoch bumped while a write of the old epoch was in flight")
	default:
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	newEpoch := <-bumped
	if _, err := store.WriteControllerState(ctx, h.pool, w.ID, v, h.epoch, state("ERROR")); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("old-epoch write after the bump: %v", err)
	}
	if _, err := store.WriteControllerState(ctx, h.pool, w.ID, v, newEpoch, state("PENDING")); err != nil {
		t.Fatalf("new-epoch write: %v", err)
	}
}

func TestFailingLoopEndsTerm(t *testing.T) {
	h := newHarness(t)
	h.setClockReal()
	var fails atomic.Int32
	failing := LoopFunc(func(ctx context.Context) error {
		if fails.Add(1) == 1 {
			return errors.New("redis unreachable")
		}
		<-ctx.Done()
		return nil
	})
	r := startReplica(h, "a", testCoordinatorConfig(), failing)
	waitFor(t, "second term", func() bool { return r.probe.starts.Load() >= 2 && r.coord.Leading() })
	if r.coord.Epoch() < h.epoch+2 {
		t.Fatalf("epoch %d: a failed loop must end the term and a new one begin", r.coord.Epoch())
	}
}

const envHelperDB = "CODEHUB_TEST_COORDINATOR_HELPER_DB"

func TestMain(m *testing.M) {
	if url := os.Getenv(envHelperDB); url != "" {
		runCoordinatorHelper(url)
		return
	}
	os.Exit(m.Run())
}

// blindBackend cannot observe anything: a leader using it holds the lock
// but never changes a workspace.
type blindBackend struct{ staticBackend }

func (*blindBackend) Observe(context.Context) (Snapshot, error) {
	return Snapshot{}, errors.New("this replica has no backend")
}

// runCoordinatorHelper is a second coordinator process, killed by the test.
func runCoordinatorHelper(url string) {
	ctx := context.Background()
	pool, err := store.Open(ctx, url)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	ctrl := NewWorkspaceController(hclog.NewNullLogger(), pool, &blindBackend{}, newFakeArchives(), DefaultConfig())
	cfg := testCoordinatorConfig()
	cfg.DatabaseURL, cfg.Holder = url, "helper"
	_ = NewCoordinator(hclog.NewNullLogger(), cfg, ctrl).Run(ctx)
}

// TestLeaderProcessKilled: the leader is another process, killed with
// SIGKILL; the surviving replica takes over and reconciles.
func TestLeaderProcessKilled(t *testing.T) {
	h := newHarness(t)
	h.setClockReal()
	helper := exec.Command(os.Args[0], "-test.run=^$")
	helper.Env = append(os.Environ(), envHelperDB+"="+h.url)
	helper.Stderr = os.Stderr
	if err := helper.Start(); err != nil {
		t.Fatal(err)
	}
	defer helper.Process.Kill()
	holder := func() string {
		var s string
		_ = h.pool.QueryRow(context.Background(), `SELECT holder FROM coordinator_epoch`).Scan(&s)
		return s
	}
	waitFor(t, "the helper process to lead", func() bool { return holder() == "helper" })
	r := startReplica(h, "survivor", testCoordinatorConfig())
	w := h.create("dev")
	if r.coord.Leading() || h.row(w.ID).Operation != workspace.OpNone {
		t.Fatalf("follower acted while the helper led")
	}
	if err := helper.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = helper.Wait()
	waitFor(t, "takeover after kill -9", r.coord.Leading)
	if holder() != "survivor" {
		t.Fatalf("epoch holder %q", holder())
	}
	waitFor(t, "survivor reconciles", func() bool { return h.row(w.ID).Phase == workspace.PhaseRunning })
}

// TestLeaderSessionKeepalive: the server's end of the leader session uses
// the short keepalive and user timeout, so it frees the lock of a vanished
// leader within seconds.
func TestLeaderSessionKeepalive(t *testing.T) {
	h := newHarness(t)
	cfg := DefaultCoordinatorConfig(h.url, "probe")
	conn, err := NewCoordinator(hclog.NewNullLogger(), cfg, h.controller()).connect(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	for name, want := range map[string]string{"tcp_keepalives_idle": "2", "tcp_keepalives_interval": "2",
		"tcp_keepalives_count": "3", "tcp_user_timeout": "5000"} {
		var got string
		if err := conn.QueryRow(context.Background(), "SHOW "+name).Scan(&got); err != nil {
			t.Fatal(err)
		}
		if got != want {
			t.Errorf("%s = %s, want %s", name, got, want)
		}
	}
}

func TestNextPass(t *testing.T) {
	now := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	cfg := CoordinatorConfig{IdleInterval: 15 * time.Second, ActiveInterval: time.Second}
	cases := []struct {
		name  string
		stats TickStats
		want  time.Duration
	}{
		{"idle", TickStats{}, 15 * time.Second},
		{"in flight", TickStats{InFlight: 1}, time.Second},
		{"retry before the idle interval", TickStats{NextAttempt: now.Add(5 * time.Second)}, 5 * time.Second},
		{"retry after the idle interval", TickStats{NextAttempt: now.Add(time.Minute)}, 15 * time.Second},
		{"retry after the active interval", TickStats{Writes: 1, NextAttempt: now.Add(5 * time.Second)}, time.Second},
		{"retry already due", TickStats{NextAttempt: now.Add(-time.Second)}, 0},
		{"stopped on an old observation", TickStats{Stale: true}, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := nextPass(tc.stats, cfg, now); got != tc.want {
				t.Errorf("nextPass = %s, want %s", got, tc.want)
			}
		})
	}
}

// TestLeaderReadsNotifiedRows: after its term's first, full pass the
// leader reads only the rows its session's notifications name, and those
// carry every change. With no full pass for an hour, a new workspace and
// its desired states still reach the controller.
func TestLeaderReadsNotifiedRows(t *testing.T) {
	h := newHarness(t)
	h.setClockReal()
	cfg := DefaultConfig()
	cfg.FullPassInterval = time.Hour
	l := startReplicaOf(h, h.controllerWith(cfg), "a", testCoordinatorConfig())
	waitFor(t, "leader loops", func() bool { return l.probe.running.Load() == 1 })
	settled := func(id string, phase workspace.Phase) func() bool {
		return func() bool {
			r := h.row(id)
			return r.Phase == phase && r.Operation == workspace.OpNone
		}
	}
	w := h.create("dev")
	waitFor(t, "new workspace running", settled(w.ID, workspace.PhaseRunning))
	h.setDesired(w.ID, workspace.DesiredStandby)
	waitFor(t, "workspace in standby", settled(w.ID, workspace.PhaseStandby))
	other := h.create("other")
	waitFor(t, "second workspace running", settled(other.ID, workspace.PhaseRunning))
	h.setDesired(w.ID, workspace.DesiredRunning)
	waitFor(t, "first workspace running again", settled(w.ID, workspace.PhaseRunning))
	// A deletion is announced only as such: it wakes the leader too. The
	// wait lets the passes go idle first (an hour apart), so only a wake
	// brings the next one.
	time.Sleep(time.Second)
	if err := h.svc.Delete(context.Background(), other.ID); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "deleted workspace gone", func() bool { return h.row(other.ID).Phase == workspace.PhaseDeleted })
}
