package main

import (
	"fmt"
	"io"

	"github.com/codehub-io/codehub/config"
	"github.com/codehub-io/codehub/store"
)

func runMigrate(args []string, _ io.Reader, _, stderr io.Writer) int {
	fs, path := configFlags("migrate", stderr)
	if err := fs.Parse(args); err != nil {
		return 2
	}
	cfg, err := loadConfig(*path, stderr)
	if err != nil {
		return 1
	}
	logger := config.NewLogger(cfg)
	ctx, stop := signalContext()
	defer stop()
	pool, err := store.Open(ctx, cfg.Database.URL.Reveal())
	if err != nil {
		logger.Error("cannot open database", "error", err)
		return 1
	}
	defer pool.Close()
	if err := store.Migrate(ctx, pool, logger.Named("migrate")); err != nil {
		logger.Error("migration failed", "error", err)
		return 1
	}
	logger.Info("database schema is up to date")
	return 0
}

// loadConfig loads and validates the file at path, printing every problem.
func loadConfig(path string, stderr io.Writer) (*config.Config, error) {
	if path == "" {
		fmt.Fprintln(stderr, "codehub: -config FILE is required")
		return nil, fmt.Errorf("no config file")
	}
	cfg, err := config.Load(path)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return nil, err
	}
	return cfg, nil
}
