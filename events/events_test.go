package events

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"

	"github.com/codehub-io/codehub/internal/testenv"
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
	opts, err := redis.ParseURL(testenv.RedisURL(t))
	if err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(opts)
	defer rdb.Close()
	sub := rdb.Subscribe(ctx, Channel("u1"))
	defer sub.Close()
	if _, err := sub.Receive(ctx); err != nil {
		t.Fatal(err)
	}
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
