package api

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/codehub-io/codehub/internal/oidctest"
)

// ID tokens from a real provider that are not for this server are refused:
// issued to another client, expired, by another provider, or for another
// login. The same provider's token for our client passes, so each refusal
// is the check named.
func TestOIDCVerifyRefuses(t *testing.T) {
	ours := oidctest.Client{ID: "codehub", Secret: "codehub-secret", RedirectURI: "http://127.0.0.1:1/callback"}
	other := oidctest.Client{ID: "other-app", Secret: "other-secret", RedirectURI: "http://127.0.0.1:1/callback"}
	user := oidctest.User{Subject: "sub-ida", Username: "ida", Password: "pw-ida"}
	p := oidctest.Start(t, ours, other)
	p.AddUser(user)
	stranger := oidctest.Start(t, ours)
	stranger.AddUser(user)

	login := newOIDCLogin(hclog.NewNullLogger(), OIDCOptions{Issuer: p.Issuer, ClientID: ours.ID, ClientSecret: ours.Secret}, "http://127.0.0.1:1")
	provider, err := login.discover()
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	good := p.IDToken(t, ours, user, "nonce-1")
	if _, err := login.verify(ctx, provider, good, "nonce-1"); err != nil {
		t.Fatalf("our own token: %v", err)
	}

	for _, tc := range []struct {
		name  string
		raw   string
		nonce string
		now   time.Time
		want  error
	}{
		{"wrong audience", p.IDToken(t, other, user, "nonce-2"), "nonce-2", time.Now(), errTokenInvalid},
		{"expired", good, "nonce-1", time.Now().Add(2 * time.Hour), errTokenExpired},
		{"wrong issuer", stranger.IDToken(t, ours, user, "nonce-3"), "nonce-3", time.Now(), errTokenInvalid},
		{"bad nonce", good, "nonce-of-another-login", time.Now(), errWrongNonce},
	} {
		t.Run(tc.name, func(t *testing.T) {
			login.now = func() time.Time { return tc.now }
			if _, err := login.verify(ctx, provider, tc.raw, tc.nonce); !errors.Is(err, tc.want) {
				t.Errorf("verify = %v, want %v", err, tc.want)
			}
		})
	}
}
