package store

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// SetOIDCSession keeps the ID token a single sign-on session was started
// with; it is deleted with the session.
func SetOIDCSession(ctx context.Context, q Querier, sessionHash []byte, idToken string) error {
	_, err := q.Exec(ctx, `INSERT INTO oidc_sessions (session_hash, id_token) VALUES ($1, $2)
		ON CONFLICT (session_hash) DO UPDATE SET id_token = excluded.id_token`, sessionHash, idToken)
	if err != nil {
		return fmt.Errorf("store oidc session: %w", err)
	}
	return nil
}

// OIDCSessionIDToken returns the ID token of a live single sign-on
// session, or ErrNotFound (a password session, or an ended one).
func OIDCSessionIDToken(ctx context.Context, q Querier, sessionHash []byte) (string, error) {
	var idToken string
	err := q.QueryRow(ctx, `SELECT o.id_token FROM oidc_sessions o JOIN sessions s ON s.token_hash = o.session_hash
		WHERE o.session_hash = $1 AND s.expires_at > now()`, sessionHash).Scan(&idToken)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", ErrNotFound
	}
	if err != nil {
		return "", fmt.Errorf("select oidc session: %w", err)
	}
	return idToken, nil
}
