package nomad

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/codehub-io/codehub/controller"
	"github.com/codehub-io/codehub/internal/nomadtest"
	"github.com/codehub-io/codehub/workspace"
)

// TestE2ERetryAfterCrash: a workspace whose program crashed (its allocation
// failed, the job is dead but not stopped) runs again when the controller
// retries the start with the same spec.
func TestE2ERetryAfterCrash(t *testing.T) {
	nomadtest.Binary(t)
	bins := t.TempDir()
	server := nomadtest.BuildProgram(t, bins, "./testdata/wsserver", "wsserver")
	// Fails its first two runs (the allocation's run and its one restart),
	// then serves: a crash that a fresh allocation gets past.
	flaky := filepath.Join(bins, "flaky")
	script := "#!/bin/sh\n" +
		`n=$(cat "$HOME/.fails" 2>/dev/null || echo 0)` + "\n" +
		`if [ "$n" -lt 2 ]; then echo $((n+1)) > "$HOME/.fails"; echo "flaky: cannot find module './cli'" >&2; exit 3; fi` + "\n" +
		`exec ` + server + ` "$@"` + "\n"
	if err := os.WriteFile(flaky, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	a := nomadtest.Start(t, "")
	b := e2eBackend(t, a, bins, e2eConfig{command: flaky})
	ctx := t.Context()
	const wsID = "01jb3x7k9q2m5n8p4r6s0t1crh"

	if err := b.ProvisionVolume(ctx, controller.VolumeSpec{WorkspaceID: wsID, UID: os.Getuid(), GID: os.Getgid()}); err != nil {
		t.Fatal(err)
	}
	observeUntil(t, b, wsID, "volume ready", func(o controller.Observed) bool { return o.VolumeReady })
	spec := controller.WorkspaceSpec{WorkspaceID: wsID, OwnerID: "01owner0000000000000000000"}
	if err := b.StartWorkspace(ctx, spec); err != nil {
		t.Fatal(err)
	}
	o := observeUntil(t, b, wsID, "start failure", func(o controller.Observed) bool { return o.Failure != nil && !o.ContainerLive })
	if o.Failure.Reason != workspace.ReasonStartFailed {
		t.Fatalf("failure = %+v, want StartFailed", o.Failure)
	}
	// The failure says what the program itself said.
	if !strings.Contains(o.Failure.Message, "exited with code 3") || !strings.Contains(o.Failure.Message, "flaky: cannot find module './cli'") {
		t.Errorf("failure message %q lacks the exit code or the program's stderr", o.Failure.Message)
	}

	// The controller's retry: the same spec again.
	if err := b.StartWorkspace(ctx, spec); err != nil {
		t.Fatal(err)
	}
	o = observeUntil(t, b, wsID, "retried start ready or failed again", func(o controller.Observed) bool {
		return o.UpstreamReady || (o.Failure != nil && !o.ContainerLive)
	})
	if !o.UpstreamReady || o.Failure != nil {
		t.Fatalf("after the retry: %+v, want the workspace running from a fresh allocation", o)
	}
}
