package store

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"time"

	"github.com/jackc/pgx/v5"
)

// The workspace queries return rows of the caller's type T (the workspace
// package's Workspace) so that store keeps no business types of its own and
// the workspace package can depend on store without a cycle.

// WorkspaceColumns lists every column of workspaces in a fixed order.
const WorkspaceColumns = `id, owner_id, name, description, image, desired_state, phase, operation,
	op_id, op_started_at, op_attempt, op_backup, conditions, archive_key, archived_at, restore_marker, run_id, archive_run_id, previous_run_id, error_reason,
	error_message, error_count, next_attempt_at, observed_at, phase_changed_at, last_access_at,
	standby_ttl, archive_ttl, desired_by, desired_at, keep_until, autostart_days, autostart_at, autostart_tz,
	autostart_done, version, created_at, updated_at, deleted_at, template, template_version, parameters,
	prebuild_of, from_prebuild, pool_of`

func collectOne[T any](rows pgx.Rows, err error) (T, error) {
	var zero T
	if err != nil {
		return zero, err
	}
	row, err := pgx.CollectExactlyOneRow(rows, pgx.RowToStructByName[T])
	if errors.Is(err, pgx.ErrNoRows) {
		return zero, ErrNotFound
	}
	return row, err
}

func collectAll[T any](rows pgx.Rows, err error) ([]T, error) {
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowToStructByName[T])
}

// GetLiveWorkspace returns a workspace that is not soft-deleted.
func GetLiveWorkspace[T any](ctx context.Context, q Querier, id string) (T, error) {
	return collectOne[T](q.Query(ctx, `SELECT `+WorkspaceColumns+` FROM workspaces
		WHERE id = $1 AND deleted_at IS NULL`, id))
}

// LockLiveWorkspace is GetLiveWorkspace holding the row lock until the
// transaction q ends.
func LockLiveWorkspace[T any](ctx context.Context, q Querier, id string) (T, error) {
	return collectOne[T](q.Query(ctx, `SELECT `+WorkspaceColumns+` FROM workspaces
		WHERE id = $1 AND deleted_at IS NULL FOR UPDATE`, id))
}

// ListLiveWorkspaces pages through live workspaces by id, optionally of one
// owner and in one phase (empty: any).
func ListLiveWorkspaces[T any](ctx context.Context, q Querier, ownerID, phase, after string, limit int) ([]T, error) {
	return collectAll[T](q.Query(ctx, `SELECT `+WorkspaceColumns+` FROM workspaces
		WHERE deleted_at IS NULL AND ($1 = '' OR owner_id = $1) AND ($2 = '' OR phase = $2) AND id > $3
		ORDER BY id LIMIT $4`, ownerID, phase, after, limit))
}

// ListDesiredRunning returns an owner's live workspaces whose desired state
// is RUNNING: the ones that count toward the running limits.
func ListDesiredRunning[T any](ctx context.Context, q Querier, ownerID string) ([]T, error) {
	return collectAll[T](q.Query(ctx, `SELECT `+WorkspaceColumns+` FROM workspaces
		WHERE owner_id = $1 AND desired_state = 'RUNNING' AND deleted_at IS NULL
		ORDER BY id`, ownerID))
}

// Advisory lock keys of the running limits. The global key is a constant;
// a user's key is a hash of the id in a second key space (two-int form), so
// the two never collide.
const (
	limitLockSpace     int32 = 0x6c696d // "lim"
	limitLockGlobalKey int32 = 0
)

func userLockKey(ownerID string) int32 {
	h := fnv.New32a()
	_, _ = h.Write([]byte(ownerID))
	// Keep the user keys apart from the global key.
	return int32(h.Sum32()|1) & 0x7fffffff
}

// LockRunningLimits serialises limit checks of ownerID and globally until
// the transaction tx ends. The order (user, then global) is fixed, so two
// transactions never wait on each other in a cycle.
func LockRunningLimits(ctx context.Context, tx pgx.Tx, ownerID string) error {
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1, $2)`, limitLockSpace, userLockKey(ownerID)); err != nil {
		return fmt.Errorf("lock user running limit: %w", err)
	}
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1, $2)`, limitLockSpace, limitLockGlobalKey); err != nil {
		return fmt.Errorf("lock global running limit: %w", err)
	}
	return nil
}

