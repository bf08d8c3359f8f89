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
