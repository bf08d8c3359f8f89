package store_test

import (
	"errors"
	"testing"
	"time"

	"github.com/codehub-io/codehub/store"
)

// TestSessionHandoff: a ticket hands a live dashboard session over to one
// workspace's host once, within its lifetime; the session it gives is good
// for that host only and ends with the dashboard session.
func TestSessionHandoff(t *testing.T) {
	ctx := t.Context()
	pool := migratedPool(t)
	if _, err := store.CreateUser(ctx, pool, "01jb3x7k9q2m5n8p4r6s0tuser", "alice", "x", false); err != nil {
		t.Fatal(err)
	}
	const wsA, wsB = "01jb3x7k9q2m5n8p4r6s0t1v2w", "01jb3x7k9q2m5n8p4r6s0t1v2x"
	parent, child, other := []byte("parent-hash"), []byte("child-hash"), []byte("other-hash")
	if _, err := store.CreateSession(ctx, pool, parent, "01jb3x7k9q2m5n8p4r6s0tuser", time.Hour); err != nil {
		t.Fatal(err)
	}
	handoff := func(ticket []byte, ws string, ttl time.Duration) {
		t.Helper()
		if ok, err := store.CreateHandoff(ctx, pool, ticket, parent, ws, ttl); err != nil || !ok {
			t.Fatalf("create handoff: %v %v", ok, err)
		}
	}

	// A ticket of a session that is not a live dashboard session is not made.
	if ok, err := store.CreateHandoff(ctx, pool, []byte("t0"), []byte("nobody"), wsA, time.Minute); err != nil || ok {
		t.Fatalf("handoff of an unknown session: %v %v", ok, err)
	}
	// An expired ticket and one for another workspace give nothing, and
	// are used up.
	handoff([]byte("t1"), wsA, 0)
	handoff([]byte("t2"), wsB, time.Minute)
	for _, tk := range []string{"t1", "t2"} {
		for range 2 {
			if _, err := store.RedeemHandoff(ctx, pool, []byte(tk), wsA, other); !errors.Is(err, store.ErrNotFound) {
				t.Fatalf("redeem %s on %s: %v, want ErrNotFound", tk, wsA, err)
			}
		}
	}
	if _, err := store.RedeemHandoff(ctx, pool, []byte("t2"), wsB, other); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("redeem of a used ticket: %v, want ErrNotFound", err)
	}

	handoff([]byte("t3"), wsA, time.Minute)
	got, err := store.RedeemHandoff(ctx, pool, []byte("t3"), wsA, child)
	if err != nil || got.Username != "alice" || got.WorkspaceID != wsA {
		t.Fatalf("redeem: %+v %v", got, err)
	}
	dash, err := store.SessionByTokenHash(ctx, pool, parent, "")
	if err != nil || !got.ExpiresAt.Equal(dash.ExpiresAt) {
		t.Fatalf("handed-over session expires %v, dashboard session %v (%v)", got.ExpiresAt, dash.ExpiresAt, err)
	}
	if _, err := store.RedeemHandoff(ctx, pool, []byte("t3"), wsA, other); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("second redeem: %v, want ErrNotFound", err)
	}
	if s, err := store.SessionByTokenHash(ctx, pool, child, wsA); err != nil || s.Username != "alice" {
		t.Fatalf("host session on its host: %+v %v", s, err)
	}
	for _, ws := range []string{"", wsB} {
		if _, err := store.SessionByTokenHash(ctx, pool, child, ws); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("host session looked up for %q: %v, want ErrNotFound", ws, err)
		}
	}
	if _, err := store.SessionByTokenHash(ctx, pool, parent, wsA); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("dashboard session looked up for a workspace host: %v, want ErrNotFound", err)
	}
	// A host session hands nothing over itself.
	if ok, err := store.CreateHandoff(ctx, pool, []byte("t4"), child, wsA, time.Minute); err != nil || ok {
		t.Fatalf("handoff of a host session: %v %v", ok, err)
	}

	if err := store.DeleteSession(ctx, pool, parent); err != nil {
		t.Fatal(err)
	}
	if _, err := store.SessionByTokenHash(ctx, pool, child, wsA); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("host session after logout: %v, want ErrNotFound", err)
	}
}
