package local

import (
	"context"
	"os"
	"path/filepath"
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

// TestFirstStartOfANamedWorkspace: the window title, written into the home
// at each start, does not keep a first start from cloning into it; the
// next start titles the window.
func TestFirstStartOfANamedWorkspace(t *testing.T) {
	b := codeServerBackend(t)
	stopOnCleanup(t, b)
	spec := controller.WorkspaceSpec{WorkspaceID: testID, Name: "service", RunID: "run-1", Repository: testenv.BareRepo(t, "service", map[string]string{"README": "hello"})}
	startWith(t, b, spec)
	waitFor(t, b, "ready", func(o controller.Observed) bool { return o.UpstreamReady })
	if got, err := os.ReadFile(filepath.Join(b.HomeDir(testID), "service", "README")); err != nil || string(got) != "hello" {
		t.Fatalf("clone in the home: %q, %v", got, err)
	}
	settings := filepath.Join(b.HomeDir(testID), machineSettings)
	if err := b.StopWorkspace(context.Background(), testID); err != nil {
		t.Fatal(err)
	}
	waitFor(t, b, "stopped", func(o controller.Observed) bool { return !o.ContainerLive })
	spec.RunID = "run-2"
	if err := b.StartWorkspace(context.Background(), spec); err != nil {
		t.Fatal(err)
	}
	if raw, err := os.ReadFile(settings); err != nil || !strings.Contains(string(raw), "service") {
		t.Fatalf("window title at the second start: %s, %v", raw, err)
	}
}
