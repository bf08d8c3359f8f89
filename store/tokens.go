package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// Token is one personal API token, without its secret.
type Token struct {
	ID         string     `db:"id"`
	UserID     string     `db:"user_id"`
	Name       string     `db:"name"`
	Scope      string     `db:"scope"`
	IsAdmin    bool       `db:"is_admin"`
	CreatedAt  time.Time  `db:"created_at"`
	ExpiresAt  time.Time  `db:"expires_at"`
	LastUsedAt *time.Time `db:"last_used_at"`
}

const tokenColumns = `id, user_id, name, scope, is_admin, created_at, expires_at, last_used_at`

// CreateToken stores t (its id, user, name, scope and admin flag) under the
// hash of its secret, valid for ttl from now (database clock).
func CreateToken(ctx context.Context, q Querier, t Token, secretHash []byte, ttl time.Duration) (Token, error) {
	rows, err := q.Query(ctx, `INSERT INTO api_tokens (id, user_id, name, secret_hash, scope, is_admin, expires_at)
		VALUES ($1, $2, $3, $4, $5, $6, now() + $7::interval) RETURNING `+tokenColumns,
		t.ID, t.UserID, t.Name, secretHash, t.Scope, t.IsAdmin, ttl)
	if err != nil {
		return Token{}, fmt.Errorf("insert token: %w", err)
	}
	created, err := pgx.CollectExactlyOneRow(rows, pgx.RowToStructByName[Token])
	if err != nil {
		return Token{}, fmt.Errorf("insert token: %w", err)
	}
	return created, nil
}

// TokensOfUser returns the user's tokens, expired ones included, newest
// first.
func TokensOfUser(ctx context.Context, q Querier, userID string) ([]Token, error) {
	rows, err := q.Query(ctx, `SELECT `+tokenColumns+` FROM api_tokens WHERE user_id = $1 ORDER BY created_at DESC, id DESC`, userID)
	if err != nil {
		return nil, fmt.Errorf("list tokens: %w", err)
	}
	tokens, err := pgx.CollectRows(rows, pgx.RowToStructByName[Token])
	if err != nil {
		return nil, fmt.Errorf("list tokens: %w", err)
	}
	return tokens, nil
}

// DeleteToken revokes the user's token id; a token that does not exist or
// belongs to someone else is ErrNotFound.
func DeleteToken(ctx context.Context, q Querier, id, userID string) error {
	tag, err := q.Exec(ctx, `DELETE FROM api_tokens WHERE id = $1 AND user_id = $2`, id, userID)
	if err != nil {
		return fmt.Errorf("delete token: %w", err)
	}
	if tag.RowsAffected() == 0 {
		return ErrNotFound
	}
	return nil
}

// TokenSession is an unexpired token joined with its user.
type TokenSession struct {
	Token
	Username    string
	UserIsAdmin bool
}

// TokenBySecretHash returns the unexpired token with that secret hash, or
// ErrNotFound; a disabled user's token is ErrNotFound too, whether or not
// the disable has deleted it yet.
func TokenBySecretHash(ctx context.Context, q Querier, secretHash []byte) (TokenSession, error) {
	var s TokenSession
	err := q.QueryRow(ctx, `SELECT t.id, t.user_id, t.name, t.scope, t.is_admin, t.created_at, t.expires_at, t.last_used_at,
			u.username, u.is_admin
		FROM api_tokens t JOIN users u ON u.id = t.user_id
		WHERE t.secret_hash = $1 AND t.expires_at > now() AND NOT u.disabled`, secretHash).
		Scan(&s.ID, &s.UserID, &s.Name, &s.Scope, &s.IsAdmin, &s.CreatedAt, &s.ExpiresAt, &s.LastUsedAt,
			&s.Username, &s.UserIsAdmin)
	if errors.Is(err, pgx.ErrNoRows) {
		return TokenSession{}, ErrNotFound
	}
	if err != nil {
		return TokenSession{}, fmt.Errorf("select token: %w", err)
	}
	return s, nil
}

