package nomad

import (
	"os"
	"testing"

	"github.com/codehub-io/codehub/controller"
	"github.com/codehub-io/codehub/internal/nomadtest"
)

// TestE2EVolumeFollowsDatacenters: the home volume is created only on a
// node of the configured datacenters, where its workspace job may run; the
// dev agent's node is in dc1.
func TestE2EVolumeFollowsDatacenters(t *testing.T) {
	nomadtest.Binary(t)
	a := nomadtest.Start(t, "")
	spec := func(wsID string) controller.VolumeSpec {
		return controller.VolumeSpec{WorkspaceID: wsID, UID: os.Getuid(), GID: os.Getgid()}
	}

	elsewhere := e2eBackend(t, a, t.TempDir(), e2eConfig{datacenters: []string{"dc2"}})
	const wsOut = "01jb3x7k9q2m5n8p4r6s0t1dc2"
	if err := elsewhere.ProvisionVolume(t.Context(), spec(wsOut)); err == nil {
		t.Fatal("volume created although no node is in the workspace datacenters")
	}
	if snap, err := elsewhere.Observe(t.Context()); err != nil {
		t.Fatal(err)
	} else if snap.Workspaces[wsOut].VolumeExists {
		t.Fatal("a volume exists outside the workspace datacenters")
	}

	here := e2eBackend(t, a, t.TempDir(), e2eConfig{datacenters: []string{"dc2", "dc*"}})
	const wsIn = "01jb3x7k9q2m5n8p4r6s0t1dc1"
	if err := here.ProvisionVolume(t.Context(), spec(wsIn)); err != nil {
		t.Fatal(err)
	}
	observeUntil(t, here, wsIn, "volume ready", func(o controller.Observed) bool { return o.VolumeReady })
}