// CountDesiredRunning counts live workspaces with desired state RUNNING, of
// ownerID and in total.
func CountDesiredRunning(ctx context.Context, q Querier, ownerID string) (user, global int, err error) {
	err = q.QueryRow(ctx, `SELECT count(*) FILTER (WHERE owner_id = $1), count(*) FROM workspaces
		WHERE desired_state = 'RUNNING' AND deleted_at IS NULL`, ownerID).Scan(&user, &global)
	return user, global, err
}

// NewWorkspace is the row the service layer inserts.
type NewWorkspace struct {
	ID, OwnerID, Name, Description, Image, DesiredState string
	// Template, TemplateVersion and Parameters: what the workspace is
	// made of (Parameters JSON-encodes to an object).
	Template, TemplateVersion string
	Parameters                any
	// StandbyTTL and ArchiveTTL are the workspace's own timers; nil
	// keeps the operator's defaults.
	StandbyTTL, ArchiveTTL *time.Duration
	// ArchiveKey, for a workspace that starts from a prebuilt home, is
	// that home's archive (FromPrebuild names the prebuild); PrebuildOf
	// names the prebuild a builder workspace makes.
	ArchiveKey               *string
	FromPrebuild, PrebuildOf *string
	// PoolOf puts the workspace in the template's warm pool.
	PoolOf *string
}

// InsertWorkspace inserts a workspace and returns the stored row. A
// builder's desired state is the prebuild runner's.
func InsertWorkspace[T any](ctx context.Context, q Querier, w NewWorkspace) (T, error) {
	return collectOne[T](q.Query(ctx, `INSERT INTO workspaces (id, owner_id, name, description, image, desired_state,
			template, template_version, parameters, standby_ttl, archive_ttl, archive_key, from_prebuild, prebuild_of, pool_of, desired_by)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15,
			CASE WHEN $14::text IS NULL THEN 'user' ELSE 'prebuild' END) RETURNING `+WorkspaceColumns,
		w.ID, w.OwnerID, w.Name, w.Description, w.Image, w.DesiredState,
		w.Template, w.TemplateVersion, w.Parameters, w.StandbyTTL, w.ArchiveTTL, w.ArchiveKey, w.FromPrebuild, w.PrebuildOf, w.PoolOf))
}

// UpdateWorkspaceMeta changes name and/or description (nil: unchanged).
func UpdateWorkspaceMeta[T any](ctx context.Context, q Querier, id string, name, description *string) (T, error) {
	return collectOne[T](q.Query(ctx, `UPDATE workspaces
		SET name = COALESCE($2, name), description = COALESCE($3, description)
		WHERE id = $1 AND deleted_at IS NULL RETURNING `+WorkspaceColumns, id, name, description))
}

// TTLChange sets one of a workspace's own timers: Set false leaves it,
// Value nil returns it to the operator's default.
type TTLChange struct {
	Set   bool
	Value *time.Duration
}

// SetWorkspaceTTLs changes the idle timers of a live workspace.
func SetWorkspaceTTLs[T any](ctx context.Context, q Querier, id string, standby, archive TTLChange) (T, error) {
	return collectOne[T](q.Query(ctx, `UPDATE workspaces
		SET standby_ttl = CASE WHEN $2 THEN $3::interval ELSE standby_ttl END,
		    archive_ttl = CASE WHEN $4 THEN $5::interval ELSE archive_ttl END
		WHERE id = $1 AND deleted_at IS NULL RETURNING `+WorkspaceColumns,
		id, standby.Set, standby.Value, archive.Set, archive.Value))
}

// SetAutostart replaces the autostart schedule of a live workspace (days 0:
// none). Starts before now are never acted on.
func SetAutostart[T any](ctx context.Context, q Querier, id string, days int, at, zone *string) (T, error) {
	return collectOne[T](q.Query(ctx, `UPDATE workspaces
		SET autostart_days = $2, autostart_at = $3, autostart_tz = $4, autostart_done = now()
		WHERE id = $1 AND deleted_at IS NULL RETURNING `+WorkspaceColumns, id, days, at, zone))
}

