package audit_test

import (
	"context"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/codehub-io/codehub/audit"
	"github.com/codehub-io/codehub/internal/testenv"
	"github.com/codehub-io/codehub/store"
)

func newLog(t *testing.T) (*audit.Log, func(sql string, args ...any)) {
	t.Helper()
	ctx := context.Background()
	pool, err := store.Open(ctx, testenv.PostgresURL(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	if err := store.Migrate(ctx, pool, hclog.NewNullLogger()); err != nil {
		t.Fatal(err)
	}
	exec := func(sql string, args ...any) {
		t.Helper()
		if _, err := pool.Exec(ctx, sql, args...); err != nil {
			t.Fatal(err)
		}
	}
	return audit.New(hclog.NewNullLogger(), pool), exec
}

// Events past the retention are pruned, the rest kept; a token can act.
func TestPruneKeepsTheRetention(t *testing.T) {
	log, exec := newLog(t)
	ctx := context.Background()
	token := audit.Actor{UserID: "01hzzzzzzzzzzzzzzzzzzzzzzz", TokenID: "tok-1", Address: "10.0.0.1"}
	log.Record(ctx, audit.Event{Actor: token, Action: audit.ActionTokenCreate, Target: audit.Target{Type: audit.TargetToken, ID: "tok-1"}, Outcome: audit.Success})
	log.Record(ctx, audit.Event{Actor: token, Action: audit.ActionTokenRevoke, Target: audit.Target{Type: audit.TargetToken, ID: "tok-1"}, Outcome: audit.Success})
	exec(`UPDATE audit_events SET at = now() - interval '91 days' WHERE action = $1`, audit.ActionTokenCreate)

	n, err := log.Prune(ctx, time.Now(), 90*24*time.Hour)
	if err != nil || n != 1 {
		t.Fatalf("prune = %d, %v; want 1", n, err)
	}
	events, err := log.List(ctx, audit.Filter{UserID: token.UserID, Limit: 10})
	if err != nil {
		t.Fatal(err)
	}
	if len(events) != 1 || events[0].Action != audit.ActionTokenRevoke || events[0].Actor != token {
		t.Errorf("kept %+v, want the revoke by the token", events)
	}
}

// A request cancelled after its action still leaves its record.
func TestRecordOutlivesTheRequest(t *testing.T) {
	log, _ := newLog(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	log.Record(ctx, audit.Event{Actor: audit.Actor{UserID: "u1"}, Action: audit.ActionLogin, Outcome: audit.Failure})
	events, err := log.List(context.Background(), audit.Filter{Limit: 10})
	if err != nil || len(events) != 1 {
		t.Fatalf("events = %+v, %v; want the one recorded", events, err)
	}
}
