package store_test

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/hashicorp/go-hclog"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/codehub-io/codehub/internal/testenv"
	"github.com/codehub-io/codehub/store"
)

func TestMigrateConcurrentAndIdempotent(t *testing.T) {
	ctx := context.Background()
	url := testenv.PostgresURL(t)
	pool, err := store.Open(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()

	// Two replicas starting together must not race.
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = store.Migrate(ctx, pool, hclog.NewNullLogger())
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatalf("migrate: %v", err)
		}
	}
	if err := store.Migrate(ctx, pool, hclog.NewNullLogger()); err != nil {
		t.Fatalf("second migrate: %v", err)
	}
	var n int
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM schema_migrations").Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n < 1 {
		t.Fatalf("schema_migrations has %d rows", n)
	}
}

func TestExecCASConflict(t *testing.T) {
	ctx := context.Background()
	pool := migratedPool(t)
	if _, err := pool.Exec(ctx, `INSERT INTO users (id, username, password_hash) VALUES ('u1', 'ann', 'x')`); err != nil {
		t.Fatal(err)
	}
	if err := store.ExecCAS(ctx, pool, `UPDATE users SET is_admin = true WHERE id = 'u1' AND is_admin = false`); err != nil {
		t.Fatalf("first CAS: %v", err)
	}
	err := store.ExecCAS(ctx, pool, `UPDATE users SET is_admin = true WHERE id = 'u1' AND is_admin = false`)
	if !errors.Is(err, store.ErrConflict) {
		t.Fatalf("second CAS: got %v, want ErrConflict", err)
	}
	_, err = pool.Exec(ctx, `INSERT INTO users (id, username, password_hash) VALUES ('u2', 'ann', 'x')`)
	if !store.IsUniqueViolation(err, "users_username_key") {
		t.Fatalf("duplicate username: got %v, want unique violation", err)
	}
}

// migratedPool opens the test database with the schema applied; it closes
// when the test ends.
func migratedPool(t *testing.T) *pgxpool.Pool {
	t.Helper()
	pool, err := store.Open(t.Context(), testenv.PostgresURL(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	if err := store.Migrate(t.Context(), pool, hclog.NewNullLogger()); err != nil {
		t.Fatal(err)
	}
	return pool
}

// ReadSchemaState reads without writing: a fresh database has every
// migration pending and still no schema_migrations table; a migrated one
// none; one a newer release migrated names the versions it lacks.
func TestReadSchemaState(t *testing.T) {
	ctx := context.Background()
	pool, err := store.Open(ctx, testenv.PostgresURL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	fresh, err := store.ReadSchemaState(ctx, pool)
	if err != nil {
		t.Fatal(err)
	}
	if len(fresh.Pending) == 0 || len(fresh.Unknown) != 0 || !fresh.CanCreate {
		t.Fatalf("fresh database: %+v", fresh)
	}
	var exists bool
	if err := pool.QueryRow(ctx, "SELECT to_regclass('schema_migrations') IS NOT NULL").Scan(&exists); err != nil || exists {
		t.Fatalf("reading the state created schema_migrations (exists %v, err %v)", exists, err)
	}
	if err := store.Migrate(ctx, pool, hclog.NewNullLogger()); err != nil {
		t.Fatal(err)
	}
	migrated, err := store.ReadSchemaState(ctx, pool)
	if err != nil || len(migrated.Pending) != 0 || len(migrated.Unknown) != 0 {
		t.Fatalf("migrated database: %+v, %v", migrated, err)
	}
	if _, err := pool.Exec(ctx, "INSERT INTO schema_migrations (version, name) VALUES (9999, '9999_future.sql')"); err != nil {
		t.Fatal(err)
	}
	newer, err := store.ReadSchemaState(ctx, pool)
	if err != nil || len(newer.Pending) != 0 || len(newer.Unknown) != 1 || newer.Unknown[0] != 9999 {
		t.Fatalf("database of a newer release: %+v, %v", newer, err)
	}
}
