package workspace_test

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"regexp"
	"testing"

	"github.com/codehub-io/codehub/workspace"
)

func TestUpstreamTokens(t *testing.T) {
	keyA := bytes.Repeat([]byte{0xa5}, 32)
	keyB := bytes.Repeat([]byte{0x5a}, 32)
	a, err := workspace.NewUpstreamTokens(keyA)
	if err != nil {
		t.Fatal(err)
	}
	b, err := workspace.NewUpstreamTokens(keyB)
	if err != nil {
		t.Fatal(err)
	}
	const id1, id2 = "01jb3x7k9q2m5n8p4r6s0t1v2w", "01jb3x7k9q2m5n8p4r6s0t1v2x"
	const run1, run2 = "01jb3x7k9q2m5n8p4r6s0t1aaa", "01jb3x7k9q2m5n8p4r6s0t1aab"
	shape := regexp.MustCompile(`^[A-Za-z0-9_-]{43}$`)
	for _, tc := range []struct {
		name     string
		x, y     string
		wantSame bool
	}{
		{"stable for one run", a.For(id1, run1), a.For(id1, run1), true},
		{"differs between runs", a.For(id1, run1), a.For(id1, run2), false},
		{"differs between workspaces", a.For(id1, run1), a.For(id2, run1), false},
		{"differs between deployments", a.For(id1, run1), b.For(id1, run1), false},
		// Rows written before runs were recorded keep their token.
		{"without a run, the first token", a.For(id1, ""), legacyToken(keyA, id1), true},
		{"a run differs from no run", a.For(id1, run1), a.For(id1, ""), false},
		// Concatenations that read alike must not derive alike.
		{"parts are not concatenated", a.For(id1+"x", run1), a.For(id1, "x"+run1), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if !shape.MatchString(tc.x) || !shape.MatchString(tc.y) {
				t.Fatalf("tokens %q, %q are not 43 URL-safe characters", tc.x, tc.y)
			}
			if (tc.x == tc.y) != tc.wantSame {
				t.Fatalf("%q vs %q: same = %v, want %v", tc.x, tc.y, tc.x == tc.y, tc.wantSame)
			}
		})
	}
	// The caller's slice may change later; the tokens must not.
	before := a.For(id1, run1)
	keyA[0] ^= 0xff
	if a.For(id1, run1) != before {
		t.Fatal("token follows changes to the caller's key slice")
	}
	if _, err := workspace.NewUpstreamTokens(make([]byte, 16)); !errors.Is(err, workspace.ErrShortKey) {
		t.Fatalf("16-byte key: err = %v, want ErrShortKey", err)
	}
}

// legacyToken is the derivation of tokens before runs, which running
// workspaces of an upgraded deployment still hold.
func legacyToken(key []byte, id string) string {
	m := hmac.New(sha256.New, key)
	m.Write([]byte("codehub upstream token v1\x00" + id))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}
