package nomad

import (
	"bytes"
	"crypto/rand"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/nomad/api"

	"github.com/codehub-io/codehub/archive"
	"github.com/codehub-io/codehub/controller"
	"github.com/codehub-io/codehub/internal/nomadtest"
	"github.com/codehub-io/codehub/store"
	"github.com/codehub-io/codehub/workspace"
)

// fleetHarness is the controller harness on a loopback cluster of two
// clients.
type fleetHarness struct {
	*controllerHarness
	cluster *nomadtest.Cluster
}

// shortTimeouts is the controller's configuration with operation timeouts
// short enough that a test can wait past every one of them.
func shortTimeouts() controller.Config {
	cfg := controller.DefaultConfig()
	for op := range cfg.Timeouts {
		cfg.Timeouts[op] = 20 * time.Second
	}
	cfg.BackoffBase, cfg.BackoffMax = time.Second, 2*time.Second
	return cfg
}

func newFleetHarness(t testing.TB, withCodehub bool, cfg controller.Config) *fleetHarness {
	t.Helper()
	nomadtest.Binary(t)
	f := &fleetHarness{}
	f.controllerHarness = newControllerHarnessOn(t, withCodehub, func() *nomadtest.Agent {
		f.cluster = nomadtest.StartCluster(t, "node-a", "node-b")
		return &nomadtest.Agent{Addr: f.cluster.Addr, Client: f.cluster.Client}
	}, cfg)
	return f
}

// homeVolumes returns the node ids of every home volume of wsID.
func (f *fleetHarness) homeVolumes(t testing.TB, wsID string) []string {
	t.Helper()
	vols, _, err := f.cluster.Client.HostVolumes().List(nil, &api.QueryOptions{Prefix: controller.VolumeName(wsID)})
	if err != nil {
		t.Fatal(err)
	}
	var nodes []string
	for _, v := range vols {
		nodes = append(nodes, v.NodeID)
	}
	return nodes
}

// holder is the cluster client holding the one home volume of wsID.
func (f *fleetHarness) holder(t testing.TB, wsID string) *nomadtest.ClusterClient {
	t.Helper()
	nodes := f.homeVolumes(t, wsID)
	if len(nodes) != 1 {
		t.Fatalf("workspace %s has %d home volumes, want 1", wsID, len(nodes))
	}
	for _, cc := range f.cluster.Clients {
		if cc.NodeID == nodes[0] {
			return cc
		}
	}
	t.Fatalf("home of %s is on unknown node %s", wsID, nodes[0])
	return nil
}

// tickFor runs passes for d, failing on ERROR, and returns the row.
func (f *fleetHarness) tickFor(id string, d time.Duration) workspace.Workspace {
	end := time.Now().Add(d)
	return f.tickUntil(id, "time to pass", func(workspace.Workspace) bool { return time.Now().After(end) })
}

// writeHome writes random bytes to a file in the workspace's home.
func (f *fleetHarness) writeHome(t testing.TB, wsID string) []byte {
	t.Helper()
	home, err := f.backend.HomeDir(t.Context(), wsID)
	if err != nil {
		t.Fatal(err)
	}
	content := make([]byte, 128<<10)
	if _, err := rand.Read(content); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(home, "project.bin"), content, 0o600); err != nil {
		t.Fatal(err)
	}
	return content
}

// served is the file the running workspace serves from its home.
func (f *fleetHarness) served(t *testing.T, wsID string) []byte {
	t.Helper()
	addr, err := NewServiceResolver(hclog.NewNullLogger(), f.cluster.Client, ResolverOptions{Namespace: "default"}).Resolve(t.Context(), wsID)
	if err != nil {
		t.Fatal(err)
	}
	return fetch(t, "http://"+addr+"/files/project.bin")
}

func (f *fleetHarness) create(t testing.TB, name string) string {
	t.Helper()
	created, err := f.svc.Create(t.Context(), workspace.CreateRequest{OwnerID: f.owner, Name: name})
	if err != nil {
		t.Fatal(err)
	}
	return created.Workspace.ID
}

func (f *fleetHarness) desire(t testing.TB, id string, d workspace.DesiredState) {
	t.Helper()
	if _, err := f.svc.SetDesired(t.Context(), id, d, workspace.CauseUser); err != nil {
		t.Fatal(err)
	}
}

