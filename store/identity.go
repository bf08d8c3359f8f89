package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// UserByOIDC returns the user signed in as subject at issuer, or ErrNotFound.
func UserByOIDC(ctx context.Context, q Querier, issuer, subject string) (User, error) {
	return oneUser(ctx, q, `oidc_issuer = $1 AND oidc_subject = $2`, issuer, subject)
}

// CreateOIDCUser inserts a user known by (issuer, subject), without a
// password. A username another user has is ErrUsernameTaken.
func CreateOIDCUser(ctx context.Context, q Querier, id, username, issuer, subject string, isAdmin bool) (User, error) {
	rows, err := q.Query(ctx, `INSERT INTO users (id, username, password_hash, is_admin, oidc_issuer, oidc_subject)
		VALUES ($1, $2, '', $3, $4, $5) RETURNING `+userColumns, id, username, isAdmin, issuer, subject)
	if err != nil {
		return User{}, fmt.Errorf("insert user: %w", err)
	}
	u, err := pgx.CollectExactlyOneRow(rows, pgx.RowToStructByName[User])
	if IsUniqueViolation(err, "users_username_key") {
		return User{}, fmt.Errorf("%w: %w", ErrUsernameTaken, err)
	}
	if err != nil {
		return User{}, fmt.Errorf("insert user: %w", err)
	}
	return u, nil
}

// SetAdmin grants or withdraws administrator rights. The sessions stay;
// they read the flag from the users row.
func SetAdmin(ctx context.Context, q Querier, userID string, isAdmin bool) error {
	tag, err := q.Exec(ctx, `UPDATE users SET is_admin = $2, updated_at = now() WHERE id = $1`+notSystem, userID, isAdmin)
	if err != nil {
		return fmt.Errorf("set admin: %w", err)
	}
	if tag.RowsAffected() == 0 {
		return ErrNotFound
	}
	return nil
}

// SetDisabled disables or enables a user. Disabling ends every credential
// of the user (RevokeUserAccess) in the caller's transaction and returns
// the ids of the tokens it revoked.
func SetDisabled(ctx context.Context, q Querier, userID string, disabled bool) ([]string, error) {
	tag, err := q.Exec(ctx, `UPDATE users SET disabled = $2, updated_at = now() WHERE id = $1`+notSystem, userID, disabled)
	if err != nil {
		return nil, fmt.Errorf("set disabled: %w", err)
	}
	if tag.RowsAffected() == 0 {
		return nil, ErrNotFound
	}
	if !disabled {
		return nil, nil
	}
	return RevokeUserAccess(ctx, q, userID)
}

// EndUserSessions deletes every session of a user.
func EndUserSessions(ctx context.Context, q Querier, userID string) error {
	if _, err := q.Exec(ctx, `DELETE FROM sessions WHERE user_id = $1`, userID); err != nil {
		return fmt.Errorf("end sessions: %w", err)
	}
	return nil
}

// OIDCLogin is a login under way at the OpenID Provider: what the callback
// checks the provider's answer against, and where the browser goes after.
type OIDCLogin struct {
	Nonce    string
	Verifier string
	// Next is the checked address to go to once logged in.
	Next string
}

// CreateOIDCLogin stores a login under way at the OpenID Provider, valid
// for ttl.
func CreateOIDCLogin(ctx context.Context, q Querier, stateHash []byte, l OIDCLogin, ttl time.Duration) error {
	_, err := q.Exec(ctx, `INSERT INTO oidc_logins (state_hash, nonce, code_verifier, next, expires_at)
		VALUES ($1, $2, $3, $4, now() + $5::interval)`, stateHash, l.Nonce, l.Verifier, l.Next, ttl)
	if err != nil {
		return fmt.Errorf("create oidc login: %w", err)
	}
	return nil
}

// TakeOIDCLogin uses up the login under way with that state; an unknown,
// used or expired one is ErrNotFound.
func TakeOIDCLogin(ctx context.Context, q Querier, stateHash []byte) (OIDCLogin, error) {
	var l OIDCLogin
	var live bool
	err := q.QueryRow(ctx, `DELETE FROM oidc_logins WHERE state_hash = $1 RETURNING nonce, code_verifier, next, expires_at > now()`, stateHash).
		Scan(&l.Nonce, &l.Verifier, &l.Next, &live)
	if errors.Is(err, pgx.ErrNoRows) || (err == nil && !live) {
		return OIDCLogin{}, ErrNotFound
	}
	if err != nil {
		return OIDCLogin{}, fmt.Errorf("take oidc login: %w", err)
	}
	return l, nil
}

// SetGroups records the groups a user's identity provider gave at their
// last login (nil: none).
func SetGroups(ctx context.Context, q Querier, userID string, groups []string) error {
	if groups == nil {
		groups = []string{}
	}
	tag, err := q.Exec(ctx, `UPDATE users SET groups = $2 WHERE id = $1`, userID, groups)
	if err != nil {
		return err
	}
	if tag.RowsAffected() == 0 {
		return ErrNotFound
	}
	return nil
}

// Groups returns the groups recorded for a user.
func Groups(ctx context.Context, q Querier, userID string) ([]string, error) {
	var groups []string
	err := q.QueryRow(ctx, `SELECT groups FROM users WHERE id = $1`, userID).Scan(&groups)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, ErrNotFound
	}
	return groups, err
}
