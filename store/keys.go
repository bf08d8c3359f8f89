package store

import (
	"context"
	"crypto/rand"
	"fmt"
)

// DeploymentKey returns the deployment's key called name, creating a random
// 32-byte one on first use. Replicas starting together agree: the first
// insert wins and everyone reads the stored row.
func DeploymentKey(ctx context.Context, q Querier, name string) ([]byte, error) {
	fresh := make([]byte, 32)
	if _, err := rand.Read(fresh); err != nil {
		return nil, fmt.Errorf("generate deployment key %s: %w", name, err)
	}
	if _, err := q.Exec(ctx, `INSERT INTO deployment_keys (name, key) VALUES ($1, $2)
		ON CONFLICT (name) DO NOTHING`, name, fresh); err != nil {
		return nil, fmt.Errorf("create deployment key %s: %w", name, err)
	}
	var key []byte
	if err := q.QueryRow(ctx, `SELECT key FROM deployment_keys WHERE name = $1`, name).Scan(&key); err != nil {
		return nil, fmt.Errorf("read deployment key %s: %w", name, err)
	}
	return key, nil
}
