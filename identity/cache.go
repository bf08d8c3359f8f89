package identity

import (
	"crypto/sha256"
	"sync"
	"time"
)

// CacheTTL bounds how long a replica trusts a credential it looked up
// without asking the database again: a logout, revocation or disable on
// another replica, an expiry or a password change takes effect within
// this time.
const CacheTTL = 2 * time.Second

// credentialCache remembers what a replica looked up by the hash of a
// credential (a session cookie, an API token) for at most CacheTTL
// and never past the credential's expiry: a burst of requests costs one
// query, while a logout or revocation on another replica still takes
// effect within that time.
type credentialCache[V any] struct {
	mu      sync.Mutex
	entries map[[sha256.Size]byte]cachedCredential[V]
}

type cachedCredential[V any] struct {
	value V
	until time.Time
}

// maxCachedCredentials is the size at which putting an entry first drops
// the stale ones.
const maxCachedCredentials = 4096

func newCredentialCache[V any]() *credentialCache[V] {
	return &credentialCache[V]{entries: map[[sha256.Size]byte]cachedCredential[V]{}}
}

func (c *credentialCache[V]) get(key [sha256.Size]byte, now time.Time) (V, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.entries[key]
	if !ok || !now.Before(e.until) {
		var zero V
		return zero, false
	}
	return e.value, true
}

func (c *credentialCache[V]) put(key [sha256.Size]byte, value V, expires, now time.Time) {
	until := now.Add(CacheTTL)
	if expires.Before(until) {
		until = expires
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.entries) >= maxCachedCredentials {
		for k, e := range c.entries {
			if now.After(e.until) {
				delete(c.entries, k)
			}
		}
	}
	c.entries[key] = cachedCredential[V]{value: value, until: until}
}

func (c *credentialCache[V]) delete(key [sha256.Size]byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.entries, key)
}

// deleteWhere drops every entry whose value matches.
func (c *credentialCache[V]) deleteWhere(match func(V) bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for k, e := range c.entries {
		if match(e.value) {
			delete(c.entries, k)
		}
	}
}
