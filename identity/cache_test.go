package identity

import (
	"crypto/sha256"
	"testing"
	"time"
)

func TestCredentialCache(t *testing.T) {
	c := newCredentialCache[string]()
	now := time.Now()
	a, b := sha256.Sum256([]byte("a")), sha256.Sum256([]byte("b"))
	c.put(a, "alice", now.Add(time.Hour), now)
	c.put(b, "bob", now.Add(time.Second), now)
	for _, tc := range []struct {
		key  [sha256.Size]byte
		at   time.Duration
		want string
	}{
		{a, 0, "alice"},
		{a, CacheTTL - time.Millisecond, "alice"},
		// Trusted no longer than the cache time, however long it lives.
		{a, CacheTTL, ""},
		// Nor past its own expiry.
		{b, time.Second - time.Millisecond, "bob"},
		{b, time.Second, ""},
	} {
		got, ok := c.get(tc.key, now.Add(tc.at))
		if got != tc.want || ok != (tc.want != "") {
			t.Errorf("get at +%v = %q %v, want %q", tc.at, got, ok, tc.want)
		}
	}
	c.deleteWhere(func(v string) bool { return v == "alice" })
	if _, ok := c.get(a, now); ok {
		t.Error("deleteWhere kept the match")
	}
	if _, ok := c.get(b, now); !ok {
		t.Error("deleteWhere dropped another entry")
	}
	c.delete(b)
	if _, ok := c.get(b, now); ok {
		t.Error("delete kept the entry")
	}
}
