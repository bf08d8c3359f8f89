package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// User is one row of the users table.
type User struct {
	ID           string     `db:"id"`
	Username     string     `db:"username"`
	PasswordHash string     `db:"password_hash"`
	IsAdmin      bool       `db:"is_admin"`
	FailedLogins int        `db:"failed_logins"`
	LockedUntil  *time.Time `db:"locked_until"`
	Disabled     bool       `db:"disabled"`
	OIDCIssuer   *string    `db:"oidc_issuer"`
	OIDCSubject  *string    `db:"oidc_subject"`
	CreatedAt    time.Time  `db:"created_at"`
	UpdatedAt    time.Time  `db:"updated_at"`
}

// ErrUsernameTaken reports that another user already has the username.
var ErrUsernameTaken = errors.New("store: username taken")

const userColumns = `id, username, password_hash, is_admin, failed_logins, locked_until, disabled, oidc_issuer, oidc_subject, created_at, updated_at`

// CreateUser inserts a user; a duplicate username is ErrUsernameTaken.
func CreateUser(ctx context.Context, q Querier, id, username, passwordHash string, isAdmin bool) (User, error) {
	rows, err := q.Query(ctx, `INSERT INTO users (id, username, password_hash, is_admin)
		VALUES ($1, $2, $3, $4) RETURNING `+userColumns, id, username, passwordHash, isAdmin)
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

// PrebuildOwnerID is the user that owns the workspaces building prebuilt
// homes (migration 027). Nobody logs in as it, and user management does
// not see it: it is found by id alone.
const PrebuildOwnerID = "codehub-prebuilds"

// notSystem excludes PrebuildOwnerID from a query of users.
const notSystem = ` AND id <> '` + PrebuildOwnerID + `'`

func oneUser(ctx context.Context, q Querier, where string, args ...any) (User, error) {
	rows, err := q.Query(ctx, `SELECT `+userColumns+` FROM users WHERE `+where, args...)
	if err != nil {
		return User{}, fmt.Errorf("select user: %w", err)
	}
	u, err := pgx.CollectExactlyOneRow(rows, pgx.RowToStructByName[User])
	if errors.Is(err, pgx.ErrNoRows) {
		return User{}, ErrNotFound
	}
	if err != nil {
		return User{}, fmt.Errorf("select user: %w", err)
	}
	return u, nil
}

// UserByUsername returns the user with that username or ErrNotFound.
func UserByUsername(ctx context.Context, q Querier, username string) (User, error) {
	return oneUser(ctx, q, `username = $1`+notSystem, username)
}

// UserByID returns the user with that id or ErrNotFound.
func UserByID(ctx context.Context, q Querier, id string) (User, error) {
	return oneUser(ctx, q, `id = $1`, id)
}

// ListUsers returns every user ordered by username.
func ListUsers(ctx context.Context, q Querier) ([]User, error) {
	rows, err := q.Query(ctx, `SELECT `+userColumns+` FROM users WHERE true`+notSystem+` ORDER BY username`)
	if err != nil {
		return nil, fmt.Errorf("list users: %w", err)
	}
	users, err := pgx.CollectRows(rows, pgx.RowToStructByName[User])
	if err != nil {
		return nil, fmt.Errorf("list users: %w", err)
	}
	return users, nil
}

// CountUsers returns how many users exist.
func CountUsers(ctx context.Context, q Querier) (int, error) {
	var n int
	if err := q.QueryRow(ctx, `SELECT count(*) FROM users WHERE true`+notSystem).Scan(&n); err != nil {
		return 0, fmt.Errorf("count users: %w", err)
	}
	return n, nil
}

// ErrSingleSignOn reports a user who signs in through OIDC and so has no
// password to set.
var ErrSingleSignOn = errors.New("store: user signs in through single sign-on")

// SetPassword replaces a user's password hash, clears its login backoff and
// ends its sessions, so a changed password locks out whoever had the old one.
// A user signing in through OIDC is ErrSingleSignOn: a password would open
// a second way in that the provider does not control.
func SetPassword(ctx context.Context, q Querier, username, passwordHash string) error {
	var id string
	err := q.QueryRow(ctx, `UPDATE users SET password_hash = $2, failed_logins = 0, locked_until = NULL, updated_at = now()
		WHERE username = $1 AND oidc_subject IS NULL`+notSystem+` RETURNING id`, username, passwordHash).Scan(&id)
	if errors.Is(err, pgx.ErrNoRows) {
		if _, err := UserByUsername(ctx, q, username); err == nil {
			return ErrSingleSignOn
		}
		return ErrNotFound
	}
	if err != nil {
		return fmt.Errorf("set password: %w", err)
	}
	if _, err := q.Exec(ctx, `DELETE FROM sessions WHERE user_id = $1`, id); err != nil {
		return fmt.Errorf("end sessions: %w", err)
	}
	if _, err := q.Exec(ctx, `DELETE FROM login_throttle WHERE user_id = $1`, id); err != nil {
		return fmt.Errorf("clear login backoff: %w", err)
	}
	return nil
}

// DeleteUser removes a user and, by cascade, its sessions. A user who still
// owns workspaces (even deleted ones, whose archives GC may still need) is
// refused by the foreign key; the error wraps ErrConflict then.
func DeleteUser(ctx context.Context, q Querier, username string) error {
	tag, err := q.Exec(ctx, `DELETE FROM users WHERE username = $1`+notSystem, username)
	if isForeignKeyViolation(err) {
		return fmt.Errorf("user %s still owns workspaces: %w", username, ErrConflict)
	}
	if err != nil {
		return fmt.Errorf("delete user: %w", err)
	}
	if tag.RowsAffected() == 0 {
		return ErrNotFound
	}
	return nil
}

// RecordLoginFailure counts one failed login and returns the new count; the
// caller derives the backoff from it and stores it with LockUser.
func RecordLoginFailure(ctx context.Context, q Querier, userID string) (int, error) {
	var n int
	err := q.QueryRow(ctx, `UPDATE users SET failed_logins = failed_logins + 1 WHERE id = $1 RETURNING failed_logins`, userID).Scan(&n)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, ErrNotFound
	}
	if err != nil {
		return 0, fmt.Errorf("record login failure: %w", err)
	}
	return n, nil
}