// TestE2EFleetNodeLoss kills the client holding a never-archived STANDBY
// home and leaves it down past every operation timeout while its owner
// opens the workspace: no empty home appears anywhere, no ERROR, and the
// workspace names the node it waits for. Once the client is back the
// workspace starts with its files.
func TestE2EFleetNodeLoss(t *testing.T) {
	f := newFleetHarness(t, false, shortTimeouts())
	id := f.create(t, "lost")
	f.tickUntil(id, "RUNNING", settled(workspace.PhaseRunning))
	content := f.writeHome(t, id)
	f.desire(t, id, workspace.DesiredStandby)
	f.tickUntil(id, "STANDBY", settled(workspace.PhaseStandby))
	node := f.holder(t, id)

	node.Kill(t)
	node.WaitStatus(t, time.Minute, api.NodeStatusDown)
	f.desire(t, id, workspace.DesiredRunning)
	w := f.tickFor(id, 45*time.Second)

	if got := workspace.DisplayPhase(w); got != workspace.DisplayUnavailable {
		t.Errorf("workspace shows %s while its node is down, want %s", got, workspace.DisplayUnavailable)
	}
	if msg, _ := workspace.Unavailable(w); !strings.Contains(msg, "node "+node.Name+" is down") {
		t.Errorf("workspace says %q, want the node it waits for", msg)
	}
	if nodes := f.homeVolumes(t, id); len(nodes) != 1 || nodes[0] != node.NodeID {
		t.Fatalf("home volumes on nodes %v while %s is down, want only %s", nodes, node.Name, node.NodeID)
	}

	node.Start(t)
	node.WaitReady(t)
	// Nomad may keep a returned client's volumes unavailable for minutes
	// (docs/nomad.md) and places nothing on them meanwhile: the workspace
	// must run within 3 minutes of Nomad last calling its home ready.
	var state api.HostVolumeState
	var ready time.Time
	deadline := time.Now().Add(8 * time.Minute)
	for {
		if _, err := f.ctl.Tick(t.Context(), f.epoch); err != nil {
			t.Fatalf("tick: %v", err)
		}
		vols, _, err := f.cluster.Client.HostVolumes().List(nil, &api.QueryOptions{Prefix: controller.VolumeName(id)})
		if err != nil {
			t.Fatal(err)
		}
		var now api.HostVolumeState
		if len(vols) == 1 {
			now = vols[0].State
		}
		if now != state {
			t.Logf("home volume %q", now)
			state = now
			if now == api.HostVolumeStateReady {
				ready = time.Now()
			}
		}
		w := f.row(t, id)
		if w.Phase == workspace.PhaseError {
			t.Fatalf("workspace in ERROR: %v %v", deref(w.ErrorReason), deref(w.ErrorMessage))
		}
		if settled(workspace.PhaseRunning)(w) {
			break
		}
		if time.Now().After(deadline) || (state == api.HostVolumeStateReady && time.Since(ready) > 3*time.Minute) {
			t.Fatalf("workspace not RUNNING once its node was back (home volume %q): %s %s %v", state, w.Phase, w.Operation, deref(w.ErrorMessage))
		}
		time.Sleep(time.Second)
	}
	if !bytes.Equal(f.served(t, id), content) {
		t.Fatal("the workspace came back with other files than it had")
	}
}

