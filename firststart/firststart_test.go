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

// The install script is user code: nothing of the credential may be left
// where it can look, neither the file the token came in nor any
// environment, its own or an ancestor's, nor git's configuration.
func TestInstallScriptFindsNoCredential(t *testing.T) {
	const token = "ghp_s3cretToken42"
	repo := testenv.BareRepo(t, "service", map[string]string{"README": "hello"})
	dotfiles := testenv.BareRepo(t, "dots", map[string]string{"install.sh": testenv.CredentialProbe})
	home := t.TempDir()
	tokenFile := filepath.Join(t.TempDir(), "git.env")
	if err := os.WriteFile(tokenFile, []byte(EnvGitToken+"="+token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	out, ok := run(t, home, EnvRepository+"="+repo, EnvDotfiles+"="+dotfiles,
		EnvGitToken+"="+token, EnvGitTokenFile+"="+tokenFile)
	if !ok {
		t.Fatalf("first start failed:\n%s", out)
	}
	probe, err := os.ReadFile(filepath.Join(home, "probe"))
	if err != nil || !strings.Contains(string(probe), "probe done") {
		t.Fatalf("the install script did not run to its end: %v\n%s", err, probe)
	}
	if strings.Contains(string(probe), token) {
		t.Errorf("the install script found the token:\n%s", probe)
	}
	if _, err := os.Stat(tokenFile); !os.IsNotExist(err) {
		t.Errorf("the token file is still there: %v", err)
	}
	if strings.Contains(out, token) {
		t.Errorf("the program sees the token:\n%s", out)
	}
}

// A credential file that cannot be removed stops the start before any
// user code runs; a first start's clones are undone, a used home is left
// as it is. /proc/version stands in for it: nobody, root included, can
// remove it.
func TestUnremovableTokenFileFailsTheStart(t *testing.T) {
	const stuck = "/proc/version"
	if _, err := os.Stat(stuck); err != nil {
		t.Skipf("no %s: %v", stuck, err)
	}
	dotfiles := testenv.BareRepo(t, "dots", map[string]string{"install.sh": testenv.CredentialProbe})
	fresh := t.TempDir()
	out, ok := run(t, fresh, EnvDotfiles+"="+dotfiles, EnvGitTokenFile+"="+stuck)
	if ok || !strings.Contains(out, "cannot remove") || strings.Contains(out, "PATH=") {
		t.Fatalf("a first start went on with the credential file in place:\n%s", out)
	}
	if entries, _ := os.ReadDir(fresh); len(entries) != 0 {
		t.Errorf("home keeps %d entries after the refused first start", len(entries))
	}

	used := t.TempDir()
	if err := os.WriteFile(filepath.Join(used, "notes"), []byte("mine"), 0o644); err != nil {
		t.Fatal(err)
	}
	out, ok = run(t, used, EnvDotfiles+"="+dotfiles, EnvGitTokenFile+"="+stuck)
	if ok || !strings.Contains(out, "cannot remove") || strings.Contains(out, "PATH=") {
		t.Fatalf("a start went on with the credential file in place:\n%s", out)
	}
	if b, err := os.ReadFile(filepath.Join(used, "notes")); err != nil || string(b) != "mine" {
		t.Errorf("a used home lost its files: %q, %v", b, err)
	}
}

func TestFailedInstallEmptiesHome(t *testing.T) {
	dotfiles := testenv.BareRepo(t, "dots", map[string]string{"install.sh": "#!/bin/sh\necho broken >&2\nexit 3\n"})
	home := t.TempDir()
	out, ok := run(t, home, EnvDotfiles+"="+dotfiles)
	if ok || !strings.Contains(out, "broken") || !strings.Contains(out, "status 3") || strings.Contains(out, "PATH=") {
		t.Fatalf("a failing install script did not fail the start before the program:\n%s", out)
	}
	if entries, _ := os.ReadDir(home); len(entries) != 0 {
		t.Errorf("home keeps %d entries after a failed install", len(entries))
	}
}

// Script hands installScript to a shell as one single-quoted word.
func TestInstallScriptIsOneQuotedWord(t *testing.T) {
	if strings.Contains(installScript, "'") || strings.Contains(Script, "${") {
		t.Error("installScript holds a single quote, or Script a \"${\"")
	}
}

// Nomad's exec driver sets HOME to the task user's home in the node's user
// database; CODEHUB_HOME names the home to prepare and wins.
func TestCodehubHomeWinsOverHOME(t *testing.T) {
	repo := testenv.BareRepo(t, "service", map[string]string{"README": "hello"})
	dotfiles := testenv.BareRepo(t, "dots", map[string]string{"install.sh": "#!/bin/sh\necho \"$HOME\" > \"$HOME/installed-in\"\n"})
	home := t.TempDir()
	cmd := exec.Command("/bin/sh", "-c", Script, "sh")
	cmd.Env = []string{"HOME=/nonexistent", "PATH=" + os.Getenv("PATH"), EnvHome + "=" + home,
		EnvRepository + "=" + repo, EnvDotfiles + "=" + dotfiles}
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("first start with HOME elsewhere: %v\n%s", err, out)
	}
	if b, err := os.ReadFile(filepath.Join(home, "service", "README")); err != nil || string(b) != "hello" {
		t.Errorf("repository not in CODEHUB_HOME: %q, %v", b, err)
	}
	if b, err := os.ReadFile(filepath.Join(home, "installed-in")); err != nil || string(b) != home+"\n" {
		t.Errorf("the install script ran with HOME %q, %v; want %s", b, err, home)
	}
}

// Init runs in the checkout after the clone, as user code (without the
// credential); a prebuild's first start then marks the home prebuilt.
func TestInitRunsAfterTheClone(t *testing.T) {
	const token = "ghp_initToken7"
	repo := testenv.BareRepo(t, "service", map[string]string{"README": "hello"})
	for _, prebuild := range []bool{false, true} {
		home := t.TempDir()
		env := []string{EnvRepository + "=" + repo, EnvGitToken + "=" + token,
			EnvInit + "=echo built > out\nenv > init-env"}
		commitFile := filepath.Join(t.TempDir(), "commit")
		if prebuild {
			env = append(env, EnvPrebuild+"=1", EnvCommitFile+"="+commitFile)
		}
		out, ok := run(t, home, env...)
		if !ok {
			t.Fatalf("first start (prebuild %v) failed:\n%s", prebuild, out)
		}
		if b, err := os.ReadFile(filepath.Join(home, "service", "out")); err != nil || string(b) != "built\n" {
			t.Errorf("init did not run in the checkout: %q %v", b, err)
		}
		if b, _ := os.ReadFile(filepath.Join(home, "service", "init-env")); strings.Contains(string(b), token) {
			t.Errorf("init saw the credential:\n%s", b)
		}
		marker, err := os.ReadFile(filepath.Join(home, PrebuiltMarker))
		if prebuild != (err == nil) || (prebuild && string(marker) != "service") {
			t.Errorf("prebuild %v: marker %q, %v", prebuild, marker, err)
		}
		commit, err := os.ReadFile(commitFile)
		if head := headOf(t, filepath.Join(home, "service")); prebuild != (err == nil) || (prebuild && string(commit) != head+"\n") {
			t.Errorf("prebuild %v: commit file %q, %v; HEAD %s", prebuild, commit, err, head)
		}
		if strings.Contains(out, EnvInit) || strings.Contains(out, EnvPrebuild) || strings.Contains(out, EnvCommitFile) {
			t.Errorf("the program sees the init variables:\n%s", out)
		}
	}
}

func TestFailedInitEmptiesHome(t *testing.T) {
	repo := testenv.BareRepo(t, "service", map[string]string{"README": "hello"})
	home := t.TempDir()
	out, ok := run(t, home, EnvRepository+"="+repo, EnvInit+"=echo one\nfalse\necho never > never", EnvPrebuild+"=1")
	if ok || strings.Contains(out, "PATH=") {
		t.Fatalf("a failed init started the program:\n%s", out)
	}
	if entries, _ := os.ReadDir(home); len(entries) != 0 {
		t.Errorf("home keeps %d entries after a failed init", len(entries))
	}
}

// headOf is the commit checked out in dir.
func headOf(t *testing.T, dir string) string {
	t.Helper()
	out, err := exec.Command("git", "-C", dir, "rev-parse", "HEAD").Output()
	if err != nil {
		t.Fatalf("git rev-parse in %s: %v", dir, err)
	}
	return strings.TrimSpace(string(out))
}

// A prebuild tried again on the home an earlier attempt built (its
// archive failed) leaves the home as it is, marker and all, and names the
// commit again.
func TestPrebuildAgainOnItsBuiltHome(t *testing.T) {
	repo := testenv.BareRepo(t, "service", map[string]string{"README": "hello"})
	home := t.TempDir()
	commitFile := filepath.Join(t.TempDir(), "commit")
	env := []string{EnvRepository + "=" + repo, EnvInit + "=echo built >> out", EnvPrebuild + "=1", EnvCommitFile + "=" + commitFile}
	if out, ok := run(t, home, env...); !ok {
		t.Fatalf("prebuild failed:\n%s", out)
	}
	head := headOf(t, filepath.Join(home, "service"))
	testenv.PushCommit(t, repo, map[string]string{"NEWS": "pushed between the attempts"})
	if err := os.Remove(commitFile); err != nil {
		t.Fatal(err)
	}
	if out, ok := run(t, home, env...); !ok {
		t.Fatalf("second attempt failed:\n%s", out)
	}
	if b, err := os.ReadFile(filepath.Join(home, "service", "out")); err != nil || string(b) != "built\n" {
		t.Errorf("init ran again: out = %q, %v", b, err)
	}
	if _, err := os.Stat(filepath.Join(home, PrebuiltMarker)); err != nil {
		t.Errorf("the marker is gone: %v", err)
	}
	if b, err := os.ReadFile(commitFile); err != nil || string(b) != head+"\n" || headOf(t, filepath.Join(home, "service")) != head {
		t.Errorf("commit file %q, %v; want the built %s", b, err, head)
	}
}

// prebuilt makes a prebuilt home of repo, as a prebuild's first start does.
func prebuilt(t *testing.T, repo string) string {
	t.Helper()
	home := t.TempDir()
	if out, ok := run(t, home, EnvRepository+"="+repo, EnvInit+"=echo built > out", EnvPrebuild+"=1"); !ok {
		t.Fatalf("prebuild failed:\n%s", out)
	}
	return home
}

// The owner's first start of a prebuilt home brings the checkout up to
// the branch, adds the owner's dotfiles, runs their install script and
// not init, and removes the marker; a later start does none of it.
func TestPrebuiltHomeFastForwardsAndAddsDotfiles(t *testing.T) {
	repo := testenv.BareRepo(t, "service", map[string]string{"README": "hello"})
	dotfiles := testenv.BareRepo(t, "dots", map[string]string{"install.sh": "#!/bin/sh\necho once >> \"$HOME/installed\"\n"})
	home := prebuilt(t, repo)
	newer := testenv.PushCommit(t, repo, map[string]string{"NEWS": "pushed after the prebuild"})
	env := []string{EnvRepository + "=" + repo, EnvDotfiles + "=" + dotfiles, EnvInit + "=echo again >> out"}
	for range 2 {
		if out, ok := run(t, home, env...); !ok {
			t.Fatalf("start of the prebuilt home failed:\n%s", out)
		}
	}
	head, err := exec.Command("git", "-C", filepath.Join(home, "service"), "rev-parse", "HEAD").Output()
	if err != nil || strings.TrimSpace(string(head)) != newer {
		t.Errorf("checkout at %s, want the pushed %s (%v)", head, newer, err)
	}
	if b, _ := os.ReadFile(filepath.Join(home, "service", "out")); string(b) != "built\n" {
		t.Errorf("init ran again: %q", b)
	}
	if b, _ := os.ReadFile(filepath.Join(home, "installed")); string(b) != "once\n" {
		t.Errorf("install script ran %q", b)
	}
	if _, err := os.Stat(filepath.Join(home, PrebuiltMarker)); !os.IsNotExist(err) {
		t.Errorf("marker left: %v", err)
	}
}

// A checkout that cannot fast-forward (a commit of its own) is left as it
// is and the start goes on; a failing install script fails the start but
// keeps the prebuilt home, and the next attempt adds the dotfiles again.
func TestPrebuiltHomeNeverDiscards(t *testing.T) {
	repo := testenv.BareRepo(t, "service", map[string]string{"README": "hello"})
	home := prebuilt(t, repo)
	checkout := filepath.Join(home, "service")
	if out, err := exec.Command("sh", "-c", "cd "+checkout+" && echo mine > MINE && git add MINE && git -c user.name=t -c user.email=t@e commit -qm mine").CombinedOutput(); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	testenv.PushCommit(t, repo, map[string]string{"NEWS": "diverges"})
	broken := testenv.BareRepo(t, "dots", map[string]string{"install.sh": "#!/bin/sh\nexit 3\n"})
	out, ok := run(t, home, EnvRepository+"="+repo, EnvDotfiles+"="+broken)
	if ok || !strings.Contains(out, "stays at the prebuild's commit") {
		t.Fatalf("a failing install script started the program, or no word of the kept checkout:\n%s", out)
	}
	for _, f := range []string{"service/MINE", "service/out", PrebuiltMarker} {
		if _, err := os.Stat(filepath.Join(home, f)); err != nil {
			t.Errorf("%s lost: %v", f, err)
		}
	}
	if _, err := os.Stat(filepath.Join(home, ".dotfiles")); !os.IsNotExist(err) {
		t.Errorf("failed dotfiles kept: %v", err)
	}
	good := testenv.BareRepo(t, "dots2", map[string]string{"install.sh": "#!/bin/sh\ntouch \"$HOME/installed\"\n"})
	if out, ok := run(t, home, EnvRepository+"="+repo, EnvDotfiles+"="+good); !ok {
		t.Fatalf("the next attempt failed:\n%s", out)
	}
	if _, err := os.Stat(filepath.Join(home, "installed")); err != nil {
		t.Errorf("next attempt did not install: %v", err)
	}
}
