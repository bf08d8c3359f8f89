package main

import (
	"context"
	"fmt"

	"github.com/hashicorp/go-hclog"

	"github.com/codehub-io/codehub/config"
	"github.com/codehub-io/codehub/identity"
	"github.com/codehub-io/codehub/store"
	"github.com/codehub-io/codehub/workspace"
)

// bootstrapAdmin creates the configured first administrator, but only on a
// database without users: it never resets a password that exists.
func bootstrapAdmin(ctx context.Context, logger hclog.Logger, cfg *config.Config, d *deps) error {
	b := cfg.Auth.BootstrapAdmin
	if b == nil || !b.Password.IsSet() {
		return nil
	}
	n, err := store.CountUsers(ctx, d.pool)
	if err != nil {
		return fmt.Errorf("count users: %w", err)
	}
	if n > 0 {
		return nil
	}
	hash, err := identity.HashPassword(b.Password.Reveal())
	if err != nil {
		return err
	}
	_, err = store.CreateUser(ctx, d.pool, workspace.NewID(), b.Username, hash, true)
	if store.IsUniqueViolation(err, "") {
		// Another replica starting at the same moment created it.
		return nil
	}
	if err != nil {
		return fmt.Errorf("create bootstrap admin: %w", err)
	}
	logger.Info("created bootstrap administrator", "username", b.Username)
	return nil
}
