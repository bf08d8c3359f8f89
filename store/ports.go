package store

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// PortShare is the stored share level of a workspace's port; empty when
// the port was never shared (its owner's only).
func PortShare(ctx context.Context, q Querier, workspaceID string, port int) (string, error) {
	var level string
	err := q.QueryRow(ctx, `SELECT level FROM port_shares WHERE workspace_id = $1 AND port = $2`, workspaceID, port).Scan(&level)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("read port share: %w", err)
	}
	return level, nil
}

// PortShares is every shared port of a workspace and its level.
func PortShares(ctx context.Context, q Querier, workspaceID string) (map[int]string, error) {
	rows, err := q.Query(ctx, `SELECT port, level FROM port_shares WHERE workspace_id = $1`, workspaceID)
	if err != nil {
		return nil, fmt.Errorf("list port shares: %w", err)
	}
	defer rows.Close()
	out := map[int]string{}
	for rows.Next() {
		var port int
		var level string
		if err := rows.Scan(&port, &level); err != nil {
			return nil, fmt.Errorf("list port shares: %w", err)
		}
		out[port] = level
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list port shares: %w", err)
	}
	return out, nil
}

// SetPortShare stores the share level of a workspace's port and returns
// the one it replaces (empty: the owner's only). An empty level deletes
// the row: the port goes back to its owner only.
func SetPortShare(ctx context.Context, q Querier, workspaceID string, port int, level string) (string, error) {
	var previous string
	var err error
	if level == "" {
		err = q.QueryRow(ctx, `WITH old AS (SELECT level FROM port_shares WHERE workspace_id = $1 AND port = $2 FOR UPDATE),
			gone AS (DELETE FROM port_shares WHERE workspace_id = $1 AND port = $2)
			SELECT coalesce((SELECT level FROM old), '')`, workspaceID, port).Scan(&previous)
	} else {
		err = q.QueryRow(ctx, `WITH old AS (SELECT level FROM port_shares WHERE workspace_id = $1 AND port = $2 FOR UPDATE),
			put AS (INSERT INTO port_shares (workspace_id, port, level) VALUES ($1, $2, $3)
				ON CONFLICT (workspace_id, port) DO UPDATE SET level = EXCLUDED.level, updated_at = now())
			SELECT coalesce((SELECT level FROM old), '')`, workspaceID, port, level).Scan(&previous)
	}
	if err != nil {
		return "", fmt.Errorf("set port share: %w", err)
	}
	return previous, nil
}
