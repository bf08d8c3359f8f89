package local

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/codehub-io/codehub/controller"
	"github.com/codehub-io/codehub/internal/testenv"
	"github.com/codehub-io/codehub/workspace"
)

func startWith(t *testing.T, b *Backend, spec controller.WorkspaceSpec) {
	t.Helper()
	ctx := context.Background()
	if err := b.ProvisionVolume(ctx, controller.VolumeSpec{WorkspaceID: testID}); err != nil {
		t.Fatal(err)
	}
	spec.WorkspaceID = testID
	if err := b.StartWorkspace(ctx, spec); err != nil {
		t.Fatal(err)
	}
}

func TestFirstStartClonesBeforeTheProgram(t *testing.T) {
	b := newTestBackend(t, t.TempDir())
	startWith(t, b, controller.WorkspaceSpec{Repository: testenv.BareRepo(t, "service", map[string]string{"README": "hello"})})
	stopOnCleanup(t, b)
	waitFor(t, b, "ready", func(o controller.Observed) bool { return o.UpstreamReady })
	if got, err := os.ReadFile(filepath.Join(b.HomeDir(testID), "service", "README")); err != nil || string(got) != "hello" {
		t.Fatalf("clone in the home: %q, %v", got, err)
	}
}

func TestFailedCloneFailsTheStartWithGitsMessage(t *testing.T) {
	b := newTestBackend(t, t.TempDir())
	startWith(t, b, controller.WorkspaceSpec{Repository: "file://" + filepath.Join(t.TempDir(), "missing.git")})
	o := waitFor(t, b, "failed", func(o controller.Observed) bool { return o.Failure != nil })
	if o.Failure.Reason != workspace.ReasonStartFailed || !strings.Contains(o.Failure.Message, "fatal:") {
		t.Fatalf("failure = %+v, want StartFailed with git's message", o.Failure)
	}
}

// The dotfiles' install script runs as the workspace user, like the
// program: it finds the credential nowhere, not in any environment of its
// own process tree, nor in git's configuration. Run as the unprivileged
// user, as codehub runs workspaces when it is root; a workspace of
// codehub's own user could read everything of codehub anyway.
func TestInstallScriptFindsNoCredential(t *testing.T) {
	const token = "ghp_localS3cret77"
	b, base, acct := newUserBackend(t)
	dotfiles := testenv.BareRepo(t, "dots", map[string]string{"install.sh": testenv.CredentialProbe})
	// The clone runs as the workspace user: the repository must be where
	// it may read it.
	shared := filepath.Join(base, "dots.git")
	if out, err := exec.Command("cp", "-r", strings.TrimPrefix(dotfiles, "file://"), shared).CombinedOutput(); err != nil {
		t.Fatalf("copy repository: %v\n%s", err, out)
	}
	if out, err := exec.Command("chown", "-R", strconv.Itoa(acct.uid)+":"+strconv.Itoa(acct.gid), shared).CombinedOutput(); err != nil {
		t.Fatalf("chown repository: %v\n%s", err, out)
	}
	startWith(t, b, controller.WorkspaceSpec{Dotfiles: "file://" + shared, GitToken: token})
	stopOnCleanup(t, b)
	waitFor(t, b, "ready", func(o controller.Observed) bool { return o.UpstreamReady })
	probe, err := os.ReadFile(filepath.Join(b.HomeDir(testID), "probe"))
	if err != nil || !strings.Contains(string(probe), "probe done") || !strings.Contains(string(probe), "== ancestors") {
		t.Fatalf("the install script did not run to its end: %v\n%s", err, probe)
	}
	if strings.Contains(string(probe), token) {
		t.Errorf("the install script found the token:\n%s", probe)
	}
	if env := ask(t, b, "/env", nil); strings.Contains(env, token) {
		t.Errorf("the program's environment holds the token:\n%s", env)
	}
}
