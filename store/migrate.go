package store

import (
	"context"
	"fmt"
	"io/fs"
	"sort"
	"strconv"
	"strings"

	"github.com/hashicorp/go-hclog"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/codehub-io/codehub/migrations"
)

// migrateLockKey serialises migrations between replicas starting together.
const migrateLockKey int64 = 0x636f6465687562 // "codehub"

type migration struct {
	version int
	name    string
	sql     string
}

func loadMigrations(fsys fs.FS) ([]migration, error) {
	names, err := fs.Glob(fsys, "*.sql")
	if err != nil {
		return nil, err
	}
	var out []migration
	for _, name := range names {
		num, _, ok := strings.Cut(name, "_")
		v, err := strconv.Atoi(num)
		if !ok || err != nil {
			return nil, fmt.Errorf("migration %q: name must start with a number and '_'", name)
		}
		body, err := fs.ReadFile(fsys, name)
		if err != nil {
			return nil, err
		}
		out = append(out, migration{version: v, name: name, sql: string(body)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].version < out[j].version })
	for i := 1; i < len(out); i++ {
		if out[i].version == out[i-1].version {
			return nil, fmt.Errorf("migrations %q and %q share version %d", out[i-1].name, out[i].name, out[i].version)
		}
	}
	return out, nil
}

// Migrate applies every embedded migration not yet applied, each in its own
// transaction, under an advisory lock so concurrent replicas never race.
func Migrate(ctx context.Context, pool *pgxpool.Pool, logger hclog.Logger) error {
	all, err := loadMigrations(migrations.FS)
	if err != nil {
		return err
	}
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("acquire connection: %w", err)
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock($1)", migrateLockKey); err != nil {
		return fmt.Errorf("take migration lock: %w", err)
	}
	defer func() {
		// A fresh context: the lock must be released even if ctx is done.
		_, _ = conn.Exec(context.WithoutCancel(ctx), "SELECT pg_advisory_unlock($1)", migrateLockKey)
	}()
	if _, err := conn.Exec(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (
		version    integer PRIMARY KEY,
		name       text NOT NULL,
		applied_at timestamptz NOT NULL DEFAULT now())`); err != nil {
		return fmt.Errorf("create schema_migrations: %w", err)
	}
	applied := map[int]bool{}
	rows, err := conn.Query(ctx, "SELECT version FROM schema_migrations")
	if err != nil {
		return fmt.Errorf("read schema_migrations: %w", err)
	}
	versions, err := pgx.CollectRows(rows, pgx.RowTo[int])
	if err != nil {
		return fmt.Errorf("read schema_migrations: %w", err)
	}
	for _, v := range versions {
		applied[v] = true
	}
	for _, m := range all {
		if applied[m.version] {
			continue
		}
		err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, m.sql); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, "INSERT INTO schema_migrations (version, name) VALUES ($1, $2)", m.version, m.name)
			return err
		})
		if err != nil {
			return fmt.Errorf("apply migration %s: %w", m.name, err)
		}
		logger.Info("applied migration", "name", m.name)
	}
	return nil
}

// SchemaState is how far a database's schema is from this binary's.
type SchemaState struct {
	// Pending are the migrations this binary has that the database lacks.
	Pending []string
	// Unknown are versions the database has that this binary does not:
	// a newer release migrated it.
	Unknown []int
	// CanCreate reports whether the connecting role may create tables in
	// its schema, which applying Pending needs.
	CanCreate bool
}

// ReadSchemaState compares the database's applied migrations with the
// embedded ones without changing anything: a database never migrated has
// every migration pending.
func ReadSchemaState(ctx context.Context, pool *pgxpool.Pool) (SchemaState, error) {
	all, err := loadMigrations(migrations.FS)
	if err != nil {
		return SchemaState{}, err
	}
	var st SchemaState
	if err := pool.QueryRow(ctx, "SELECT has_schema_privilege(current_schema(), 'CREATE')").Scan(&st.CanCreate); err != nil {
		return SchemaState{}, fmt.Errorf("read schema privileges: %w", err)
	}
	var exists bool
	if err := pool.QueryRow(ctx, "SELECT to_regclass('schema_migrations') IS NOT NULL").Scan(&exists); err != nil {
		return SchemaState{}, fmt.Errorf("look for schema_migrations: %w", err)
	}
	applied := map[int]bool{}
	if exists {
		rows, err := pool.Query(ctx, "SELECT version FROM schema_migrations")
		if err != nil {
			return SchemaState{}, fmt.Errorf("read schema_migrations: %w", err)
		}
		versions, err := pgx.CollectRows(rows, pgx.RowTo[int])
		if err != nil {
			return SchemaState{}, fmt.Errorf("read schema_migrations: %w", err)
		}
		for _, v := range versions {
			applied[v] = true
		}
	}
	known := map[int]bool{}
	for _, m := range all {
		known[m.version] = true
		if !applied[m.version] {
			st.Pending = append(st.Pending, m.name)
		}
	}
	for v := range applied {
		if !known[v] {
			st.Unknown = append(st.Unknown, v)
		}
	}
	sort.Ints(st.Unknown)
	return st, nil
}
