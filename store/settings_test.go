package store_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/codehub-io/codehub/store"
)

// newUser inserts a user with a password and returns its id.
func newUser(t *testing.T, pool *pgxpool.Pool, name string) string {
	t.Helper()
	id := fmt.Sprintf("%s-%d", name, time.Now().UnixNano())
	if _, err := pool.Exec(t.Context(), `INSERT INTO users (id, username, password_hash) VALUES ($1, $1, 'x')`, id); err != nil {
		t.Fatal(err)
	}
	return id
}

func storedCredential(t *testing.T, pool *pgxpool.Pool, id string) string {
	t.Helper()
	var raw string
	if err := pool.QueryRow(t.Context(), `SELECT git_credential FROM users WHERE id = $1`, id).Scan(&raw); err != nil {
		t.Fatal(err)
	}
	return raw
}

// A database dump alone must not hand out anyone's git token.
func TestGitCredentialSealedAtRest(t *testing.T) {
	ctx := t.Context()
	pool := migratedPool(t)
	const token = "ghp_DumpMeIfYouCan1234"
	alice, bob := newUser(t, pool, "alice"), newUser(t, pool, "bob")

	credential, dotfiles := token, "https://example.com/dots.git"
	set, err := store.SetFirstStartSettings(ctx, pool, alice, &dotfiles, &credential)
	if err != nil || set.GitCredential != token {
		t.Fatalf("set: %+v, %v", set, err)
	}
	raw := storedCredential(t, pool, alice)
	if raw == "" || strings.Contains(raw, token) || strings.Contains(raw, "DumpMe") {
		t.Fatalf("stored column %q reveals the token", raw)
	}
	got, err := store.GetFirstStartSettings(ctx, pool, alice)
	if err != nil || got.GitCredential != token || got.DotfilesRepository != dotfiles {
		t.Fatalf("read back: %+v, %v", got, err)
	}

	// Sealed for alice: the same bytes in bob's row open for nobody.
	if _, err := pool.Exec(ctx, `UPDATE users SET git_credential = $2 WHERE id = $1`, bob, raw); err != nil {
		t.Fatal(err)
	}
	if got, err := store.GetFirstStartSettings(ctx, pool, bob); !errors.Is(err, store.ErrCredentialUnreadable) || got.GitCredential != "" {
		t.Errorf("alice's sealed credential in bob's row: %+v, %v; want ErrCredentialUnreadable", got, err)
	}

	// Clearing stores nothing.
	empty := ""
	if _, err := store.SetFirstStartSettings(ctx, pool, alice, nil, &empty); err != nil {
		t.Fatal(err)
	}
	if raw := storedCredential(t, pool, alice); raw != "" {
		t.Errorf("a cleared credential is stored as %q", raw)
	}
}

// Rows written before credentials were sealed hold the token itself; the
// server seals them at start, and until then they read as they are.
func TestLegacyGitCredentialSealed(t *testing.T) {
	ctx := t.Context()
	pool := migratedPool(t)
	const token = "legacy_PlainToken_99"
	carol := newUser(t, pool, "carol")
	if _, err := pool.Exec(ctx, `UPDATE users SET git_credential = $2 WHERE id = $1`, carol, token); err != nil {
		t.Fatal(err)
	}
	if got, err := store.GetFirstStartSettings(ctx, pool, carol); err != nil || got.GitCredential != token {
		t.Fatalf("legacy row before sealing: %+v, %v", got, err)
	}
	n, err := store.SealGitCredentials(ctx, pool)
	if err != nil || n < 1 {
		t.Fatalf("SealGitCredentials = %d, %v; want carol's row sealed", n, err)
	}
	if raw := storedCredential(t, pool, carol); strings.Contains(raw, token) {
		t.Fatalf("after sealing the column still reveals the token: %q", raw)
	}
	if got, err := store.GetFirstStartSettings(ctx, pool, carol); err != nil || got.GitCredential != token {
		t.Fatalf("sealed legacy row reads %+v, %v", got, err)
	}
	if n, err := store.SealGitCredentials(ctx, pool); err != nil || n != 0 {
		t.Errorf("a second pass sealed %d rows, %v; want none", n, err)
	}
}
