package store

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"
)

// Evacuation is an admin's request to move every home off a node.
type Evacuation struct {
	NodeID      string    `db:"node_id"`
	NodeName    string    `db:"node_name"`
	RequestedBy string    `db:"requested_by"`
	RequestedAt time.Time `db:"requested_at"`
}

// ListEvacuations returns every node being evacuated, by node id.
func ListEvacuations(ctx context.Context, q Querier) ([]Evacuation, error) {
	rows, err := q.Query(ctx, `SELECT node_id, node_name, requested_by, requested_at FROM node_evacuations ORDER BY node_name, node_id`)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowToStructByName[Evacuation])
}

// StartEvacuation records the request; asking again for the same node
// keeps the first request.
func StartEvacuation(ctx context.Context, q Querier, e Evacuation) (Evacuation, error) {
	rows, err := q.Query(ctx, `INSERT INTO node_evacuations (node_id, node_name, requested_by) VALUES ($1, $2, $3)
		ON CONFLICT (node_id) DO UPDATE SET node_id = EXCLUDED.node_id
		RETURNING node_id, node_name, requested_by, requested_at`, e.NodeID, e.NodeName, e.RequestedBy)
	if err != nil {
		return Evacuation{}, err
	}
	return pgx.CollectExactlyOneRow(rows, pgx.RowToStructByName[Evacuation])
}

// CancelEvacuation forgets the request and reports whether there was one.
func CancelEvacuation(ctx context.Context, q Querier, nodeID string) (bool, error) {
	tag, err := q.Exec(ctx, `DELETE FROM node_evacuations WHERE node_id = $1`, nodeID)
	if err != nil {
		return false, err
	}
	return tag.RowsAffected() > 0, nil
}

// AbandonRestoredVolume forgets that the volume holds the home restored
// from archive_key, so the archive is the home again (the admin accepted
// losing what the volume holds beyond it): the controller then deletes the
// volume and restores the archive elsewhere.
func AbandonRestoredVolume[T any](ctx context.Context, q Querier, id string, version int64) (T, error) {
	row, err := collectOne[T](q.Query(ctx, `UPDATE workspaces
		SET restore_marker = NULL, next_attempt_at = NULL
		WHERE id = $1 AND version = $2 AND deleted_at IS NULL AND operation = 'NONE' AND restore_marker = archive_key
		RETURNING `+WorkspaceColumns, id, version))
	if errors.Is(err, ErrNotFound) {
		return row, ErrConflict
	}
	return row, err
}
