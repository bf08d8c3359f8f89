package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"

	"github.com/codehub-io/codehub/identity"
	"github.com/codehub-io/codehub/internal/testenv"
	"github.com/codehub-io/codehub/store"
	"github.com/codehub-io/codehub/workspace"
)

func cliConfig(t *testing.T) (path, dbURL string) {
	t.Helper()
	dbURL = testenv.PostgresURL(t)
	path = filepath.Join(t.TempDir(), "codehub.hcl")
	src := fmt.Sprintf("database { url = %q }\ns3 {\n  access_key = \"a\"\n  secret_key = \"b\"\n}\nbackend \"local\" {}\n", dbURL)
	if err := os.WriteFile(path, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	return path, dbURL
}

func user(t *testing.T, stdin string, args ...string) (int, string, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code := runUser(args, &out, &errOut, strings.NewReader(stdin))
	return code, out.String(), errOut.String()
}

func TestUserCommands(t *testing.T) {
	cfg, dbURL := cliConfig(t)
	if code, out, errOut := user(t, "first-password\n", "add", "-config", cfg, "-username", "root", "-password-stdin", "-admin"); code != 0 || !strings.Contains(out, "added administrator root") {
		t.Fatalf("add: %d %q %q", code, out, errOut)
	}
	if code, _, errOut := user(t, "another-password\n", "add", "-config", cfg, "-username", "root", "-password-stdin"); code != 1 || !strings.Contains(errOut, "already exists") {
		t.Fatalf("add twice: %d %q", code, errOut)
	}
	for _, tc := range []struct {
		stdin string
		args  []string
	}{
		{"short\n", []string{"add", "-config", cfg, "-username", "x", "-password-stdin"}},
		{"long-enough\n", []string{"add", "-config", cfg, "-username", "Bad Name", "-password-stdin"}},
		{"", []string{"add", "-config", cfg, "-username", "x"}},
		{"", []string{"frobnicate"}},
		{"", nil},
	} {
		if code, _, _ := user(t, tc.stdin, tc.args...); code != 2 {
			t.Errorf("%v: exit %d, want 2", tc.args, code)
		}
	}
	ctx := context.Background()
	pool, err := store.Open(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	check := func(password string, want bool) {
		t.Helper()
		u, err := store.UserByUsername(ctx, pool, "root")
		if err != nil {
			t.Fatal(err)
		}
		ok, err := identity.VerifyPassword(u.PasswordHash, password)
		if err != nil || ok != want || !u.IsAdmin {
			t.Fatalf("password %q verifies %v (err %v, admin %v), want %v", password, ok, err, u.IsAdmin, want)
		}
	}
	check("first-password", true)
	if code, _, errOut := user(t, "second-password\r\n", "passwd", "-config", cfg, "-username", "root", "-password-stdin"); code != 0 {
		t.Fatalf("passwd: %d %q", code, errOut)
	}
	check("first-password", false)
	check("second-password", true)
	if code, _, errOut := user(t, "whatever-pass\n", "passwd", "-config", cfg, "-username", "ghost", "-password-stdin"); code != 1 || !strings.Contains(errOut, `no user "ghost"`) {
		t.Fatalf("passwd unknown: %d %q", code, errOut)
	}
	user(t, "password-of-bob\n", "add", "-config", cfg, "-username", "bob", "-password-stdin")
	code, out, _ := user(t, "", "list", "-config", cfg)
	if code != 0 || !strings.Contains(out, "USERNAME") || !strings.Contains(out, "bob ") || !strings.Contains(out, "root ") {
		t.Fatalf("list: %d %q", code, out)
	}
	// A user owning workspaces is refused; without them, deleted.
	bob, _ := store.UserByUsername(ctx, pool, "bob")
	svc := workspace.NewService(hclog.NewNullLogger(), pool, workspace.Options{DefaultImage: "img"})
	if _, err := svc.Create(ctx, workspace.CreateRequest{OwnerID: bob.ID, Name: "w"}); err != nil {
		t.Fatal(err)
	}
	if code, _, errOut := user(t, "", "delete", "-config", cfg, "-username", "bob"); code != 1 || !strings.Contains(errOut, "owns workspaces") {
		t.Fatalf("delete owner: %d %q", code, errOut)
	}
	if code, _, errOut := user(t, "", "delete", "-config", cfg, "-username", "root"); code != 0 {
		t.Fatalf("delete: %d %q", code, errOut)
	}
	if _, err := store.UserByUsername(ctx, pool, "root"); err != store.ErrNotFound {
		t.Fatalf("deleted user still there: %v", err)
	}
}

func TestWorkspaceRecoverCommand(t *testing.T) {
	cfg, dbURL := cliConfig(t)
	user(t, "password-of-alice\n", "add", "-config", cfg, "-username", "alice", "-password-stdin")
	ctx := context.Background()
	pool, err := store.Open(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	alice, _ := store.UserByUsername(ctx, pool, "alice")
	svc := workspace.NewService(hclog.NewNullLogger(), pool, workspace.Options{DefaultImage: "img"})
	w, err := svc.Create(ctx, workspace.CreateRequest{OwnerID: alice.ID, Name: "w"})
	if err != nil {
		t.Fatal(err)
	}
	recoverCmd := func(args ...string) (int, string, string) {
		var out, errOut bytes.Buffer
		code := runWorkspace(append([]string{"recover", "-config", cfg}, args...), &out, &errOut, strings.NewReader(""))
		return code, out.String(), errOut.String()
	}
	if code, _, errOut := recoverCmd(w.ID); code != 1 || !strings.Contains(errOut, "not ERROR") {
		t.Fatalf("recover a healthy workspace: %d %q", code, errOut)
	}
	if _, err := pool.Exec(ctx, `UPDATE workspaces SET phase = 'ERROR', error_reason = 'Timeout', error_count = 3 WHERE id = $1`, w.ID); err != nil {
		t.Fatal(err)
	}
	if code, out, errOut := recoverCmd(w.ID); code != 0 || !strings.Contains(out, "recovered workspace "+w.ID) {
		t.Fatalf("recover: %d %q %q", code, out, errOut)
	}
	var phase string
	var count int
	if err := pool.QueryRow(ctx, `SELECT phase, error_count FROM workspaces WHERE id = $1`, w.ID).Scan(&phase, &count); err != nil || phase == "ERROR" || count != 0 {
		t.Fatalf("after recover: %s %d %v", phase, count, err)
	}
	if code, _, _ := recoverCmd("not-an-id"); code != 2 {
		t.Fatalf("bad id: %d", code)
	}
	if code, _, errOut := recoverCmd("01jb3x7k9q2m5n8p4r6s0t1v2w"); code != 1 || !strings.Contains(errOut, "no workspace") {
		t.Fatalf("unknown id: %d %q", code, errOut)
	}
}

// Bad input to the user commands is refused with exit 2 before anything is
// written: no user appears, no password or role changes.
func TestUserCommandsRefuseBadInput(t *testing.T) {
	cfg, dbURL := cliConfig(t)
	if code, _, errOut := user(t, "password-of-bob\n", "add", "-config", cfg, "-username", "bob", "-password-stdin"); code != 0 {
		t.Fatalf("add bob: %d %q", code, errOut)
	}
	ctx := context.Background()
	pool, err := store.Open(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	absent := func(name string) {
		t.Helper()
		if _, err := store.UserByUsername(ctx, pool, name); err != store.ErrNotFound {
			t.Errorf("user %q exists after a refused command (err %v)", name, err)
		}
	}
	bobUnchanged := func() {
		t.Helper()
		bob, err := store.UserByUsername(ctx, pool, "bob")
		if err != nil {
			t.Fatalf("bob: %v", err)
		}
		if ok, err := identity.VerifyPassword(bob.PasswordHash, "password-of-bob"); err != nil || !ok || bob.IsAdmin {
			t.Errorf("bob changed: password still verifies %v (%v), admin %v", ok, err, bob.IsAdmin)
		}
	}

	tooLong := strings.Repeat("p", maxPasswordLength+1)
	// Each case would create its own user ("NEW"), so one that slips
	// through cannot mask the next.
	for i, tc := range []struct {
		name, stdin string
		args        []string
		want        string
	}{
		// The login request body is capped, so a huge password could never be used.
		{"password too long", tooLong + "\n", []string{"add", "-username", "NEW", "-password-stdin"}, "at most"},
		{"endless password line", strings.Repeat("p", 1<<20), []string{"add", "-username", "NEW", "-password-stdin"}, "at most"},
		// Four characters, eight bytes.
		{"password short in characters", "äöüä\n", []string{"add", "-username", "NEW", "-password-stdin"}, "at least"},
		// Browsers send UTF-8; these bytes could never be typed at the login.
		{"password not UTF-8", "\xff\xfe\xfd\xfc\xfb\xfa\xf9\xf8\n", []string{"add", "-username", "NEW", "-password-stdin"}, "UTF-8"},
		{"stray argument to add", "password-of-carol\n", []string{"add", "-username", "NEW", "-password-stdin", "admin"}, `unexpected argument "admin"`},
		{"admin flag on passwd", "new-password-bob\n", []string{"passwd", "-username", "bob", "-password-stdin", "-admin"}, "-admin does not apply"},
		{"second name to delete", "", []string{"delete", "-username", "NEW", "bob"}, `unexpected argument "bob"`},
		{"username flag on list", "", []string{"list", "-username", "bob"}, "-username does not apply"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			name := fmt.Sprintf("carol%d", i)
			args := []string{tc.args[0], "-config", cfg}
			for _, a := range tc.args[1:] {
				args = append(args, strings.ReplaceAll(a, "NEW", name))
			}
			code, out, errOut := user(t, tc.stdin, args...)
			if code != 2 || !strings.Contains(errOut, tc.want) || out != "" {
				t.Errorf("exit %d, stdout %q, stderr %q; want 2 and %q", code, out, errOut, tc.want)
			}
			absent(name)
			bobUnchanged()
		})
	}

	longest := strings.Repeat("ü", maxPasswordLength)
	if code, _, errOut := user(t, longest+"\n", "add", "-config", cfg, "-username", "dave", "-password-stdin"); code != 0 {
		t.Fatalf("add with the longest password: %d %q", code, errOut)
	}
	dave, err := store.UserByUsername(ctx, pool, "dave")
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := identity.VerifyPassword(dave.PasswordHash, longest); err != nil || !ok {
		t.Errorf("longest password does not verify: %v %v", ok, err)
	}
}

// The user commands need only the database: a server's file whose S3 keys
// come from the server's environment serves them as it is.
func TestUserCommandsNeedOnlyTheDatabase(t *testing.T) {
	dbURL := testenv.PostgresURL(t)
	t.Setenv("CODEHUB_S3_ACCESS_KEY", "")
	t.Setenv("CODEHUB_S3_SECRET_KEY", "")
	cfg := filepath.Join(t.TempDir(), "codehub.hcl")
	src := fmt.Sprintf("database { url = %q }\nbackend \"local\" {\n  data_dir = \"/var/lib/codehub/workspaces\"\n}\n", dbURL)
	if err := os.WriteFile(cfg, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, out, errOut := user(t, "first-password\n", "add", "-config", cfg, "-username", "alice", "-password-stdin"); code != 0 || !strings.Contains(out, "added user alice") {
		t.Fatalf("add without S3 keys: %d %q %q", code, out, errOut)
	}
	if code, out, errOut := user(t, "", "list", "-config", cfg); code != 0 || !strings.Contains(out, "alice") {
		t.Fatalf("list without S3 keys: %d %q %q", code, out, errOut)
	}
}
