package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// Prebuild statuses (migration 027).
const (
	PrebuildRequested = "REQUESTED"
	PrebuildBuilding  = "BUILDING"
	PrebuildReady     = "READY"
	PrebuildFailed    = "FAILED"
)

// Prebuild is one prebuild of a template at a version.
type Prebuild struct {
	ID       string `db:"id" json:"id"`
	Template string `db:"template" json:"template"`
	Version  string `db:"version" json:"version"`
	Status   string `db:"status" json:"status"`
	// WorkspaceID is the workspace building it (owned by PrebuildOwnerID).
	WorkspaceID *string `db:"workspace_id" json:"workspace_id"`
	// ArchiveKey holds the prebuilt home once READY, and Commit the
	// repository's commit it holds (nil for a prebuild older than its
	// recording).
	ArchiveKey  *string    `db:"archive_key" json:"archive_key"`
	Commit      *string    `db:"commit" json:"commit"`
	Error       string     `db:"error" json:"error,omitempty"`
	RequestedBy string     `db:"requested_by" json:"requested_by,omitempty"`
	CreatedAt   time.Time  `db:"created_at" json:"created_at"`
	StartedAt   *time.Time `db:"started_at" json:"started_at"`
	FinishedAt  *time.Time `db:"finished_at" json:"finished_at"`
}

const prebuildColumns = `id, template, version, status, workspace_id, archive_key, commit, error, requested_by, created_at, started_at, finished_at`

// ListPrebuilds returns every prebuild, each template's newest first.
func ListPrebuilds(ctx context.Context, q Querier) ([]Prebuild, error) {
	rows, err := q.Query(ctx, `SELECT `+prebuildColumns+` FROM prebuilds ORDER BY template, created_at DESC, id DESC`)
	if err != nil {
		return nil, fmt.Errorf("list prebuilds: %w", err)
	}
	ps, err := pgx.CollectRows(rows, pgx.RowToStructByName[Prebuild])
	if err != nil {
		return nil, fmt.Errorf("list prebuilds: %w", err)
	}
	return ps, nil
}

// NewestReadyPrebuild returns the newest READY prebuild of template at
// version, or ErrNotFound.
func NewestReadyPrebuild(ctx context.Context, q Querier, template, version string) (Prebuild, error) {
	rows, err := q.Query(ctx, `SELECT `+prebuildColumns+` FROM prebuilds
		WHERE template = $1 AND version = $2 AND status = 'READY'
		ORDER BY finished_at DESC, id DESC LIMIT 1`, template, version)
	if err != nil {
		return Prebuild{}, fmt.Errorf("find a prebuild: %w", err)
	}
	p, err := pgx.CollectExactlyOneRow(rows, pgx.RowToStructByName[Prebuild])
	if errors.Is(err, pgx.ErrNoRows) {
		return Prebuild{}, ErrNotFound
	}
	if err != nil {
		return Prebuild{}, fmt.Errorf("find a prebuild: %w", err)
	}
	return p, nil
}

// RequestPrebuild records an admin's request for a prebuild of template
// at version; a request already waiting is returned instead of a second.
func RequestPrebuild(ctx context.Context, q Querier, id, template, version, by string) (Prebuild, error) {
	rows, err := q.Query(ctx, `INSERT INTO prebuilds (id, template, version, status, requested_by)
		SELECT $1, $2, $3, 'REQUESTED', $4
		WHERE NOT EXISTS (SELECT 1 FROM prebuilds WHERE template = $2 AND status = 'REQUESTED')
		RETURNING `+prebuildColumns, id, template, version, by)
	if err != nil {
		return Prebuild{}, fmt.Errorf("request a prebuild: %w", err)
	}
	p, err := pgx.CollectExactlyOneRow(rows, pgx.RowToStructByName[Prebuild])
	if errors.Is(err, pgx.ErrNoRows) {
		rows, err := q.Query(ctx, `SELECT `+prebuildColumns+` FROM prebuilds WHERE template = $1 AND status = 'REQUESTED'`, template)
		if err != nil {
			return Prebuild{}, fmt.Errorf("request a prebuild: %w", err)
		}
		return pgx.CollectExactlyOneRow(rows, pgx.RowToStructByName[Prebuild])
	}
	if err != nil {
		return Prebuild{}, fmt.Errorf("request a prebuild: %w", err)
	}
	return p, nil
}

// StartPrebuild records that workspace wsID builds prebuild id of template
// at version: a waiting request becomes BUILDING, or a new row is made.
// A prebuild past its request is ErrConflict.
func StartPrebuild(ctx context.Context, q Querier, id, template, version, wsID string) error {
	tag, err := q.Exec(ctx, `INSERT INTO prebuilds (id, template, version, status, workspace_id, started_at)
		VALUES ($1, $2, $3, 'BUILDING', $4, now())
		ON CONFLICT (id) DO UPDATE SET status = 'BUILDING', version = $3, workspace_id = $4, started_at = now()
		WHERE prebuilds.status = 'REQUESTED'`, id, template, version, wsID)
	if err != nil {
		return fmt.Errorf("start prebuild %s: %w", id, err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("start prebuild %s: %w", id, ErrConflict)
	}
	return nil
}

// FinishPrebuild ends a BUILDING prebuild: READY with the archive holding
// the home and the commit it holds, or FAILED with why. A prebuild not
// BUILDING any more is ErrConflict.
func FinishPrebuild(ctx context.Context, q Querier, id string, archiveKey, commit *string, failure string) error {
	status := PrebuildReady
	if archiveKey == nil {
		status = PrebuildFailed
	}
	tag, err := q.Exec(ctx, `UPDATE prebuilds SET status = $2, archive_key = $3, commit = $4, error = $5, finished_at = now()
		WHERE id = $1 AND status = 'BUILDING'`, id, status, archiveKey, commit, failure)
	if err != nil {
		return fmt.Errorf("finish prebuild %s: %w", id, err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("finish prebuild %s: %w", id, ErrConflict)
	}
	return nil
}

// DeletePrebuild forgets a prebuild.
func DeletePrebuild(ctx context.Context, q Querier, id string) error {
	if _, err := q.Exec(ctx, `DELETE FROM prebuilds WHERE id = $1`, id); err != nil {
		return fmt.Errorf("delete prebuild %s: %w", id, err)
	}
	return nil
}
