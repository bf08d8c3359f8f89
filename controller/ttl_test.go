package controller

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/redis/go-redis/v9"

	"github.com/codehub-io/codehub/internal/testenv"
	"github.com/codehub-io/codehub/workspace"
)

func newRedis(t *testing.T) *redis.Client {
	t.Helper()
	opts, err := redis.ParseURL(testenv.RedisURL(t))
	if err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(opts)
	t.Cleanup(func() { rdb.Close() })
	return rdb
}

func (h *harness) exec(sql string, args ...any) {
	h.t.Helper()
	if _, err := h.pool.Exec(context.Background(), sql, args...); err != nil {
		h.t.Fatalf("%s: %v", sql, err)
	}
}

func TestTTLRules(t *testing.T) {
	h := newHarness(t)
	rdb := newRedis(t)
	ctx := context.Background()
	now := time.Now()
	r := NewTTLRunner(hclog.NewNullLogger(), h.svc, rdb, TTLConfig{Interval: time.Minute, StandbyTTL: 10 * time.Minute, ArchiveTTL: 30 * time.Minute})
	r.now = func() time.Time { return now }

	ws := map[string]workspace.Workspace{}
	for _, name := range []string{"idle", "recent", "busy", "active-in-redis", "own-ttl", "kept", "kept-past", "standby-old", "standby-new", "error", "deleted", "wants-standby"} {
		ws[name] = h.create(name)
	}
	h.exec(`UPDATE workspaces SET phase = 'RUNNING', last_access_at = now() - interval '1 hour'`)
	// Running for an hour: the phase change above stamped now.
	h.exec(`UPDATE workspaces SET phase_changed_at = now() - interval '1 hour'`)
	h.exec(`UPDATE workspaces SET last_access_at = now() - interval '1 minute' WHERE name = 'recent'`)
	h.exec(`UPDATE workspaces SET operation = 'STOPPING' WHERE name = 'busy'`)
	h.exec(`UPDATE workspaces SET standby_ttl = interval '2 hours' WHERE name = 'own-ttl'`)
	h.exec(`UPDATE workspaces SET keep_until = now() + interval '1 hour' WHERE name = 'kept'`)
	h.exec(`UPDATE workspaces SET keep_until = now() - interval '1 minute' WHERE name = 'kept-past'`)
	h.exec(`UPDATE workspaces SET phase = 'STANDBY', desired_state = 'STANDBY' WHERE name LIKE 'standby-%'`)
	h.exec(`UPDATE workspaces SET phase_changed_at = now() - interval '1 hour' WHERE name = 'standby-old'`)
	h.exec(`UPDATE workspaces SET phase = 'ERROR', error_reason = 'Timeout', error_count = 1 WHERE name = 'error'`)
	h.exec(`UPDATE workspaces SET desired_state = 'STANDBY' WHERE name = 'wants-standby'`)
	if err := h.svc.Delete(ctx, ws["deleted"].ID); err != nil {
		t.Fatal(err)
	}
	if err := rdb.ZAdd(ctx, ActivityKey, redis.Z{Member: ws["active-in-redis"].ID, Score: float64(now.Add(-30 * time.Second).Unix())}).Err(); err != nil {
		t.Fatal(err)
	}

	res, err := r.RunOnce(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]workspace.DesiredState{
		"idle": workspace.DesiredStandby, "recent": workspace.DesiredRunning, "busy": workspace.DesiredRunning,
		"active-in-redis": workspace.DesiredRunning, "own-ttl": workspace.DesiredRunning,
		"kept": workspace.DesiredRunning, "kept-past": workspace.DesiredStandby,
		"standby-old": workspace.DesiredArchived, "standby-new": workspace.DesiredStandby,
		"error": workspace.DesiredRunning, "deleted": workspace.DesiredDeleted, "wants-standby": workspace.DesiredStandby,
	}
	for name, d := range want {
		if got := h.row(ws[name].ID).DesiredState; got != d {
			t.Errorf("%s: desired %s, want %s", name, got, d)
		}
	}
	// The idle stop says it was the idle stop, and ends the keep-running.
	for _, name := range []string{"idle", "kept-past", "standby-old"} {
		if w := h.row(ws[name].ID); w.DesiredBy != workspace.CauseIdle || w.DesiredAt == nil || w.KeepUntil != nil {
			t.Errorf("%s: desired by %q at %v, keep until %v; want idle, a time, none", name, w.DesiredBy, w.DesiredAt, w.KeepUntil)
		}
	}
	if w := h.row(ws["recent"].ID); w.DesiredBy != workspace.CauseUser || w.DesiredAt != nil {
		t.Errorf("untouched workspace: desired by %q at %v", w.DesiredBy, w.DesiredAt)
	}
	if len(res.Standby) != 2 || len(res.Archived) != 1 || res.Flushed != 1 {
		t.Errorf("result %+v", res)
	}
	if n, _ := rdb.ZCard(ctx, ActivityKey).Result(); n != 0 {
		t.Errorf("%d activity entries left after the flush", n)
	}
	if got := h.row(ws["active-in-redis"].ID).LastAccessAt; got.Unix() != now.Add(-30*time.Second).Unix() {
		t.Errorf("last_access_at %v not taken from redis", got)
	}
}