// ListAutostarts returns the live workspaces with a schedule, ERROR aside.
func ListAutostarts[T any](ctx context.Context, q Querier) ([]T, error) {
	return collectAll[T](q.Query(ctx, `SELECT `+WorkspaceColumns+` FROM workspaces
		WHERE deleted_at IS NULL AND autostart_days <> 0 AND phase <> 'ERROR' ORDER BY id`))
}

// MarkAutostarted records the scheduled start at as acted on and keeps the
// workspace from its idle stop until at least keepUntil.
func MarkAutostarted[T any](ctx context.Context, q Querier, id string, at, keepUntil time.Time) (T, error) {
	return collectOne[T](q.Query(ctx, `UPDATE workspaces
		SET autostart_done = $2, keep_until = GREATEST(keep_until, $3)
		WHERE id = $1 AND deleted_at IS NULL RETURNING `+WorkspaceColumns, id, at, keepUntil))
}

// KeepRunning keeps a live workspace that is wanted running from the idle
// stop until now + d. No such workspace is ErrConflict.
func KeepRunning[T any](ctx context.Context, q Querier, id string, d time.Duration) (T, error) {
	row, err := collectOne[T](q.Query(ctx, `UPDATE workspaces SET keep_until = now() + $2::interval
		WHERE id = $1 AND deleted_at IS NULL AND desired_state = 'RUNNING'
		RETURNING `+WorkspaceColumns, id, d))
	if errors.Is(err, ErrNotFound) {
		return row, ErrConflict
	}
	return row, err
}

// SetDesiredState sets desired_state of a live workspace without an
// operation in flight but a backup (which yields to a wake); waking
// (RUNNING) also resets last_access_at. A new desired state is a new request: like a deletion it does not wait out the
// backoff of a failure on the way to the old one, so next_attempt_at is
// cleared (error_count stays, so repeated failures still end in ERROR).
// version > 0 additionally requires the row to be unchanged since it was
// read. by records who asked; a request other than RUNNING also ends any
// keep-running the owner asked for. No matching row is ErrConflict.
func SetDesiredState[T any](ctx context.Context, q Querier, id, desired string, version int64, by string) (T, error) {
	row, err := collectOne[T](q.Query(ctx, `UPDATE workspaces
		SET desired_state = $2, next_attempt_at = NULL, desired_by = $4, desired_at = now(),
		    last_access_at = CASE WHEN $2 = 'RUNNING' THEN now() ELSE last_access_at END,
		    keep_until = CASE WHEN $2 = 'RUNNING' THEN keep_until END
		WHERE id = $1 AND deleted_at IS NULL AND (operation = 'NONE' OR operation = 'ARCHIVING' AND op_backup)
		  AND ($3 = 0 OR version = $3)
		RETURNING `+WorkspaceColumns, id, desired, version, by))
	if errors.Is(err, ErrNotFound) {
		return row, ErrConflict
	}
	return row, err
}

// SoftDeleteWorkspace marks a live workspace deleted with desired DELETED.
// Deletion is a fresh request: it does not wait out the backoff of an
// earlier failed attempt, so next_attempt_at is cleared with it.
func SoftDeleteWorkspace(ctx context.Context, q Querier, id string) error {
	err := ExecCAS(ctx, q, `UPDATE workspaces SET deleted_at = now(), desired_state = 'DELETED',
		next_attempt_at = NULL
		WHERE id = $1 AND deleted_at IS NULL`, id)
	if errors.Is(err, ErrConflict) {
		return ErrNotFound
	}
	return err
}

// RecoverWorkspace clears the error of a live ERROR workspace and sets the
// phase its last observation implies. No matching row is ErrConflict.
func RecoverWorkspace[T any](ctx context.Context, q Querier, id, phase string) (T, error) {
	row, err := collectOne[T](q.Query(ctx, `UPDATE workspaces
		SET error_reason = NULL, error_message = NULL, error_count = 0, next_attempt_at = NULL, phase = $2
		WHERE id = $1 AND deleted_at IS NULL AND phase = 'ERROR' AND operation = 'NONE'
		RETURNING `+WorkspaceColumns, id, phase))
	if errors.Is(err, ErrNotFound) {
		return row, ErrConflict
	}
	return row, err
}

