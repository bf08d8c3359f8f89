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
