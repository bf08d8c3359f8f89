package identity

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"

	"golang.org/x/crypto/argon2"
)

// Argon2id parameters: the OWASP minimum for argon2id (19 MiB, 2 passes, 1
// lane), so a login costs tens of milliseconds on one core and several
// replicas can verify in parallel without exhausting memory.
const (
	argonMemoryKiB = 19 * 1024
	argonTime      = 2
	argonThreads   = 1
	argonKeyLen    = 32
	argonSaltLen   = 16
)

// maxParallelVerifications bounds the password checks running at once in
// this process, and with them the memory logins can take (argonMemoryKiB
// each): unknown usernames are checked too and no backoff covers them, so
// without a bound a burst of logins could exhaust the server's memory.
const maxParallelVerifications = 8

var verificationSlots = make(chan struct{}, maxParallelVerifications)

// verifyPasswordBounded is VerifyPassword waiting for one of the
// verification slots; it gives up when ctx ends first.
func verifyPasswordBounded(ctx context.Context, hash, password string) (bool, error) {
	select {
	case verificationSlots <- struct{}{}:
	case <-ctx.Done():
		return false, fmt.Errorf("wait to verify password: %w", ctx.Err())
	}
	defer func() { <-verificationSlots }()
	return VerifyPassword(hash, password)
}

// ErrBadHash reports a stored password hash that is not one of ours.
var ErrBadHash = errors.New("unrecognised password hash")

// HashPassword returns the PHC-format argon2id hash of password with a fresh salt.
func HashPassword(password string) (string, error) {
	salt := make([]byte, argonSaltLen)
	if _, err := rand.Read(salt); err != nil {
		return "", fmt.Errorf("read salt: %w", err)
	}
	key := argon2.IDKey([]byte(password), salt, argonTime, argonMemoryKiB, argonThreads, argonKeyLen)
	enc := base64.RawStdEncoding
	return fmt.Sprintf("$argon2id$v=%d$m=%d,t=%d,p=%d$%s$%s",
		argon2.Version, argonMemoryKiB, argonTime, argonThreads, enc.EncodeToString(salt), enc.EncodeToString(key)), nil
}

// VerifyPassword reports whether password matches hash, using the parameters
// recorded in the hash so older hashes keep verifying after a change of cost.
func VerifyPassword(hash, password string) (bool, error) {
	parts := strings.Split(hash, "$")
	if len(parts) != 6 || parts[1] != "argon2id" {
		return false, ErrBadHash
	}
	var version int
	if _, err := fmt.Sscanf(parts[2], "v=%d", &version); err != nil || version != argon2.Version {
		return false, ErrBadHash
	}
	var mem, passes uint32
	var threads uint8
	if _, err := fmt.Sscanf(parts[3], "m=%d,t=%d,p=%d", &mem, &passes, &threads); err != nil {
		return false, ErrBadHash
	}
	enc := base64.RawStdEncoding
	salt, err := enc.DecodeString(parts[4])
	if err != nil {
		return false, ErrBadHash
	}
	want, err := enc.DecodeString(parts[5])
	if err != nil || len(want) == 0 {
		return false, ErrBadHash
	}
	got := argon2.IDKey([]byte(password), salt, passes, mem, threads, uint32(len(want)))
	return subtle.ConstantTimeCompare(got, want) == 1, nil
}
