package store_test

import (
	"errors"
	"testing"
	"time"

	"github.com/codehub-io/codehub/store"
)

// A session's ID token is there while the session lives, and goes with it.
func TestOIDCSessionEndsWithItsSession(t *testing.T) {
	ctx := t.Context()
	pool := migratedPool(t)
	const id = "01jb3x7k9q2m5n8p4r6s0tuser"
	if _, err := store.CreateUser(ctx, pool, id, "alice", "x", false); err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"s1", "s2"} {
		if _, err := store.CreateSession(ctx, pool, []byte(s), id, time.Hour); err != nil {
			t.Fatal(err)
		}
	}
	if err := store.SetOIDCSession(ctx, pool, []byte("s1"), "id-token-1"); err != nil {
		t.Fatal(err)
	}
	if got, err := store.OIDCSessionIDToken(ctx, pool, []byte("s1")); err != nil || got != "id-token-1" {
		t.Fatalf("id token = %q, %v", got, err)
	}
	if _, err := store.OIDCSessionIDToken(ctx, pool, []byte("s2")); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("a session without an ID token: %v, want ErrNotFound", err)
	}
	if err := store.SetOIDCSession(ctx, pool, []byte("unknown"), "x"); err == nil {
		t.Error("an ID token stored for no session")
	}
	if err := store.DeleteSession(ctx, pool, []byte("s1")); err != nil {
		t.Fatal(err)
	}
	var left int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM oidc_sessions`).Scan(&left); err != nil || left != 0 {
		t.Errorf("ID tokens left after their session ended: %d, %v", left, err)
	}
}
