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

// SessionByTokenHash returns the unexpired session with that token hash, or
// ErrNotFound.
func SessionByTokenHash(ctx context.Context, q Querier, tokenHash []byte) (Session, error) {
	var s Session
	err := q.QueryRow(ctx, `SELECT u.id, u.username, u.is_admin, s.expires_at
		FROM sessions s JOIN users u ON u.id = s.user_id
		WHERE s.token_hash = $1 AND s.expires_at > now()`, tokenHash).
		Scan(&s.UserID, &s.Username, &s.IsAdmin, &s.ExpiresAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return Session{}, ErrNotFound
	}
	if err != nil {
		return Session{}, fmt.Errorf("select session: %w", err)
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

// DeleteExpiredSessions removes sessions past their expiry and returns how many.
func DeleteExpiredSessions(ctx context.Context, q Querier) (int64, error) {
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
