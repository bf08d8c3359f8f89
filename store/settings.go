package store

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"
)

// FirstStartSettings are a user's settings for the first start of their
// workspaces. GitCredential is a secret.
type FirstStartSettings struct {
	DotfilesRepository string `db:"dotfiles_repository"`
	GitCredential      string `db:"git_credential"`
}

// GetFirstStartSettings reads user id's first-start settings.
func GetFirstStartSettings(ctx context.Context, q Querier, id string) (FirstStartSettings, error) {
	var s FirstStartSettings
	err := q.QueryRow(ctx, `SELECT dotfiles_repository, git_credential FROM users WHERE id = $1`, id).
		Scan(&s.DotfilesRepository, &s.GitCredential)
	if errors.Is(err, pgx.ErrNoRows) {
		return s, ErrNotFound
	}
	return s, err
}

// SetFirstStartSettings changes user id's first-start settings; nil leaves
// a field as it is.
func SetFirstStartSettings(ctx context.Context, q Querier, id string, dotfiles, credential *string) (FirstStartSettings, error) {
	var s FirstStartSettings
	err := q.QueryRow(ctx, `UPDATE users SET dotfiles_repository = COALESCE($2, dotfiles_repository),
			git_credential = COALESCE($3, git_credential)
		WHERE id = $1 RETURNING dotfiles_repository, git_credential`, id, dotfiles, credential).
		Scan(&s.DotfilesRepository, &s.GitCredential)
	if errors.Is(err, pgx.ErrNoRows) {
		return s, ErrNotFound
	}
	return s, err
}