// TestActivityFlushKeepsNewerScore: an access recorded between reading the
// set and acknowledging it survives for the next pass.
func TestActivityFlushKeepsNewerScore(t *testing.T) {
	h := newHarness(t)
	rdb := newRedis(t)
	ctx := context.Background()
	r := NewTTLRunner(hclog.NewNullLogger(), h.svc, rdb, TTLConfig{})
	a, b := h.create("a"), h.create("b")
	h.exec(`UPDATE workspaces SET last_access_at = now() - interval '1 day'`)
	old := float64(time.Now().Add(-time.Minute).Unix())
	rdb.ZAdd(ctx, ActivityKey, redis.Z{Member: a.ID, Score: old}, redis.Z{Member: b.ID, Score: old})
	entries, err := rdb.ZRangeWithScores(ctx, ActivityKey, 0, -1).Result()
	if err != nil {
		t.Fatal(err)
	}
	newer := old + 30
	rdb.ZAddGT(ctx, ActivityKey, redis.Z{Member: a.ID, Score: newer})
	if err := r.ack(ctx, entries); err != nil {
		t.Fatal(err)
	}
	left, err := rdb.ZRangeWithScores(ctx, ActivityKey, 0, -1).Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(left) != 1 || left[0].Member != a.ID || left[0].Score != newer {
		t.Fatalf("left %v, want only %s at %v", left, a.ID, newer)
	}
	if _, err := r.flush(ctx); err != nil {
		t.Fatal(err)
	}
	if got := h.row(a.ID).LastAccessAt.Unix(); got != int64(newer) {
		t.Fatalf("last_access_at %d, want the newer %d", got, int64(newer))
	}
}

func TestTTLSkipsWorkspaceWokenMeanwhile(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	w := h.create("dev")
	h.exec(`UPDATE workspaces SET phase = 'RUNNING', last_access_at = now() - interval '1 hour'`)
	h.exec(`UPDATE workspaces SET phase_changed_at = now() - interval '1 hour'`)
	idle, err := h.svc.Idle(ctx, time.Now(), 10*time.Minute, time.Hour)
	if err != nil || len(idle) != 1 {
		t.Fatalf("idle = %d, %v", len(idle), err)
	}
	// A proxy wake (or any change) lands between the read and the write.
	h.exec(`UPDATE workspaces SET last_access_at = now() WHERE id = $1`, w.ID)
	if _, err := h.svc.SetDesiredIfUnchanged(ctx, w.ID, idle[0].Version, workspace.DesiredStandby, workspace.CauseUser); err == nil {
		t.Fatalf("TTL stopped a workspace touched after it was judged idle")
	}
	if got := h.row(w.ID).DesiredState; got != workspace.DesiredRunning {
		t.Fatalf("desired %s", got)
	}
}