// TouchLastAccess raises last_access_at of each workspace ids[i] to at[i]
// in one statement; an older timestamp never overwrites a newer one.
func TouchLastAccess(ctx context.Context, q Querier, ids []string, at []time.Time) (int64, error) {
	tag, err := q.Exec(ctx, `UPDATE workspaces w SET last_access_at = a.at
		FROM unnest($1::text[], $2::timestamptz[]) AS a(id, at)
		WHERE w.id = a.id AND a.at > w.last_access_at`, ids, at)
	if err != nil {
		return 0, err
	}
	return tag.RowsAffected(), nil
}

// ListIdleWorkspaces returns live workspaces without an operation whose TTL
// ran out at now: RUNNING (desired RUNNING) idle past the standby TTL since
// the later of last_access_at and phase_changed_at, and STANDBY (desired
// STANDBY) past the archive TTL since phase_changed_at. A wake sets
// last_access_at when it is asked for, but a restore and start may take
// longer than the TTL: idleness counts from when the workspace could first
// be used. Per-workspace TTLs override the defaults, and a running
// workspace its owner keeps running (keep_until) waits for that time.
func ListIdleWorkspaces[T any](ctx context.Context, q Querier, now time.Time, standbyTTL, archiveTTL time.Duration) ([]T, error) {
	return collectAll[T](q.Query(ctx, `SELECT `+WorkspaceColumns+` FROM workspaces
		WHERE deleted_at IS NULL AND operation = 'NONE' AND pool_of IS NULL AND (
		      (phase = 'RUNNING' AND desired_state = 'RUNNING'
		       AND last_access_at < $1::timestamptz - COALESCE(standby_ttl, $2::interval)
		       AND phase_changed_at < $1::timestamptz - COALESCE(standby_ttl, $2::interval)
		       AND (keep_until IS NULL OR keep_until < $1::timestamptz))
		   OR (phase = 'STANDBY' AND desired_state = 'STANDBY'
		       AND phase_changed_at < $1::timestamptz - COALESCE(archive_ttl, $3::interval)))
		ORDER BY id`, now, standbyTTL, archiveTTL))
}

// ListArchiveOwners returns the workspaces whose archives the GC judges:
// every live workspace, and soft-deleted ones whose deletion finished
// (phase DELETED or ERROR) before deletedBefore and whose archives are not
// known to be all gone.
func ListArchiveOwners[T any](ctx context.Context, q Querier, deletedBefore time.Time) ([]T, error) {
	return collectAll[T](q.Query(ctx, `SELECT `+WorkspaceColumns+` FROM workspaces w
		WHERE deleted_at IS NULL
		   OR (deleted_at < $1 AND phase IN ('DELETED', 'ERROR')
		       AND NOT EXISTS (SELECT 1 FROM archives_collected c WHERE c.workspace_id = w.id))
		ORDER BY id`, deletedBefore))
}

// ReferencedArchives lists the archives of workspace owner (keys under its
// prefix) that something besides owner needs: a READY prebuild's home,
// and one other live workspaces started from and restore, or have yet to.
func ReferencedArchives(ctx context.Context, q Querier, owner string) ([]string, error) {
	rows, err := q.Query(ctx, `SELECT archive_key FROM workspaces
		WHERE deleted_at IS NULL AND id <> $1 AND starts_with(archive_key, 'archives/' || $1 || '/')
		UNION
		SELECT archive_key FROM prebuilds WHERE status = 'READY' AND starts_with(archive_key, 'archives/' || $1 || '/')`, owner)
	if err != nil {
		return nil, fmt.Errorf("archives of %s in use: %w", owner, err)
	}
	keys, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("archives of %s in use: %w", owner, err)
	}
	return keys, nil
}

