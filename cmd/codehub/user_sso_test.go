package main

import (
	"context"
	"strings"
	"testing"

	"github.com/codehub-io/codehub/store"
)

// A user signing in through single sign-on is listed as such and gets no
// password from the command line: it would be a way in the provider does
// not control.
func TestUserCommandLeavesSSOUsersWithoutPassword(t *testing.T) {
	cfg, dbURL := cliConfig(t)
	if code, _, errOut := user(t, "password-of-root\n", "add", "-config", cfg, "-username", "root", "-password-stdin", "-admin"); code != 0 {
		t.Fatalf("add: %d %q", code, errOut)
	}
	ctx := context.Background()
	pool, err := store.Open(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	if _, err := store.CreateOIDCUser(ctx, pool, "01jb3x7k9q2m5n8p4r6s0tsso1", "sam", "https://idp.example.com", "sub-sam", false); err != nil {
		t.Fatal(err)
	}
	if code, _, errOut := user(t, "some-password\n", "passwd", "-config", cfg, "-username", "sam", "-password-stdin"); code != 1 || !strings.Contains(errOut, "single sign-on") {
		t.Fatalf("passwd of an SSO user: %d %q", code, errOut)
	}
	if u, err := store.UserByUsername(ctx, pool, "sam"); err != nil || u.PasswordHash != "" {
		t.Fatalf("sam's password hash = %q, %v; want none", u.PasswordHash, err)
	}
	code, out, _ := user(t, "", "list", "-config", cfg)
	if code != 0 || !strings.Contains(out, "SIGN-IN") || !strings.Contains(out, "oidc") {
		t.Fatalf("list: %d %q", code, out)
	}
}
