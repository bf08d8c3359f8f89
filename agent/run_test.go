package agent

import (
	"os"
	"path/filepath"
	"testing"
)

func TestPasswdShell(t *testing.T) {
	dir := t.TempDir()
	exe := filepath.Join(dir, "zsh")
	if err := os.WriteFile(exe, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	plain := filepath.Join(dir, "notexec")
	if err := os.WriteFile(plain, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	passwd := filepath.Join(dir, "passwd")
	lines := "root:x:0:0:root:/root:/bin/sh\n" +
		"dev:x:1000:1000::/home/dev:" + exe + "\n" +
		"nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n" +
		"svc:x:998:998::/var/svc:/bin/false\n" +
		"gone:x:1001:1001::/home/gone:" + filepath.Join(dir, "missing") + "\n" +
		"odd:x:1002:1002::/home/odd:" + plain + "\n" +
		"broken line\n"
	if err := os.WriteFile(passwd, []byte(lines), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		uid  int
		want string
	}{
		{"a user's shell", 1000, exe},
		{"nologin is no shell", 65534, ""},
		{"false is no shell", 998, ""},
		{"a missing shell", 1001, ""},
		{"a file that cannot run", 1002, ""},
		{"a uid not in the file", 4242, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := passwdShell(passwd, tc.uid); got != tc.want {
				t.Fatalf("passwdShell(uid %d) = %q, want %q", tc.uid, got, tc.want)
			}
		})
	}
}

// Without a usable $SHELL or passwd entry a session still gets a shell.
func TestLoginShellSkipsNologin(t *testing.T) {
	t.Setenv("SHELL", "/usr/sbin/nologin")
	sh := loginShell()
	if !usableShell(sh) {
		t.Fatalf("loginShell() = %q, which cannot open a session", sh)
	}
}
