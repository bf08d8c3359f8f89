package workspace

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"io"
)

// UpstreamTokens derives each workspace's upstream token: the secret its
// program demands on every request (code-server's session cookie) and only
// the proxy sends. Deriving it from one deployment key means no secret per
// workspace is stored, every replica computes the same token, and a token
// read inside one workspace opens no other. Each start of a workspace is a
// new run with a new token, so a token that reached the wrong program (a
// stale route to a port another workspace now holds) opens nothing once
// its workspace starts again.
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

// For returns the token of run runID of workspace id: 43 URL-safe
// characters, which code-server compares verbatim (its argon2 path needs a
// "$argon" prefix, its login form a hex digest: neither matches). A
// workspace last started before runs were recorded has no run id; it keeps
// the token it was started with until its next start.
func (t *UpstreamTokens) For(id, runID string) string {
	m := hmac.New(sha256.New, t.key)
	if runID == "" {
		m.Write([]byte("codehub upstream token v1\x00"))
		m.Write([]byte(id))
	} else {
		// Both parts are length-prefixed: no pair of strings derives
		// another pair's token.
		m.Write([]byte("codehub upstream token v2\x00"))
		writeField(m, id)
		writeField(m, runID)
	}
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

func writeField(w io.Writer, s string) {
	var n [binary.MaxVarintLen64]byte
	_, _ = w.Write(n[:binary.PutUvarint(n[:], uint64(len(s)))])
	_, _ = io.WriteString(w, s)
}
