package events

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/codehub-io/codehub/internal/testenv"
	"github.com/codehub-io/codehub/store"
)

func TestParseNotice(t *testing.T) {
	n, err := ParseNotice(`{"id":"w1","owner_id":"u1","version":7,"kind":"desired"}`)
	if err != nil || n != (Notice{ID: "w1", OwnerID: "u1", Version: 7, Kind: KindDesired}) {
		t.Fatalf("ParseNotice = %+v, %v", n, err)
	}
	for _, bad := range []string{``, `{`, `{"id":"w1"}`, `{"owner_id":"u1"}`, `[]`} {
		if _, err := ParseNotice(bad); err == nil {
			t.Errorf("ParseNotice(%q) accepted", bad)
		}
	}
}

// The listener republishes what PostgreSQL notifies on the owner's channel
// and wakes the controller for desired-state changes, and keeps doing so
// after its connection is killed.
func TestListenerRelaysAndReconnects(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	dbURL := testenv.PostgresURL(t)
	rdb, sub := subscribeOwner(ctx, t, "u1")
	var wakes atomic.Int32
	l := NewListener(hclog.NewNullLogger(), dbURL, rdb, func() { wakes.Add(1) })
	runCtx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		_ = l.Run(runCtx)
	}()
	defer func() { stop(); wg.Wait() }()

	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	// notifyUntilHeard repeats a notification until it comes out of Redis:
	// the listener may not be listening yet (or again).
	notifyUntilHeard := func(payload string) {
		t.Helper()
		ch := sub.Channel()
		for {
			if _, err := conn.Exec(ctx, `SELECT pg_notify($1, $2)`, PGChannel, payload); err != nil {
				t.Fatal(err)
			}
			select {
			case m := <-ch:
				// Repeats of an earlier notification may still be queued.
				if m.Payload == payload {
					return
				}
			case <-time.After(100 * time.Millisecond):
			case <-ctx.Done():
				t.Fatal("notification never relayed")
			}
		}
	}
	notifyUntilHeard(`{"id":"w1","owner_id":"u1","version":2,"kind":"desired"}`)
	if wakes.Load() == 0 {
		t.Fatal("desired notice did not wake the controller")
	}
	if _, err := conn.Exec(ctx, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity
		WHERE datname = current_database() AND query = 'LISTEN `+PGChannel+`'`); err != nil {
		t.Fatal(err)
	}
	notifyUntilHeard(`{"id":"w1","owner_id":"u1","version":3,"kind":"updated"}`)
}

// A deletion is a desired-state change too: without a wake, the deleted
// workspace's program would run until the controller's next idle pass.
func TestRelayWakesForDesiredChanges(t *testing.T) {
	opts, err := redis.ParseURL(testenv.RedisURL(t))
	if err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(opts)
	defer rdb.Close()
	for kind, want := range map[string]int32{KindDesired: 1, KindDeleted: 1, KindUpdated: 0} {
		var wakes atomic.Int32
		l := NewListener(hclog.NewNullLogger(), "", rdb, func() { wakes.Add(1) })
		l.relay(t.Context(), `{"id":"w1","owner_id":"u1","version":2,"kind":"`+kind+`"}`)
		if got := wakes.Load(); got != want {
			t.Errorf("%s notice: %d wakes, want %d", kind, got, want)
		}
	}
}

// Changes made while no listener listens (between one leader and the next,
// or while a listener reconnects) reach the SSE clients that stayed
// connected: a new listener republishes recent changes before relaying.
func TestNewListenerRepublishesChangesMissedMeanwhile(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	dbURL := testenv.PostgresURL(t)
	pool, err := pgxpool.New(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	if err := store.Migrate(ctx, pool, hclog.NewNullLogger()); err != nil {
		t.Fatal(err)
	}
	const ws = "01jb3x7k9q2m5n8p4r6s0t1v2w"
	if _, err := pool.Exec(ctx, `INSERT INTO users (id, username, password_hash) VALUES ('u1', 'ann', 'x')`); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `INSERT INTO workspaces (id, owner_id, name, image) VALUES ($1, 'u1', 'w', 'img')`, ws); err != nil {
		t.Fatal(err)
	}
	rdb, sub := subscribeOwner(ctx, t, "u1")
	var wakes atomic.Int32
	runListener := func() (stop func()) {
		l := NewListener(hclog.NewNullLogger(), dbURL, rdb, func() { wakes.Add(1) })
		runCtx, cancel := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() {
			defer close(done)
			_ = l.Run(runCtx)
		}()
		return func() { cancel(); <-done }
	}
	// heard waits for a notice of the workspace at version at least v.
	heard := func(v int64) bool {
		timeout := time.After(5 * time.Second)
		for {
			select {
			case m := <-sub.Channel():
				if n, err := ParseNotice(m.Payload); err == nil && n.ID == ws && n.Version >= v {
					return true
				}
			case <-timeout:
				return false
			}
		}
	}

	stop := runListener()
	// Until it listens, the first listener may miss an update.
	var version int64
	for range 10 {
		if err := pool.QueryRow(ctx, `UPDATE workspaces SET description = description || '.'
			WHERE id = $1 RETURNING version`, ws).Scan(&version); err != nil {
			t.Fatal(err)
		}
		if heard(version) {
			break
		}
	}
	stop()
	// The old leader is gone, the next one not yet listening.
	if err := pool.QueryRow(ctx, `UPDATE workspaces SET desired_state = 'STANDBY'
		WHERE id = $1 RETURNING version`, ws).Scan(&version); err != nil {
		t.Fatal(err)
	}
	wakes.Store(0)
	stop = runListener()
	defer stop()
	if !heard(version) {
		t.Fatalf("the change to version %d made between two listeners never reached Redis", version)
	}
	if wakes.Load() == 0 {
		t.Fatal("a desired-state change made between two listeners did not wake the controller")
	}
}

// subscribeOwner returns a Redis client of the test's database and a
// subscription, already confirmed, to the channel of owner.
func subscribeOwner(ctx context.Context, t *testing.T, owner string) (*redis.Client, *redis.PubSub) {
	t.Helper()
	opts, err := redis.ParseURL(testenv.RedisURL(t))
	if err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(opts)
	t.Cleanup(func() { rdb.Close() })
	sub := rdb.Subscribe(ctx, Channel(owner))
	t.Cleanup(func() { sub.Close() })
	if _, err := sub.Receive(ctx); err != nil {
		t.Fatal(err)
	}
	return rdb, sub
}