// TestE2EFleetDrain drains the node holding a RUNNING, a STANDBY and an
// ARCHIVED workspace, with backups on. Nomad places nothing on a drained
// node, not even an archive job. The STANDBY home, backed up when it
// stopped, is held whole by its archive: it leaves on its own, restored on
// the other node in STANDBY with its files. The ARCHIVED one, once opened,
// is restored there too. The RUNNING one changed since it was last
// archived (never, here): the drain stops its program, the job's poststop
// task archives the home on the drained node, and it runs again on the
// other node with its files. Nothing goes to ERROR, the drained node keeps
// no home, and the drain completes.
func TestE2EFleetDrain(t *testing.T) {
	cfg := shortTimeouts()
	cfg.BackupInterval = time.Second
	f := newFleetHarness(t, true, cfg)
	a, b := f.cluster.Node(t, "node-a"), f.cluster.Node(t, "node-b")
	// Every home starts on node-a: node-b takes none meanwhile.
	if _, err := f.cluster.Client.Nodes().ToggleEligibility(b.NodeID, false, nil); err != nil {
		t.Fatal(err)
	}
	running, standby, archived := f.create(t, "running"), f.create(t, "standby"), f.create(t, "archived")
	for _, id := range []string{running, standby, archived} {
		f.tickUntil(id, "RUNNING", settled(workspace.PhaseRunning))
	}
	runningContent := f.writeHome(t, running)
	standbyContent := f.writeHome(t, standby)
	f.desire(t, standby, workspace.DesiredStandby)
	f.desire(t, archived, workspace.DesiredStandby)
	f.tickUntil(archived, "STANDBY", settled(workspace.PhaseStandby))
	content := f.writeHome(t, archived)
	f.desire(t, archived, workspace.DesiredArchived)
	f.tickUntil(archived, "ARCHIVED", settled(workspace.PhaseArchived))
	f.tickUntil(standby, "STANDBY and backed up", func(w workspace.Workspace) bool {
		return settled(workspace.PhaseStandby)(w) && !controller.HomeChanged(w)
	})
	if _, err := f.cluster.Client.Nodes().ToggleEligibility(b.NodeID, true, nil); err != nil {
		t.Fatal(err)
	}

	if _, err := f.cluster.Client.Nodes().UpdateDrain(a.NodeID, &api.DrainSpec{Deadline: 10 * time.Minute}, false, nil); err != nil {
		t.Fatal(err)
	}
	f.tickUntil(standby, "STANDBY on the other node", func(w workspace.Workspace) bool {
		return settled(workspace.PhaseStandby)(w) && slices.Equal(f.homeVolumes(t, standby), []string{b.NodeID})
	})
	f.tickUntil(standby, "its progress saying it moved", func(w workspace.Workspace) bool {
		return w.Conditions[workspace.CondMoving].Reason == workspace.ReasonMoved
	})
	for id, want := range map[string][]byte{archived: content, standby: standbyContent} {
		f.desire(t, id, workspace.DesiredRunning)
		f.tickUntil(id, "RUNNING after a restore", settled(workspace.PhaseRunning))
		if got := f.holder(t, id); got != b {
			t.Errorf("%s restored on %s, want %s (the drained node takes nothing)", id, got.Name, b.Name)
		}
		if !bytes.Equal(f.served(t, id), want) {
			t.Fatalf("workspace %s serves other bytes than were archived", id)
		}
	}

	// The running one: the drain stopped its program, the job's
	// stop-archive task saved the home, and it runs again on node-b with
	// its files, without anyone asking.
	f.tickUntil(running, "RUNNING on the other node", func(w workspace.Workspace) bool {
		return settled(workspace.PhaseRunning)(w) && slices.Equal(f.homeVolumes(t, running), []string{b.NodeID})
	})
	if !bytes.Equal(f.served(t, running), runningContent) {
		t.Fatal("the running workspace serves other bytes than it had when the drain began")
	}
	w := f.tickUntil(running, "its progress saying it moved", func(w workspace.Workspace) bool {
		return w.Conditions[workspace.CondMoving].Reason == workspace.ReasonMoved
	})
	if w.DesiredState != workspace.DesiredRunning || w.ErrorReason != nil {
		t.Errorf("desired %s error %s after the move, want RUNNING and none", w.DesiredState, deref(w.ErrorReason))
	}
	if got := archive.OpID(deref(w.ArchiveKey)); got == "" {
		t.Errorf("archive key %q, want the stop archive of its run", deref(w.ArchiveKey))
	}
	for _, id := range []string{running, standby, archived} {
		if slices.Contains(f.homeVolumes(t, id), a.NodeID) {
			t.Errorf("the drained node still holds the home of %s", id)
		}
	}
	// The drain itself completes: nothing codehub did keeps it waiting.
	nomadtest.Eventually(t, 2*time.Minute, "the drain complete", func() bool {
		n, _, err := f.cluster.Client.Nodes().Info(a.NodeID, nil)
		return err == nil && n.DrainStrategy == nil
	})
}

// restartController replaces the controller with a new one under a new
// leader epoch, as a codehub killed with SIGKILL and started again: only
// the database and Nomad remember anything.
func (f *fleetHarness) restartController(t testing.TB) {
	t.Helper()
	epoch, err := store.BumpEpoch(t.Context(), f.pool, "nomad-e2e-restarted")
	if err != nil {
		t.Fatal(err)
	}
	f.ctl, f.epoch = f.newController(), epoch
}