// GetWorkspace returns a workspace row, deleted or not.
func GetWorkspace[T any](ctx context.Context, q Querier, id string) (T, error) {
	return collectOne[T](q.Query(ctx, `SELECT `+WorkspaceColumns+` FROM workspaces WHERE id = $1`, id))
}

// MarkArchivesCollected records that a deleted workspace has no archive
// left; ListArchiveOwners leaves it out from then on.
func MarkArchivesCollected(ctx context.Context, q Querier, id string) error {
	_, err := q.Exec(ctx, `INSERT INTO archives_collected (workspace_id) VALUES ($1) ON CONFLICT DO NOTHING`, id)
	return err
}

// RowVersion is the id and version of one workspace row.
type RowVersion struct {
	ID      string
	Version int64
}

// ListUnfinishedVersions returns id and version of every workspace the
// controller still drives (all but those whose deletion completed), so a
// pass can reload only the rows that changed since it last read them.
func ListUnfinishedVersions(ctx context.Context, q Querier) ([]RowVersion, error) {
	rows, err := q.Query(ctx, `SELECT id, version FROM workspaces WHERE phase <> 'DELETED'`)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (RowVersion, error) {
		var v RowVersion
		err := r.Scan(&v.ID, &v.Version)
		return v, err
	})
}

// GetWorkspaces returns the workspaces with the given ids.
func GetWorkspaces[T any](ctx context.Context, q Querier, ids []string) ([]T, error) {
	return collectAll[T](q.Query(ctx, `SELECT `+WorkspaceColumns+` FROM workspaces
		WHERE id = ANY($1)`, ids))
}

// ControllerState is every column the controller owns, as one write.
type ControllerState struct {
	Conditions    any // JSON-encoded
	Phase         string
	Operation     string
	OpID          *string
	OpStartedAt   *time.Time
	OpAttempt     int
	OpBackup      bool
	ArchiveKey    *string
	ArchivedAt    *time.Time
	RestoreMarker *string
	RunID         string
	ArchiveRunID  string
	PreviousRunID string
	// TemplateVersion is the version of the template a start runs.
	TemplateVersion string
	ErrorReason     *string
	ErrorMessage    *string
	ErrorCount      int
	NextAttemptAt   *time.Time
}

// WriteControllerState replaces the controller's columns of workspace id in
// one statement, if the row is still at version and the leader epoch is
// still epoch. The epoch row is share-locked by the statement, so a new
// leader's epoch bump waits for it and every later write of the old epoch
// matches nothing. It returns the new version, or ErrConflict.
func WriteControllerState(ctx context.Context, q Querier, id string, version, epoch int64, s ControllerState) (int64, error) {
	var newVersion int64
	err := q.QueryRow(ctx, `WITH fence AS (
			SELECT epoch FROM coordinator_epoch WHERE epoch = $3 FOR SHARE)
		UPDATE workspaces SET conditions = $4, phase = $5, operation = $6, op_id = $7,
			op_started_at = $8, op_attempt = $9, archive_key = $10, restore_marker = $11,
			error_reason = $12, error_message = $13, error_count = $14, next_attempt_at = $15,
			run_id = $16, archive_run_id = $17, op_backup = $18, template_version = $19, archived_at = $20,
			previous_run_id = $21, observed_at = now()
		WHERE id = $1 AND version = $2 AND EXISTS (SELECT 1 FROM fence)
		RETURNING version`,
		id, version, epoch, s.Conditions, s.Phase, s.Operation, s.OpID, s.OpStartedAt, s.OpAttempt,
		s.ArchiveKey, s.RestoreMarker, s.ErrorReason, s.ErrorMessage, s.ErrorCount, s.NextAttemptAt,
		s.RunID, s.ArchiveRunID, s.OpBackup, s.TemplateVersion, s.ArchivedAt, s.PreviousRunID,
	).Scan(&newVersion)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, ErrConflict
	}
	return newVersion, err
}

// TemplateCount is the number of live workspaces of one template version.
type TemplateCount struct {
	Template string `db:"template" json:"template"`
	Version  string `db:"template_version" json:"version"`
	Count    int    `db:"count" json:"count"`
}

