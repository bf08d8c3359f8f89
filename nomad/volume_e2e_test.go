package nomad

import (
	"os"
	"path/filepath"
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

// TestE2EReviveVolumeKeepsHome: registering a home volume again, as the
// backend does with one Nomad keeps unavailable on a ready node, is
// accepted by a real Nomad and keeps the volume: its id, its path, its
// files, and it turns ready again.
func TestE2EReviveVolumeKeepsHome(t *testing.T) {
	nomadtest.Binary(t)
	a := nomadtest.Start(t, "")
	b := e2eBackend(t, a, t.TempDir(), e2eConfig{})
	const wsID = "01jb3x7k9q2m5n8p4r6s0trevv"
	if err := b.ProvisionVolume(t.Context(), controller.VolumeSpec{WorkspaceID: wsID, UID: os.Getuid(), GID: os.Getgid()}); err != nil {
		t.Fatal(err)
	}
	before := observeUntil(t, b, wsID, "volume ready", func(o controller.Observed) bool { return o.VolumeReady })
	home, err := b.HomeDir(t.Context(), wsID)
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(home, "notes.txt")
	if err := os.WriteFile(file, []byte("kept"), 0o600); err != nil {
		t.Fatal(err)
	}

	if err := b.reviveVolume(t.Context(), before.VolumeID); err != nil {
		t.Fatal(err)
	}
	vol, _, err := a.Client.HostVolumes().Get(before.VolumeID, nil)
	if err != nil {
		t.Fatal(err)
	}
	if vol.ModifyIndex <= vol.CreateIndex {
		t.Errorf("volume modify index %d, create index %d: the registration did not reach Nomad", vol.ModifyIndex, vol.CreateIndex)
	}
	after := observeUntil(t, b, wsID, "volume ready again", func(o controller.Observed) bool { return o.VolumeReady })
	if after.VolumeID != before.VolumeID || after.NodeID != before.NodeID {
		t.Errorf("volume %s on %s after registering again, want %s on %s", after.VolumeID, after.NodeID, before.VolumeID, before.NodeID)
	}
	if got, err := b.HomeDir(t.Context(), wsID); err != nil || got != home {
		t.Errorf("home %q (%v) after registering again, want %q", got, err, home)
	}
	if data, err := os.ReadFile(file); err != nil || string(data) != "kept" {
		t.Errorf("file in the home after registering again: %q, %v", data, err)
	}
}
