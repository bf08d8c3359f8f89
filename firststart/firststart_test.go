package firststart

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/codehub-io/codehub/internal/testenv"
)

// run runs Script in home with env, then a program printing its
// environment; it returns the combined output and whether it succeeded.
func run(t *testing.T, home string, env ...string) (string, bool) {
	t.Helper()
	cmd := exec.Command("/bin/sh", "-c", Script, "sh", "/usr/bin/env")
	cmd.Env = append([]string{"HOME=" + home, "PATH=" + os.Getenv("PATH")}, env...)
	out, err := cmd.CombinedOutput()
	return string(out), err == nil
}

func TestFirstStartClonesRepositoryAndDotfiles(t *testing.T) {
	repo := testenv.BareRepo(t, "service", map[string]string{"README": "hello"})
	dotfiles := testenv.BareRepo(t, "dots", map[string]string{"install.sh": "#!/bin/sh\necho \"token=$CODEHUB_GIT_TOKEN\" > \"$HOME/installed\"\n"})
	home := t.TempDir()
	out, ok := run(t, home, EnvRepository+"="+repo, EnvDotfiles+"="+dotfiles, EnvGitToken+"=s3cret")
	if !ok {
		t.Fatalf("first start failed:\n%s", out)
	}
	if b, err := os.ReadFile(filepath.Join(home, "service", "README")); err != nil || string(b) != "hello" {
		t.Fatalf("repository not in the home: %q, %v\n%s", b, err, out)
	}
	if b, err := os.ReadFile(filepath.Join(home, "installed")); err != nil || string(b) != "token=\n" {
		t.Errorf("install script: %q, %v (it must run, without the token)", b, err)
	}
	if strings.Contains(out, "s3cret") || strings.Contains(out, EnvRepository) {
		t.Errorf("the program sees the first start's variables:\n%s", out)
	}
}

func TestFirstStartOnlyInAnEmptyHome(t *testing.T) {
	repo := testenv.BareRepo(t, "service", map[string]string{"README": "hello"})
	home := t.TempDir()
	if err := os.WriteFile(filepath.Join(home, "notes"), []byte("mine"), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, ok := run(t, home, EnvRepository+"="+repo); !ok {
		t.Fatalf("start of a used home failed:\n%s", out)
	}
	if _, err := os.Stat(filepath.Join(home, "service")); !os.IsNotExist(err) {
		t.Errorf("a used home got a clone: %v", err)
	}
}

func TestFailedCloneShowsGitAndEmptiesHome(t *testing.T) {
	dotfiles := testenv.BareRepo(t, "dots", map[string]string{"README": "x"})
	home := t.TempDir()
	missing := "file://" + filepath.Join(t.TempDir(), "missing.git")
	out, ok := run(t, home, EnvDotfiles+"="+dotfiles, EnvRepository+"="+missing)
	if ok {
		t.Fatalf("a clone of a missing repository succeeded:\n%s", out)
	}
	if !strings.Contains(out, "fatal:") || strings.Contains(out, "PATH=") {
		t.Errorf("output lacks git's error, or the program ran:\n%s", out)
	}
	if entries, _ := os.ReadDir(home); len(entries) != 0 {
		t.Errorf("home keeps %d entries after a failed first start", len(entries))
	}
}