// CountTemplates counts live workspaces per template and version.
func CountTemplates(ctx context.Context, q Querier) ([]TemplateCount, error) {
	return collectAll[TemplateCount](q.Query(ctx, `SELECT template, template_version, count(*) AS count
		FROM workspaces WHERE deleted_at IS NULL
		GROUP BY template, template_version ORDER BY template, template_version`))
}

// ListProgramsRunning returns the workspaces whose program runs and that
// no operation works on: those a snapshot may read.
func ListProgramsRunning[T any](ctx context.Context, q Querier) ([]T, error) {
	return collectAll[T](q.Query(ctx, `SELECT `+WorkspaceColumns+` FROM workspaces
		WHERE phase = 'RUNNING' AND operation = 'NONE' AND run_id <> '' AND deleted_at IS NULL
		ORDER BY id`))
}

// CommitSnapshot records that the archive at key, a snapshot of run runID
// of workspace id built on parent, holds its home as of at: it becomes the
// archive and the restore marker (the volume goes on from it). A nil key
// records an unchanged home: parent holds it as of at. Only while the
// run still runs with no operation, parent is still the archive the volume
// goes on from, and the leader epoch is still epoch; otherwise nothing
// changes and it returns ErrConflict.
func CommitSnapshot(ctx context.Context, q Querier, id, runID string, parent, key *string, at time.Time, epoch int64) error {
	tag, err := q.Exec(ctx, `WITH fence AS (
			SELECT epoch FROM coordinator_epoch WHERE epoch = $6 FOR SHARE)
		UPDATE workspaces SET archive_key = COALESCE($4, archive_key),
			restore_marker = COALESCE($4, restore_marker), archived_at = $5
		WHERE id = $1 AND run_id = $2 AND phase = 'RUNNING' AND operation = 'NONE' AND deleted_at IS NULL
			AND archive_key IS NOT DISTINCT FROM $3
			AND (archive_key IS NULL OR restore_marker = archive_key)
			AND ($4::text IS NOT NULL OR archive_key IS NOT NULL)
			AND (archived_at IS NULL OR archived_at < $5)
			AND EXISTS (SELECT 1 FROM fence)`,
		id, runID, parent, key, at, epoch)
	if err != nil {
		return fmt.Errorf("commit snapshot of %s: %w", id, err)
	}
	if tag.RowsAffected() == 0 {
		return ErrConflict
	}
	return nil
}

// ClaimPoolWorkspace gives a ready workspace of template's warm pool, one
// made at version from prebuild (nil: an empty home), to a new owner as a
// new workspace: owner, name, description, desired state, and the times a
// new workspace has, all in one statement, and out of the pool. None ready
// is ErrNotFound; one another claim holds is skipped.
func ClaimPoolWorkspace[T any](ctx context.Context, q Querier, template, version string, prebuild *string, owner, name, description, desired string) (T, error) {
	return collectOne[T](q.Query(ctx, `UPDATE workspaces SET
			owner_id = $4, name = $5, description = $6, desired_state = $7, desired_by = 'user', desired_at = now(),
			pool_of = NULL, created_at = now(), last_access_at = now(), phase_changed_at = now()
		WHERE id = (SELECT id FROM workspaces
			WHERE pool_of = $1 AND deleted_at IS NULL AND phase = 'STANDBY' AND operation = 'NONE'
			  AND error_count = 0 AND template_version = $2 AND from_prebuild IS NOT DISTINCT FROM $3
			ORDER BY created_at, id LIMIT 1 FOR UPDATE SKIP LOCKED)
		RETURNING `+WorkspaceColumns, template, version, prebuild, owner, name, description, desired))
}

// ListPoolWorkspaces returns the live workspaces of every warm pool,
// oldest first.
func ListPoolWorkspaces[T any](ctx context.Context, q Querier) ([]T, error) {
	return collectAll[T](q.Query(ctx, `SELECT `+WorkspaceColumns+` FROM workspaces
		WHERE pool_of IS NOT NULL AND deleted_at IS NULL ORDER BY created_at, id`))
}