// TestTTLCountsFromRunning: a wake sets last_access_at, but getting an
// archived workspace running (restore, then start) can take longer than
// standby_ttl. The TTL must count from when it became RUNNING, or it stops
// the workspace the user is waiting for the moment it is ready.
func TestTTLCountsFromRunning(t *testing.T) {
	h := newHarness(t)
	c := h.controller()
	ctx := context.Background()
	w := h.create("dev")
	h.converge(c)
	h.archiveThenRestore(c, w.ID)
	h.expect(w.ID, workspace.PhaseRunning, "volume", "container")
	// The wake was 15 minutes ago: that is how long the restore took.
	h.exec(`UPDATE workspaces SET last_access_at = now() - interval '15 minutes' WHERE id = $1`, w.ID)

	now := time.Now()
	r := NewTTLRunner(hclog.NewNullLogger(), h.svc, newRedis(t), TTLConfig{StandbyTTL: 10 * time.Minute, ArchiveTTL: time.Hour})
	r.now = func() time.Time { return now }
	if _, err := r.RunOnce(ctx); err != nil {
		t.Fatal(err)
	}
	if got := h.row(w.ID).DesiredState; got != workspace.DesiredRunning {
		t.Fatalf("a workspace running for moments was judged idle: desired %s", got)
	}
	// Unused for standby_ttl since it became RUNNING, it does stop.
	now = now.Add(11 * time.Minute)
	res, err := r.RunOnce(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := h.row(w.ID).DesiredState; got != workspace.DesiredStandby || len(res.Standby) != 1 {
		t.Fatalf("desired %s after standby_ttl of running unused (result %+v)", got, res)
	}
}

// TestTTLAutostart: the runner wakes a workspace for its owner's schedule
// once per start, restores an archived one ahead of time, keeps it from
// the idle stop until the start, and waits while an operation runs.
func TestTTLAutostart(t *testing.T) {
	h := newHarness(t)
	rdb := newRedis(t)
	ctx := context.Background()
	now := time.Now().UTC()
	svc := workspace.NewService(hclog.NewNullLogger(), h.pool, workspace.Options{DefaultImage: "img:1", Policy: workspace.Policy{
		StandbyTTL: 10 * time.Minute, ArchiveTTL: 30 * time.Minute, AutostartLead: 15 * time.Minute}})
	r := NewTTLRunner(hclog.NewNullLogger(), svc, rdb, TTLConfig{Interval: time.Minute, StandbyTTL: 10 * time.Minute, ArchiveTTL: 30 * time.Minute})
	r.now = func() time.Time { return now }
	// Every day, ten minutes from now (to the minute): inside an archived
	// workspace's lead, outside the others'.
	start := now.Add(10 * time.Minute).Truncate(time.Minute)
	sched, err := workspace.ParseSchedule([]string{"sun", "mon", "tue", "wed", "thu", "fri", "sat"}, start.Format("15:04"), "UTC")
	if err != nil {
		t.Fatal(err)
	}
	ws := map[string]workspace.Workspace{}
	for _, name := range []string{"archived", "standby", "running", "busy"} {
		ws[name] = h.create(name)
		if _, err := h.svc.SetAutostart(ctx, ws[name].ID, &sched); err != nil {
			t.Fatal(err)
		}
	}
	h.exec(`UPDATE workspaces SET phase = 'ARCHIVED', desired_state = 'ARCHIVED' WHERE name = 'archived'`)
	h.exec(`UPDATE workspaces SET phase = 'STANDBY', desired_state = 'STANDBY' WHERE name IN ('standby', 'busy')`)
	h.exec(`UPDATE workspaces SET operation = 'ARCHIVING' WHERE name = 'busy'`)
	h.exec(`UPDATE workspaces SET phase = 'RUNNING' WHERE name = 'running'`)

	pass := func(wantStarted ...string) {
		t.Helper()
		res, err := r.RunOnce(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, id := range res.Started {
			for name, w := range ws {
				if w.ID == id {
					names = append(names, name)
				}
			}
		}
		slices.Sort(names)
		if !slices.Equal(names, wantStarted) {
			t.Fatalf("started %v, want %v", names, wantStarted)
		}
	}
	started := func(name string) {
		t.Helper()
		w := h.row(ws[name].ID)
		if w.DesiredState != workspace.DesiredRunning || w.AutostartDone == nil || !w.AutostartDone.Equal(start) ||
			w.KeepUntil == nil || !w.KeepUntil.Equal(start.Add(10*time.Minute)) {
			t.Fatalf("%s: desired %s by %s, done %v, keep until %v", name, w.DesiredState, w.DesiredBy, w.AutostartDone, w.KeepUntil)
		}
	}

	pass("archived")
	started("archived")
	if w := h.row(ws["archived"].ID); w.DesiredBy != workspace.CauseSchedule {
		t.Fatalf("archived: desired by %q, want schedule", w.DesiredBy)
	}
	if w := h.row(ws["standby"].ID); w.DesiredState != workspace.DesiredStandby {
		t.Fatalf("standby woken %s ahead", start.Sub(now))
	}
	pass()

	// At the start: the others too, except the one with an operation in
	// flight, which waits; the running one is kept running to the start.
	now = start
	pass("running", "standby")
	started("standby")
	started("running")
	if w := h.row(ws["running"].ID); w.DesiredBy != workspace.CauseUser {
		t.Fatalf("running: desired by %q, want it unchanged", w.DesiredBy)
	}
	h.exec(`UPDATE workspaces SET operation = 'NONE' WHERE name = 'busy'`)
	now = start.Add(5 * time.Minute)
	pass("busy")
	started("busy")
	pass()
}