// tickAllUntil runs passes until cond holds for every workspace, for at
// most five minutes.
func (f *fleetHarness) tickAllUntil(t testing.TB, what string, ids []string, cond func(workspace.Workspace) bool) {
	t.Helper()
	f.tickAllWithin(t, 5*time.Minute, what, ids, cond)
}

// tickAllWithin is tickAllUntil for at most limit.
func (f *fleetHarness) tickAllWithin(t testing.TB, limit time.Duration, what string, ids []string, cond func(workspace.Workspace) bool) {
	t.Helper()
	nomadtest.Eventually(t, limit, what, func() bool {
		if _, err := f.ctl.Tick(t.Context(), f.epoch); err != nil {
			t.Fatalf("tick: %v", err)
		}
		for _, id := range ids {
			w, err := f.svc.Get(t.Context(), id)
			if err != nil {
				t.Fatal(err)
			}
			if w.Phase == workspace.PhaseError {
				t.Fatalf("workspace %s in ERROR: %v %v", id, deref(w.ErrorReason), deref(w.ErrorMessage))
			}
			if !cond(w) {
				return false
			}
		}
		return true
	})
}

// TestE2EFleetEvacuate evacuates the node holding a RUNNING, a STANDBY and
// an ARCHIVED workspace, with codehub's controller replaced (as after a
// kill -9) half-way: every home ends on the other node byte-identical and
// in its desired state, the evacuated node holds no ws- volume, each moved
// home was archived once, and nothing went to ERROR.
func TestE2EFleetEvacuate(t *testing.T) {
	f := newFleetHarness(t, true, shortTimeouts())
	ctx := t.Context()
	a, b := f.cluster.Node(t, "node-a"), f.cluster.Node(t, "node-b")
	if _, err := f.cluster.Client.Nodes().ToggleEligibility(b.NodeID, false, nil); err != nil {
		t.Fatal(err)
	}
	running, standby, archived := f.create(t, "running"), f.create(t, "standby"), f.create(t, "archived")
	ids := []string{running, standby, archived}
	f.tickAllUntil(t, "all RUNNING", ids, settled(workspace.PhaseRunning))
	files := map[string][]byte{}
	for _, id := range ids {
		files[id] = f.writeHome(t, id)
	}
	f.desire(t, standby, workspace.DesiredStandby)
	f.desire(t, archived, workspace.DesiredArchived)
	f.tickUntil(standby, "STANDBY", settled(workspace.PhaseStandby))
	w := f.tickUntil(archived, "ARCHIVED", settled(workspace.PhaseArchived))
	archiveKey := deref(w.ArchiveKey)
	if _, err := f.cluster.Client.Nodes().ToggleEligibility(b.NodeID, true, nil); err != nil {
		t.Fatal(err)
	}

	if _, err := store.StartEvacuation(ctx, f.pool, store.Evacuation{NodeID: a.NodeID, NodeName: a.Name, RequestedBy: "e2e"}); err != nil {
		t.Fatal(err)
	}
	f.tickAllUntil(t, "a move under way", []string{running}, func(w workspace.Workspace) bool {
		_, moving := workspace.Moving(w)
		return moving && (w.Operation == workspace.OpArchiving || w.Operation == workspace.OpStopping)
	})
	f.restartController(t)
	f.tickAllUntil(t, "every home in its desired state", ids, func(w workspace.Workspace) bool {
		return w.Operation == workspace.OpNone && w.Phase == workspace.TargetPhase(w.DesiredState)
	})
	// The pass after the last operation records the move as done.
	f.tickAllUntil(t, "every move recorded", []string{running, standby}, func(w workspace.Workspace) bool {
		return w.Conditions[workspace.CondMoving].Reason == workspace.ReasonMoved
	})

	for _, id := range []string{running, standby} {
		if w, _ := f.svc.Get(ctx, id); w.Conditions[workspace.CondMoving].Reason != workspace.ReasonMoved {
			t.Errorf("workspace %s progress %+v, want moved", id, w.Conditions[workspace.CondMoving])
		}
		if got := f.holder(t, id); got != b {
			t.Errorf("home of %s is on %s, want %s", id, got.Name, b.Name)
		}
		home, err := f.backend.HomeDir(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(filepath.Join(home, "project.bin"))
		if err != nil || !bytes.Equal(got, files[id]) {
			t.Errorf("home of %s after the move differs from before (%v)", id, err)
		}
		checkArchivedOnce(t, archive.NewStore(hclog.NewNullLogger(), f.s3.Client, f.s3.Bucket), id)
	}
	if !bytes.Equal(f.served(t, running), files[running]) {
		t.Error("the moved running workspace serves other bytes")
	}
	if w, _ := f.svc.Get(ctx, archived); deref(w.ArchiveKey) != archiveKey || len(f.homeVolumes(t, archived)) != 0 {
		t.Errorf("the archived workspace changed: key %s, volumes %v", deref(w.ArchiveKey), f.homeVolumes(t, archived))
	}
	vols, _, err := f.cluster.Client.HostVolumes().List(nil, &api.QueryOptions{Prefix: controller.NamePrefix})
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range vols {
		if v.NodeID == a.NodeID {
			t.Errorf("evacuated node still holds %s", v.Name)
		}
	}
}

// TestE2EFleetArchivedNodeLoss kills the client holding a home restored
// from an archive and changed since. The admin is told what restoring the
// archive elsewhere would lose, confirms, and the workspace comes back on
// the other node with the archive's files; the lost node's return changes
// nothing.
func TestE2EFleetArchivedNodeLoss(t *testing.T) {
	f := newFleetHarness(t, true, shortTimeouts())
	ctx := t.Context()
	id := f.create(t, "archived-lost")
	f.tickUntil(id, "RUNNING", settled(workspace.PhaseRunning))
	archived := f.writeHome(t, id)
	f.desire(t, id, workspace.DesiredArchived)
	w := f.tickUntil(id, "ARCHIVED", settled(workspace.PhaseArchived))
	key := deref(w.ArchiveKey)
	f.desire(t, id, workspace.DesiredStandby)
	f.tickUntil(id, "STANDBY after a restore", settled(workspace.PhaseStandby))
	f.writeHome(t, id) // a change the archive does not hold
	lost := f.holder(t, id)

	lost.Kill(t)
	lost.WaitStatus(t, time.Minute, api.NodeStatusDown)
	w = f.tickFor(id, 10*time.Second)
	if workspace.DisplayPhase(w) != workspace.DisplayUnavailable {
		t.Fatalf("workspace shows %s with its node down", workspace.DisplayPhase(w))
	}

	_, err := f.svc.RestoreElsewhere(ctx, id, "")
	var loss *workspace.LossError
	if !errors.As(err, &loss) || loss.ArchiveKey != key || loss.Node != lost.Name {
		t.Fatalf("unconfirmed restore elsewhere: %v, want what it would lose", err)
	}
	if _, err := f.svc.RestoreElsewhere(ctx, id, key); err != nil {
		t.Fatal(err)
	}
	f.desire(t, id, workspace.DesiredRunning)
	f.tickUntil(id, "RUNNING elsewhere", settled(workspace.PhaseRunning))
	if !bytes.Equal(f.served(t, id), archived) {
		t.Fatal("the workspace does not hold the archive's files")
	}

	lost.Start(t)
	lost.WaitReady(t)
	w = f.tickFor(id, 15*time.Second)
	if w.Phase != workspace.PhaseRunning || deref(w.ArchiveKey) != key {
		t.Fatalf("after the lost node returned: phase %s, archive %s", w.Phase, deref(w.ArchiveKey))
	}
	if !bytes.Equal(f.served(t, id), archived) {
		t.Fatal("the workspace changed files when the lost node returned")
	}
}

// checkArchivedOnce fails unless the home of id was uploaded whole at most
// once: its stop archive, then what changed since (the move's archive,
// incremental on it), and nothing archived twice.
func checkArchivedOnce(t *testing.T, store *archive.Store, id string) {
	t.Helper()
	list, err := store.List(t.Context(), id)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(list.Complete); n < 1 || n > 2 {
		t.Errorf("workspace %s has %d archives after one move, want its stop archive and at most one on it", id, n)
		return
	}
	if len(list.Complete) == 2 {
		meta, err := store.Stat(t.Context(), list.Complete[0])
		if err != nil || meta.Parent != list.Complete[1] {
			t.Errorf("workspace %s: archive %s builds on %q (%v), want %s", id, list.Complete[0], meta.Parent, err, list.Complete[1])
		}
	}
}
