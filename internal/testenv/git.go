package testenv

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// BareRepo makes a bare git repository called name holding files (name ->
// content; names ending in .sh are executable), with one commit on main,
// and returns its file:// URL. It skips the test without git.
func BareRepo(t testing.TB, name string, files map[string]string) string {
	t.Helper()
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git is not installed")
	}
	work := t.TempDir()
	for f, content := range files {
		mode := os.FileMode(0o644)
		if strings.HasSuffix(f, ".sh") {
			mode = 0o755
		}
		if err := os.WriteFile(filepath.Join(work, f), []byte(content), mode); err != nil {
			t.Fatal(err)
		}
	}
	bare := filepath.Join(t.TempDir(), name+".git")
	for _, args := range [][]string{
		{"-C", work, "init", "--quiet", "--initial-branch=main"},
		{"-C", work, "add", "."},
		{"-C", work, "-c", "user.name=test", "-c", "user.email=test@example.com", "commit", "--quiet", "-m", "first"},
		{"clone", "--quiet", "--bare", work, bare},
	} {
		if out, err := exec.Command("git", args...).CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	return "file://" + bare
}

// CredentialProbe is a dotfiles install script that writes to
// $HOME/probe everything a script run at the first start could find of
// the git credential: its environment, the environment every ancestor
// process was started with, the secrets directory Nomad gives the task,
// the file named by CODEHUB_GIT_TOKEN_FILE, and git's configuration with
// the credential helpers it would call. The file ends with "probe done".
const CredentialProbe = `#!/bin/sh
out="$HOME/probe"
{
  echo "== env"; env
  echo "== ancestors"
  p=$$
  while [ "$p" -gt 1 ] 2>/dev/null; do
    tr '\0' '\n' < "/proc/$p/environ" 2>/dev/null
    read -r _ _ _ p _ < "/proc/$p/stat" || break
  done
  echo "== secrets"
  if [ -n "$NOMAD_SECRETS_DIR" ]; then cat "$NOMAD_SECRETS_DIR"/* 2>/dev/null; fi
  if [ -n "$CODEHUB_GIT_TOKEN_FILE" ]; then cat "$CODEHUB_GIT_TOKEN_FILE" 2>/dev/null; fi
  echo "== git config"
  git config --list --show-origin 2>&1
  printf 'protocol=https\nhost=example.com\n\n' | GIT_TERMINAL_PROMPT=0 git credential fill 2>&1
  echo "probe done"
} > "$out" 2>&1
`

// PushCommit adds a commit writing files to main of the bare repository
// at url (from BareRepo) and returns its hash.
func PushCommit(t testing.TB, url string, files map[string]string) string {
	t.Helper()
	work := filepath.Join(t.TempDir(), "work")
	git := func(args ...string) string {
		t.Helper()
		out, err := exec.Command("git", args...).CombinedOutput()
		if err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	git("clone", "--quiet", url, work)
	for f, content := range files {
		if err := os.WriteFile(filepath.Join(work, f), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	git("-C", work, "add", ".")
	git("-C", work, "-c", "user.name=test", "-c", "user.email=test@example.com", "commit", "--quiet", "-m", "more")
	git("-C", work, "push", "--quiet", "origin", "main")
	return git("-C", work, "rev-parse", "HEAD")
}
