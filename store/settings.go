package store

import (
	"context"
	"crypto/cipher"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"golang.org/x/crypto/chacha20poly1305"
)

// FirstStartSettings are a user's settings for the first start of their
// workspaces. GitCredential is a secret.
type FirstStartSettings struct {
	DotfilesRepository string
	GitCredential      string
}

// GitCredentialKeyName names the deployment key that seals every user's
// git credential in users.git_credential.
const GitCredentialKeyName = "git-credential"

// sealedPrefix starts a sealed credential in the column: "sealed:v1:" and
// the base64 of the nonce and XChaCha20-Poly1305 ciphertext, the user's id
// as associated data, so a value copied into another user's row does not
// open. A value without it is a credential written before sealing, which
// SealGitCredentials seals at server start.
const sealedPrefix = "sealed:v1:"

// ErrCredentialUnreadable reports a stored credential that does not open
// with the deployment's key for its user: copied from another row, or
// sealed by another deployment.
var ErrCredentialUnreadable = errors.New("git credential does not open with this deployment's key")

// GetFirstStartSettings reads user id's first-start settings.
func GetFirstStartSettings(ctx context.Context, q Querier, id string) (FirstStartSettings, error) {
	var s FirstStartSettings
	var stored string
	err := q.QueryRow(ctx, `SELECT dotfiles_repository, git_credential FROM users WHERE id = $1`, id).
		Scan(&s.DotfilesRepository, &stored)
	if errors.Is(err, pgx.ErrNoRows) {
		return s, ErrNotFound
	}
	if err != nil {
		return s, err
	}
	s.GitCredential, err = openCredential(ctx, q, id, stored)
	return s, err
}

// SetFirstStartSettings changes user id's first-start settings; nil leaves
// a field as it is. The credential is stored sealed (empty clears it).
func SetFirstStartSettings(ctx context.Context, q Querier, id string, dotfiles, credential *string) (FirstStartSettings, error) {
	var sealed *string
	if credential != nil {
		v, err := sealCredential(ctx, q, id, *credential)
		if err != nil {
			return FirstStartSettings{}, err
		}
		sealed = &v
	}
	var s FirstStartSettings
	var stored string
	err := q.QueryRow(ctx, `UPDATE users SET dotfiles_repository = COALESCE($2, dotfiles_repository),
			git_credential = COALESCE($3, git_credential)
		WHERE id = $1 RETURNING dotfiles_repository, git_credential`, id, dotfiles, sealed).
		Scan(&s.DotfilesRepository, &stored)
	if errors.Is(err, pgx.ErrNoRows) {
		return s, ErrNotFound
	}
	if err != nil {
		return s, err
	}
	s.GitCredential, err = openCredential(ctx, q, id, stored)
	return s, err
}

// SealGitCredentials seals every credential stored before they were
// sealed and returns how many it sealed. The server runs it right after
// the migrations, at every start (a numbered migration has no key); a row
// changed meanwhile is left to the change.
func SealGitCredentials(ctx context.Context, q Querier) (int, error) {
	// The key exists from the first start on, like the others.
	if _, err := credentialCipher(ctx, q); err != nil {
		return 0, err
	}
	rows, err := q.Query(ctx, `SELECT id, git_credential FROM users
		WHERE git_credential <> '' AND NOT starts_with(git_credential, $1)`, sealedPrefix)
	if err != nil {
		return 0, fmt.Errorf("find unsealed git credentials: %w", err)
	}
	type legacy struct{ id, plain string }
	found, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (legacy, error) {
		var l legacy
		return l, r.Scan(&l.id, &l.plain)
	})
	if err != nil {
		return 0, fmt.Errorf("find unsealed git credentials: %w", err)
	}
	n := 0
	for _, l := range found {
		sealed, err := sealCredential(ctx, q, l.id, l.plain)
		if err != nil {
			return n, err
		}
		tag, err := q.Exec(ctx, `UPDATE users SET git_credential = $2 WHERE id = $1 AND git_credential = $3`, l.id, sealed, l.plain)
		if err != nil {
			return n, fmt.Errorf("seal git credential of %s: %w", l.id, err)
		}
		n += int(tag.RowsAffected())
	}
	return n, nil
}

// credentialCipher is the deployment's git credential key, created on
// first use like every deployment key.
func credentialCipher(ctx context.Context, q Querier) (cipher.AEAD, error) {
	key, err := DeploymentKey(ctx, q, GitCredentialKeyName)
	if err != nil {
		return nil, err
	}
	aead, err := chacha20poly1305.NewX(key[:chacha20poly1305.KeySize])
	if err != nil {
		return nil, fmt.Errorf("git credential key: %w", err)
	}
	return aead, nil
}

// associated binds a sealed credential to its user.
func associated(userID string) []byte { return []byte("codehub git credential of user " + userID) }

func sealCredential(ctx context.Context, q Querier, userID, plain string) (string, error) {
	if plain == "" {
		return "", nil
	}
	aead, err := credentialCipher(ctx, q)
	if err != nil {
		return "", err
	}
	nonce := make([]byte, aead.NonceSize())
	if _, err := rand.Read(nonce); err != nil {
		return "", fmt.Errorf("seal git credential: %w", err)
	}
	return sealedPrefix + base64.RawStdEncoding.EncodeToString(aead.Seal(nonce, nonce, []byte(plain), associated(userID))), nil
}

func openCredential(ctx context.Context, q Querier, userID, stored string) (string, error) {
	body, sealed := strings.CutPrefix(stored, sealedPrefix)
	if !sealed {
		// Empty, or written before sealing and not yet sealed.
		return stored, nil
	}
	aead, err := credentialCipher(ctx, q)
	if err != nil {
		return "", err
	}
	raw, err := base64.RawStdEncoding.DecodeString(body)
	if err != nil || len(raw) < aead.NonceSize() {
		return "", fmt.Errorf("user %s: %w", userID, ErrCredentialUnreadable)
	}
	plain, err := aead.Open(nil, raw[:aead.NonceSize()], raw[aead.NonceSize():], associated(userID))
	if err != nil {
		return "", fmt.Errorf("user %s: %w", userID, ErrCredentialUnreadable)
	}
	return string(plain), nil
}