// TouchToken records that the token was just used.
func TouchToken(ctx context.Context, q Querier, id string) error {
	if _, err := q.Exec(ctx, `UPDATE api_tokens SET last_used_at = now() WHERE id = $1`, id); err != nil {
		return fmt.Errorf("touch token: %w", err)
	}
	return nil
}

// CreateTokenGrant stores a one-time code, valid for ttl, that the user
// approved to be exchanged for a token called name by whoever holds the
// verifier of challenge.
func CreateTokenGrant(ctx context.Context, q Querier, codeHash []byte, userID, name, challenge string, ttl time.Duration) error {
	if _, err := q.Exec(ctx, `INSERT INTO api_token_grants (code_hash, user_id, name, code_challenge, expires_at)
		VALUES ($1, $2, $3, $4, now() + $5::interval)`, codeHash, userID, name, challenge, ttl); err != nil {
		return fmt.Errorf("create token grant: %w", err)
	}
	return nil
}

// TokenGrant is an approved CLI login taken from the database.
type TokenGrant struct {
	UserID, Name, Challenge string
}

// RedeemTokenGrant uses up a code and returns what it was approved for;
// the caller checks the verifier against its challenge. A code that is
// unknown, used, expired or approved by a user since disabled is
// ErrNotFound, and is gone afterwards whichever it was.
func RedeemTokenGrant(ctx context.Context, q Querier, codeHash []byte) (TokenGrant, error) {
	var g TokenGrant
	err := q.QueryRow(ctx, `WITH used AS (DELETE FROM api_token_grants WHERE code_hash = $1 RETURNING user_id, name, code_challenge, expires_at)
		SELECT g.user_id, g.name, g.code_challenge FROM used g JOIN users u ON u.id = g.user_id
		WHERE g.expires_at > now() AND NOT u.disabled`, codeHash).Scan(&g.UserID, &g.Name, &g.Challenge)
	if errors.Is(err, pgx.ErrNoRows) {
		return TokenGrant{}, ErrNotFound
	}
	if err != nil {
		return TokenGrant{}, fmt.Errorf("redeem token grant: %w", err)
	}
	return g, nil
}

// RevokeUserAccess ends every credential of a user: sessions (and with
// them the sessions handed to workspace hosts and their pending handoff
// tickets), pending CLI codes and API tokens. It returns the ids of the
// tokens it deleted, for the audit log.
func RevokeUserAccess(ctx context.Context, q Querier, userID string) ([]string, error) {
	if err := EndUserSessions(ctx, q, userID); err != nil {
		return nil, err
	}
	return RevokeUserTokens(ctx, q, userID)
}

// RevokeUserTokens deletes a user's API tokens and pending CLI codes and
// returns the ids of the tokens.
func RevokeUserTokens(ctx context.Context, q Querier, userID string) ([]string, error) {
	if _, err := q.Exec(ctx, `DELETE FROM api_token_grants WHERE user_id = $1`, userID); err != nil {
		return nil, fmt.Errorf("delete token grants: %w", err)
	}
	rows, err := q.Query(ctx, `DELETE FROM api_tokens WHERE user_id = $1 RETURNING id`, userID)
	if err != nil {
		return nil, fmt.Errorf("delete tokens: %w", err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("delete tokens: %w", err)
	}
	return ids, nil
}

// DeleteExpiredTokens removes token grants past their expiry and tokens
// expired for longer than keep (their owners saw them listed as expired
// meanwhile), and returns how many tokens went.
func DeleteExpiredTokens(ctx context.Context, q Querier, keep time.Duration) (int64, error) {
	if _, err := q.Exec(ctx, `DELETE FROM api_token_grants WHERE expires_at <= now()`); err != nil {
		return 0, fmt.Errorf("delete expired token grants: %w", err)
	}
	tag, err := q.Exec(ctx, `DELETE FROM api_tokens WHERE expires_at <= now() - $1::interval`, keep)
	if err != nil {
		return 0, fmt.Errorf("delete expired tokens: %w", err)
	}
	return tag.RowsAffected(), nil
}