// LockUser refuses logins of the user until now + d (database clock). It
// never shortens an existing lock.
func LockUser(ctx context.Context, q Querier, userID string, d time.Duration) error {
	_, err := q.Exec(ctx, `UPDATE users SET locked_until = GREATEST(coalesce(locked_until, now()), now() + $2::interval)
		WHERE id = $1`, userID, d)
	if err != nil {
		return fmt.Errorf("lock user: %w", err)
	}
	return nil
}

// ResetLoginFailures clears the backoff after a successful login.
func ResetLoginFailures(ctx context.Context, q Querier, userID string) error {
	_, err := q.Exec(ctx, `UPDATE users SET failed_logins = 0, locked_until = NULL
		WHERE id = $1 AND (failed_logins <> 0 OR locked_until IS NOT NULL)`, userID)
	if err != nil {
		return fmt.Errorf("reset login failures: %w", err)
	}
	return nil
}

// RecordClientLoginFailure counts one failed login of a user from a client
// address and returns the new count with the lock already in force, if any.
func RecordClientLoginFailure(ctx context.Context, q Querier, userID, client string) (int, *time.Time, error) {
	var n int
	var locked *time.Time
	err := q.QueryRow(ctx, `INSERT INTO login_throttle (user_id, client, failures) VALUES ($1, $2, 1)
		ON CONFLICT (user_id, client) DO UPDATE SET failures = login_throttle.failures + 1, updated_at = now()
		RETURNING failures, locked_until`, userID, client).Scan(&n, &locked)
	if err != nil {
		return 0, nil, fmt.Errorf("record login failure: %w", err)
	}
	return n, locked, nil
}

// ClientLoginLock returns until when logins of a user from a client
// address are refused, or nil.
func ClientLoginLock(ctx context.Context, q Querier, userID, client string) (*time.Time, error) {
	var locked *time.Time
	err := q.QueryRow(ctx, `SELECT locked_until FROM login_throttle WHERE user_id = $1 AND client = $2`, userID, client).Scan(&locked)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read login lock: %w", err)
	}
	return locked, nil
}

// LockClient refuses logins of the user from the client address until
// now + d (database clock), never shortening an existing lock.
func LockClient(ctx context.Context, q Querier, userID, client string, d time.Duration) error {
	_, err := q.Exec(ctx, `UPDATE login_throttle SET locked_until = GREATEST(coalesce(locked_until, now()), now() + $3::interval)
		WHERE user_id = $1 AND client = $2`, userID, client, d)
	if err != nil {
		return fmt.Errorf("lock login from client: %w", err)
	}
	return nil
}

// ResetClientLoginFailures forgets a client address's failures after a
// successful login from it.
func ResetClientLoginFailures(ctx context.Context, q Querier, userID, client string) error {
	if _, err := q.Exec(ctx, `DELETE FROM login_throttle WHERE user_id = $1 AND client = $2`, userID, client); err != nil {
		return fmt.Errorf("reset login failures: %w", err)
	}
	return nil
}
