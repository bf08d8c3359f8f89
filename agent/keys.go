package agent

import (
	"crypto/ed25519"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"io"

	"golang.org/x/crypto/ssh"
)

// Keys derives the secrets of every workspace's agent from one deployment
// key, so no secret per workspace is stored and every replica derives the
// same ones: the token the agent demands of each request (new for each run
// of the workspace, so a token that reached a stale address opens nothing
// once the workspace starts again) and the SSH host key (one per workspace,
// the same across its runs, archive and restore and moves between nodes, so
// a pinned known_hosts entry never breaks).
type Keys struct {
	key []byte
}

// ErrShortKey reports a deployment key too short to derive from.
var ErrShortKey = errors.New("agent: key shorter than 32 bytes")

// NewKeys derives from key, which must hold at least 32 random bytes.
func NewKeys(key []byte) (*Keys, error) {
	if len(key) < 32 {
		return nil, ErrShortKey
	}
	return &Keys{key: append([]byte(nil), key...)}, nil
}

// Token is the agent token of run runID of workspace wsID: 43 URL-safe
// characters.
func (k *Keys) Token(wsID, runID string) string {
	return base64.RawURLEncoding.EncodeToString(k.derive("codehub agent token v1", wsID, runID))
}

// HostKey is the SSH host key of workspace wsID.
func (k *Keys) HostKey(wsID string) ed25519.PrivateKey {
	return ed25519.NewKeyFromSeed(k.derive("codehub ssh host key v1", wsID))
}

// HostPublicKey is the public half of HostKey, what clients pin.
func (k *Keys) HostPublicKey(wsID string) ssh.PublicKey {
	pub, err := ssh.NewPublicKey(k.HostKey(wsID).Public())
	if err != nil {
		// An ed25519 key always converts.
		panic(err)
	}
	return pub
}

// EncodeHostKey is the form in which the agent receives its host key.
func EncodeHostKey(key ed25519.PrivateKey) string {
	return base64.RawStdEncoding.EncodeToString(key.Seed())
}

// DecodeHostKey reads what EncodeHostKey wrote.
func DecodeHostKey(s string) (ed25519.PrivateKey, error) {
	seed, err := base64.RawStdEncoding.DecodeString(s)
	if err != nil || len(seed) != ed25519.SeedSize {
		return nil, errors.New("agent: host key is not a base64 ed25519 seed")
	}
	return ed25519.NewKeyFromSeed(seed), nil
}

// derive is HMAC-SHA256 over a purpose and length-prefixed fields, so no
// pair of fields derives another pair's secret.
func (k *Keys) derive(purpose string, fields ...string) []byte {
	m := hmac.New(sha256.New, k.key)
	m.Write([]byte(purpose))
	m.Write([]byte{0})
	for _, f := range fields {
		writeField(m, f)
	}
	return m.Sum(nil)
}

func writeField(w io.Writer, s string) {
	var n [binary.MaxVarintLen64]byte
	_, _ = w.Write(n[:binary.PutUvarint(n[:], uint64(len(s)))])
	_, _ = io.WriteString(w, s)
}
