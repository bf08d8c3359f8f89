package main

import (
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
)

// TestLogout: codehub logout revokes the stored token on the server and
// removes it here; with the server out of reach it still removes it here
// and says the token could not be revoked.
func TestLogout(t *testing.T) {
	c := newCLITest(t)
	alice := c.env.CreateUser("alice", false)
	// A read token may end itself too.
	secret := c.loginAs(alice, "read")
	r := c.must("", "logout")
	if !strings.Contains(r.stdout, "revoked") {
		t.Fatalf("logout said %q %q", r.stdout, r.stderr)
	}
	if _, err := os.Stat(c.credentialsFile()); !os.IsNotExist(err) {
		t.Fatalf("credentials after logout: %v", err)
	}
	anon := c.env.Client()
	if res := c.env.Do(anon, "GET", "/api/v1/session", nil, "Authorization", "Bearer "+secret); res.StatusCode != http.StatusUnauthorized {
		t.Fatalf("the token after logout: %d", res.StatusCode)
	}
	var n int
	if err := c.env.Pool.QueryRow(t.Context(), `SELECT count(*) FROM audit_events WHERE action = 'token.revoke' AND outcome = 'success' AND actor_token_id <> ''`).Scan(&n); err != nil || n != 1 {
		t.Fatalf("%d revocations recorded by the token (err %v), want 1", n, err)
	}
	if r := c.must("", "logout"); !strings.Contains(r.stdout, "Not logged in") {
		t.Fatalf("logout without credentials said %q", r.stdout)
	}

	// The server is out of reach: the token goes here, and stays valid there.
	secret = c.loginAs(alice, "read-write")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gone := "http://" + ln.Addr().String()
	ln.Close()
	if _, err := saveCredentials(credentials{URL: gone, Token: secret}); err != nil {
		t.Fatal(err)
	}
	r = c.expect(exitFailed, "", "logout")
	if !strings.Contains(r.stderr, "could not revoke") {
		t.Fatalf("logout without the server said %q", r.stderr)
	}
	if _, err := os.Stat(c.credentialsFile()); !os.IsNotExist(err) {
		t.Fatalf("credentials after an unreachable logout: %v", err)
	}
	if res := c.env.Do(anon, "GET", "/api/v1/session", nil, "Authorization", "Bearer "+secret); res.StatusCode != http.StatusOK {
		t.Fatalf("the token not revoked: %d", res.StatusCode)
	}
}
