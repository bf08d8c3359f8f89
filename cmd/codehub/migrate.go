package main

import (
	"context"
	"fmt"
	"io"

	"github.com/hashicorp/go-hclog"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/codehub-io/codehub/config"
	"github.com/codehub-io/codehub/store"
)

func runMigrate(args []string, _ io.Reader, _, stderr io.Writer) int {
	fs, path := configFlags("migrate", stderr)
	if !parseConfigCommand(fs, path, args, stderr) {
		return 2
	}
	cfg, err := loadDatabaseConfig(*path, stderr)
	if err != nil {
		return 1
	}
	logger := config.NewLogger(cfg)
	ctx, stop := signalContext()
	defer stop()
	pool, err := openMigrated(ctx, cfg.Database.URL.Reveal(), logger.Named("migrate"))
	if err != nil {
		logger.Error("migration failed", "error", err)
		return 1
	}
	pool.Close()
	logger.Info("database schema is up to date")
	return 0
}

// openMigrated connects and brings the schema up to date under the
// migration lock: every command that touches the database starts with it.
func openMigrated(ctx context.Context, url string, logger hclog.Logger) (*pgxpool.Pool, error) {
	pool, err := store.Open(ctx, url)
	if err != nil {
		return nil, err
	}
	if err := store.Migrate(ctx, pool, logger); err != nil {
		pool.Close()
		return nil, err
	}
	// Credentials stored before they were sealed: a numbered migration
	// has no key to seal them with.
	n, err := store.SealGitCredentials(ctx, pool)
	if err != nil {
		pool.Close()
		return nil, fmt.Errorf("seal git credentials: %w", err)
	}
	if n > 0 {
		logger.Info("sealed git credentials stored in plain text", "count", n)
	}
	return pool, nil
}

// adminDB opens, for an admin command, the migrated database of the config
// at path, under a context that ends on SIGINT or SIGTERM; closeDB releases
// both. Problems are printed to stderr, prefixed with command.
func adminDB(command, path string, stderr io.Writer) (ctx context.Context, pool *pgxpool.Pool, closeDB func(), ok bool) {
	cfg, err := loadDatabaseConfig(path, stderr)
	if err != nil {
		return nil, nil, nil, false
	}
	ctx, stop := signalContext()
	pool, err = openMigrated(ctx, cfg.Database.URL.Reveal(), cliLogger("migrate", stderr))
	if err != nil {
		stop()
		fmt.Fprintf(stderr, "%s: %v\n", command, err)
		return nil, nil, nil, false
	}
	return ctx, pool, func() { pool.Close(); stop() }, true
}

// cliLogger is the logger of the admin commands: warnings and errors only,
// on stderr, so their own output stays clean.
func cliLogger(name string, stderr io.Writer) hclog.Logger {
	return hclog.New(&hclog.LoggerOptions{Name: name, Output: stderr, Level: hclog.Warn})
}

// loadDatabaseConfig loads the file at path for a command that uses only
// the database, judging only its settings and printing every problem.
func loadDatabaseConfig(path string, stderr io.Writer) (*config.Config, error) {
	cfg, err := config.LoadForDatabase(path)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return nil, err
	}
	return cfg, nil
}

// loadConfig loads and validates the file at path, printing every problem.
// Commands refuse an empty path as a usage error before calling it.
func loadConfig(path string, stderr io.Writer) (*config.Config, error) {
	cfg, err := config.Load(path)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return nil, err
	}
	return cfg, nil
}
