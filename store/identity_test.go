package store_test

import (
	"errors"
	"testing"
	"time"

	"github.com/codehub-io/codehub/store"
)

// A disabled user's session does not authenticate, even one that was
// started while the user was being disabled and so outlived the purge.
func TestDisabledUserHasNoSession(t *testing.T) {
	ctx := t.Context()
	pool := migratedPool(t)
	const id = "01jb3x7k9q2m5n8p4r6s0tuser"
	if _, err := store.CreateUser(ctx, pool, id, "alice", "x", false); err != nil {
		t.Fatal(err)
	}
	if _, err := store.SetDisabled(ctx, pool, id, true); err != nil {
		t.Fatal(err)
	}
	if _, err := store.CreateSession(ctx, pool, []byte("late"), id, time.Hour); err != nil {
		t.Fatal(err)
	}
	if _, err := store.SessionByTokenHash(ctx, pool, []byte("late"), ""); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("session of a disabled user: %v, want ErrNotFound", err)
	}
	if _, err := store.SetDisabled(ctx, pool, id, false); err != nil {
		t.Fatal(err)
	}
	if _, err := store.SessionByTokenHash(ctx, pool, []byte("late"), ""); err != nil {
		t.Errorf("session after enabling: %v", err)
	}
}

// A login under way at the provider is used once, and not after it expired.
func TestTakeOIDCLogin(t *testing.T) {
	ctx := t.Context()
	pool := migratedPool(t)
	first := store.OIDCLogin{Nonce: "n1", Verifier: "v1", Next: "/cli-login?port=1"}
	if err := store.CreateOIDCLogin(ctx, pool, []byte("s1"), first, time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := store.CreateOIDCLogin(ctx, pool, []byte("s2"), store.OIDCLogin{Nonce: "n2", Verifier: "v2"}, 0); err != nil {
		t.Fatal(err)
	}
	if l, err := store.TakeOIDCLogin(ctx, pool, []byte("s1")); err != nil || l != first {
		t.Fatalf("take = %+v %v, want %+v", l, err, first)
	}
	for _, state := range []string{"s1", "s2", "unknown"} {
		if _, err := store.TakeOIDCLogin(ctx, pool, []byte(state)); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("take %s: %v, want ErrNotFound", state, err)
		}
	}
}
