package store

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// AuditEvent is one row of the audit_events table.
type AuditEvent struct {
	ID            int64     `db:"id"`
	At            time.Time `db:"at"`
	ActorUserID   string    `db:"actor_user_id"`
	ActorUsername string    `db:"actor_username"`
	ActorTokenID  string    `db:"actor_token_id"`
	ActorAddress  string    `db:"actor_address"`
	Action        string    `db:"action"`
	TargetType    string    `db:"target_type"`
	TargetID      string    `db:"target_id"`
	TargetName    string    `db:"target_name"`
	Outcome       string    `db:"outcome"`
	Detail        string    `db:"detail"`
}

// AuditFilter selects audit events, newest first. Zero fields select all.
type AuditFilter struct {
	// UserID matches events the user did and events done to the user.
	UserID string
	// WorkspaceID matches events done to the workspace.
	WorkspaceID string
	Since       time.Time
	Until       time.Time
	// BeforeID pages on: only events older than that id.
	BeforeID int64
	Limit    int
}

const auditColumns = `id, at, actor_user_id, actor_username, actor_token_id, actor_address,
	action, target_type, target_id, target_name, outcome, detail`

// InsertAuditEvent appends an event; its id and time come from the database.
func InsertAuditEvent(ctx context.Context, q Querier, e AuditEvent) error {
	_, err := q.Exec(ctx, `INSERT INTO audit_events (actor_user_id, actor_username, actor_token_id, actor_address,
			action, target_type, target_id, target_name, outcome, detail)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)`,
		e.ActorUserID, e.ActorUsername, e.ActorTokenID, e.ActorAddress,
		e.Action, e.TargetType, e.TargetID, e.TargetName, e.Outcome, e.Detail)
	if err != nil {
		return fmt.Errorf("insert audit event: %w", err)
	}
	return nil
}

// ListAuditEvents returns the events f selects, newest first.
func ListAuditEvents(ctx context.Context, q Querier, f AuditFilter) ([]AuditEvent, error) {
	var since, until *time.Time
	if !f.Since.IsZero() {
		since = &f.Since
	}
	if !f.Until.IsZero() {
		until = &f.Until
	}
	rows, err := q.Query(ctx, `SELECT `+auditColumns+` FROM audit_events
		WHERE ($1 = '' OR actor_user_id = $1 OR (target_type = 'user' AND target_id = $1))
			AND ($2 = '' OR (target_type = 'workspace' AND target_id = $2))
			AND ($3::timestamptz IS NULL OR at >= $3)
			AND ($4::timestamptz IS NULL OR at < $4)
			AND ($5 = 0 OR id < $5)
		ORDER BY id DESC LIMIT $6`, f.UserID, f.WorkspaceID, since, until, f.BeforeID, f.Limit)
	if err != nil {
		return nil, fmt.Errorf("list audit events: %w", err)
	}
	events, err := pgx.CollectRows(rows, pgx.RowToStructByName[AuditEvent])
	if err != nil {
		return nil, fmt.Errorf("list audit events: %w", err)
	}
	return events, nil
}

// DeleteAuditEventsBefore removes events older than cutoff and returns how
// many went.
func DeleteAuditEventsBefore(ctx context.Context, q Querier, cutoff time.Time) (int64, error) {
	tag, err := q.Exec(ctx, `DELETE FROM audit_events WHERE at < $1`, cutoff)
	if err != nil {
		return 0, fmt.Errorf("prune audit events: %w", err)
	}
	return tag.RowsAffected(), nil
}
