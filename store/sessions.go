package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Session is a live login, joined with its user.
type Session struct {
	UserID    string
	Username  string
	IsAdmin   bool
	ExpiresAt time.Time
	// WorkspaceID is set on a session of one workspace's host (subdomain
	// mode), handed over from a dashboard session.
	WorkspaceID string
	// TokenID and TokenScope are set when a personal API token, not a
	// login, authenticated the request.
	TokenID    string
	TokenScope string
}

// CreateSession stores a session under the hash of its token; the token
// itself is never stored.
func CreateSession(ctx context.Context, q Querier, tokenHash []byte, userID string, ttl time.Duration) (time.Time, error) {
	var expires time.Time
	err := q.QueryRow(ctx, `INSERT INTO sessions (token_hash, user_id, expires_at)
		VALUES ($1, $2, now() + $3::interval) RETURNING expires_at`, tokenHash, userID, ttl).Scan(&expires)
	if err != nil {
		return time.Time{}, fmt.Errorf("create session: %w", err)
	}
	return expires, nil
}

// SessionByTokenHash returns the unexpired session with that token hash
// that is good for workspaceID's host (empty: the dashboard's), or
// ErrNotFound.
func SessionByTokenHash(ctx context.Context, q Querier, tokenHash []byte, workspaceID string) (Session, error) {
	s := Session{WorkspaceID: workspaceID}
	err := q.QueryRow(ctx, `SELECT u.id, u.username, u.is_admin, s.expires_at
		FROM sessions s JOIN users u ON u.id = s.user_id
		WHERE s.token_hash = $1 AND s.expires_at > now() AND NOT u.disabled
			AND s.workspace_id IS NOT DISTINCT FROM NULLIF($2, '')`, tokenHash, workspaceID).
		Scan(&s.UserID, &s.Username, &s.IsAdmin, &s.ExpiresAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return Session{}, ErrNotFound
	}
	if err != nil {
		return Session{}, fmt.Errorf("select session: %w", err)
	}
	return s, nil
}

// CreateHandoff stores a ticket, valid for ttl, that hands the dashboard
// session sessionHash over to workspaceID's host. It reports false, and
// stores nothing, when that session is not a live dashboard session of a
// user who is not disabled.
func CreateHandoff(ctx context.Context, q Querier, ticketHash, sessionHash []byte, workspaceID string, ttl time.Duration) (bool, error) {
	tag, err := q.Exec(ctx, `INSERT INTO session_handoffs (ticket_hash, session_hash, workspace_id, expires_at)
		SELECT $1, s.token_hash, $3, now() + $4::interval FROM sessions s JOIN users u ON u.id = s.user_id
		WHERE s.token_hash = $2 AND s.workspace_id IS NULL AND s.expires_at > now() AND NOT u.disabled`,
		ticketHash, sessionHash, workspaceID, ttl)
	if err != nil {
		return false, fmt.Errorf("create session handoff: %w", err)
	}
	return tag.RowsAffected() == 1, nil
}

// RedeemHandoff uses up a ticket for workspaceID's host and stores the
// session it hands over under newTokenHash: same user, same expiry as the
// dashboard session, ended with it. A ticket that is unknown, expired,
// used, for another workspace or of a disabled user is ErrNotFound, and is
// gone afterwards whichever it was.
func RedeemHandoff(ctx context.Context, q Querier, ticketHash []byte, workspaceID string, newTokenHash []byte) (Session, error) {
	s := Session{WorkspaceID: workspaceID}
	err := q.QueryRow(ctx, `WITH ticket AS (
			DELETE FROM session_handoffs WHERE ticket_hash = $1
			RETURNING session_hash, workspace_id, expires_at),
		added AS (
			INSERT INTO sessions (token_hash, user_id, expires_at, workspace_id, parent_hash)
			SELECT $3, p.user_id, p.expires_at, t.workspace_id, p.token_hash
			FROM ticket t JOIN sessions p ON p.token_hash = t.session_hash JOIN users pu ON pu.id = p.user_id
			WHERE t.workspace_id = $2 AND t.expires_at > now()
				AND p.workspace_id IS NULL AND p.expires_at > now() AND NOT pu.disabled
			RETURNING user_id, expires_at)
		SELECT u.id, u.username, u.is_admin, a.expires_at FROM added a JOIN users u ON u.id = a.user_id`,
		ticketHash, workspaceID, newTokenHash).Scan(&s.UserID, &s.Username, &s.IsAdmin, &s.ExpiresAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return Session{}, ErrNotFound
	}
	if err != nil {
		return Session{}, fmt.Errorf("redeem session handoff: %w", err)
	}
	return s, nil
}

// DeleteSession ends one session; ending an unknown session is not an error.
func DeleteSession(ctx context.Context, q Querier, tokenHash []byte) error {
	if _, err := q.Exec(ctx, `DELETE FROM sessions WHERE token_hash = $1`, tokenHash); err != nil {
		return fmt.Errorf("delete session: %w", err)
	}
	return nil
}

// DeleteExpiredSessions removes sessions, handoff tickets and logins under
// way at the OpenID Provider past their expiry and returns how many
// sessions went.
func DeleteExpiredSessions(ctx context.Context, q Querier) (int64, error) {
	if _, err := q.Exec(ctx, `DELETE FROM session_handoffs WHERE expires_at <= now()`); err != nil {
		return 0, fmt.Errorf("delete expired session handoffs: %w", err)
	}
	if _, err := q.Exec(ctx, `DELETE FROM oidc_logins WHERE expires_at <= now()`); err != nil {
		return 0, fmt.Errorf("delete expired oidc logins: %w", err)
	}
	tag, err := q.Exec(ctx, `DELETE FROM sessions WHERE expires_at <= now()`)
	if err != nil {
		return 0, fmt.Errorf("delete expired sessions: %w", err)
	}
	return tag.RowsAffected(), nil
}

func isForeignKeyViolation(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "23503"
}
