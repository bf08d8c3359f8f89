package workspace

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
)

// UpstreamTokens derives each workspace's upstream token: the secret its
// program demands on every request (code-server's session cookie) and only
// the proxy sends. Deriving it from one deployment key means nothing per
// workspace is stored, every replica computes the same token, and a token
// read inside one workspace opens no other.
type UpstreamTokens struct {
	key []byte
}

// ErrShortKey reports a deployment key too short to derive tokens from.
var ErrShortKey = errors.New("workspace: upstream token key shorter than 32 bytes")

// NewUpstreamTokens derives tokens from key, which must have at least 32
// random bytes.
func NewUpstreamTokens(key []byte) (*UpstreamTokens, error) {
	if len(key) < 32 {
		return nil, ErrShortKey
	}
	return &UpstreamTokens{key: append([]byte(nil), key...)}, nil
}

// For returns the token of workspace id: 43 URL-safe characters, which
// code-server compares verbatim (its argon2 path needs a "$argon" prefix,
// its login form a hex digest: neither matches).
func (t *UpstreamTokens) For(id string) string {
	m := hmac.New(sha256.New, t.key)
	m.Write([]byte("codehub upstream token v1\x00"))
	m.Write([]byte(id))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}
