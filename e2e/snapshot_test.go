package e2e

import (
	"bytes"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/codehub-io/codehub/archive"
	"github.com/codehub-io/codehub/internal/nomadtest"
	"github.com/codehub-io/codehub/internal/testenv"
)

// snapshotSettings snapshot running homes every 5 s.
const snapshotSettings = `  snapshot_interval = "5s"
`

// TestSnapshots: on the single-machine backend, a running home's changes
// reach S3 while it runs, each snapshot incremental on the one before,
// without stopping the workspace; an unchanged home uploads nothing yet
// its recovery point moves on.
func TestSnapshots(t *testing.T) {
	cfg := localConfig(t)
	cfg.workspace = "workspace {\n" + snapshotSettings + "}\n"
	srv := startServer(t, cfg)
	snapshotLifecycle(t, srv, func(t *testing.T, id string) string {
		return filepath.Join(srv.dataDir, "volumes", "ws-"+id+"-home")
	})
}

func snapshotLifecycle(t *testing.T, srv *server, home func(t *testing.T, id string) string) {
	c := login(t, srv)
	ws := createRunning(t, c, "snapshots")

	// write puts a new notes.bin into the running home and waits for a
	// snapshot that holds it: the recovery point passes the write.
	write := func(content []byte, done func([]apiArchive) bool) []apiArchive {
		t.Helper()
		wrote := time.Now()
		if err := os.WriteFile(filepath.Join(home(t, ws.ID), "notes.bin"), content, 0o644); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(2 * time.Minute)
		for {
			rp := recoveryPoint(t, c, ws.ID)
			if rp.ArchivedAt != nil && rp.ArchivedAt.After(wrote) {
				if rp.Current {
					t.Fatalf("a running home's recovery point says current: %+v", rp)
				}
				as := archives(t, c, ws.ID)
				if done(as) {
					return as
				}
			}
			if time.Now().After(deadline) {
				t.Fatalf("no snapshot after the write at %s: recovery point %+v, archives %+v", wrote, rp, archives(t, c, ws.ID))
			}
			time.Sleep(250 * time.Millisecond)
		}
	}
	running := func() {
		t.Helper()
		var got apiWorkspace
		if code := c.do("GET", "/api/v1/workspaces/"+ws.ID, nil, &got); code != http.StatusOK || got.Phase != "RUNNING" {
			t.Fatalf("the workspace during snapshots: %d %+v", code, got)
		}
	}

	first := randomBytes(t)
	as := write(first, func(as []apiArchive) bool { return len(as) == 1 && as[0].Current })
	running()
	checkDownload(t, c, ws.ID, as[0], first)

	second := randomBytes(t)
	latest := write(second, func(as []apiArchive) bool { return len(as) >= 1 && as[0].Current && as[0].ID != as[len(as)-1].ID })
	if latest[0].BuildsOn != as[0].ID {
		t.Fatalf("second snapshot %+v: want one building on %s", latest[0], as[0].ID)
	}
	// Incremental: the 128 KiB of random bytes and little else.
	if latest[0].Size > 160<<10 {
		t.Errorf("second snapshot stored %d bytes for a 128 KiB change", latest[0].Size)
	}
	running()
	checkDownload(t, c, ws.ID, latest[0], second)

	// Untouched for several intervals: no new archive, a newer recovery
	// point.
	before := recoveryPoint(t, c, ws.ID)
	time.Sleep(12 * time.Second)
	after := recoveryPoint(t, c, ws.ID)
	if now := archives(t, c, ws.ID); now[0].ID != latest[0].ID || len(now) != len(latest) {
		t.Fatalf("archives of an untouched running home: %+v, before %+v", now, latest)
	}
	if after.ArchivedAt == nil || !after.ArchivedAt.After(*before.ArchivedAt) {
		t.Fatalf("recovery point of an untouched running home stayed at %v (was %v)", after.ArchivedAt, before.ArchivedAt)
	}
	running()
}

// TestNomadSnapshots is TestSnapshots on real Nomad under raw_exec: the
// agent in the workspace job reads the home on its node.
func TestNomadSnapshots(t *testing.T) {
	agent := nomadtest.Start(t, "")
	cfg := nomadConfig(t, agent)
	cfg.backend = strings.Replace(cfg.backend, "workspace {\n", "workspace {\n"+snapshotSettings, 1)
	srv := startServer(t, cfg)
	snapshotLifecycle(t, srv, func(t *testing.T, id string) string { return volumePath(t, agent, id) })
}

// TestNomadSnapshotNodeLoss: a running home's node vanishes, disk and all.
// What its last snapshot held comes back on the other node once the admin
// accepts losing what came after, which the refusal names.
func TestNomadSnapshotNodeLoss(t *testing.T) {
	cluster := nomadtest.StartCluster(t, "node-a", "node-b")
	agent := &nomadtest.Agent{Addr: cluster.Addr, Client: cluster.Client}
	cfg := nomadConfig(t, agent)
	cfg.backend = strings.Replace(cfg.backend, "workspace {\n", "workspace {\n"+snapshotSettings, 1)
	srv := startServer(t, cfg)
	c := login(t, srv)
	a, b := cluster.Node(t, "node-a"), cluster.Node(t, "node-b")
	if _, err := cluster.Client.Nodes().ToggleEligibility(b.NodeID, false, nil); err != nil {
		t.Fatal(err)
	}
	ws := createRunning(t, c, "lost")
	home := volumePath(t, agent, ws.ID)
	content := randomBytes(t)
	wrote := time.Now()
	if err := os.WriteFile(filepath.Join(home, "notes.bin"), content, 0o644); err != nil {
		t.Fatal(err)
	}
	nomadtest.Eventually(t, 2*time.Minute, "a snapshot holding the write", func() bool {
		rp := recoveryPoint(t, c, ws.ID)
		return rp.ArchivedAt != nil && rp.ArchivedAt.After(wrote)
	})
	if _, err := cluster.Client.Nodes().ToggleEligibility(b.NodeID, true, nil); err != nil {
		t.Fatal(err)
	}

	// The machine is gone: its client, what its tasks left running, its
	// disk.
	a.Kill(t)
	killProcessesUnder(filepath.Dir(a.HostVolumesDir))
	if err := os.RemoveAll(home); err != nil {
		t.Fatal(err)
	}
	a.WaitStatus(t, 2*time.Minute, api.NodeStatusDown)

	path := "/api/v1/admin/workspaces/" + ws.ID + "/restore-elsewhere"
	var refusal struct {
		Error struct {
			Code    string `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	var key string
	nomadtest.Eventually(t, time.Minute, "the restore elsewhere refused with what it loses", func() bool {
		resp, err := c.http.Post(c.base+path, "application/json", strings.NewReader(`{}`))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		as := archives(t, c, ws.ID)
		if resp.StatusCode != http.StatusConflict || len(as) == 0 || !as[0].Current {
			return false
		}
		if err := json.NewDecoder(resp.Body).Decode(&refusal); err != nil {
			t.Fatal(err)
		}
		// Until the server sees the node down it refuses otherwise: the
		// node still serves the home.
		if refusal.Error.Code != "CONFIRMATION_REQUIRED" {
			return false
		}
		key = archive.Key(ws.ID, as[0].ID)
		return true
	})
	if !strings.Contains(refusal.Error.Message, key) || !strings.Contains(refusal.Error.Message, "node-a") {
		t.Fatalf("the refusal does not name the snapshot %s and the node: %+v", key, refusal)
	}
	if code := c.do("POST", path, map[string]string{"confirm_archive_key": key}, nil); code != http.StatusOK {
		t.Fatalf("confirmed restore elsewhere: %d", code)
	}
	c.settle(ws.ID, "RUNNING", time.Now())
	vols := volumes(t, agent, ws.ID)
	if len(vols) != 1 || vols[0].NodeID != b.NodeID {
		t.Fatalf("volumes after the restore elsewhere: %+v, want one on node-b", vols)
	}
	got, err := os.ReadFile(filepath.Join(volumePath(t, agent, ws.ID), "notes.bin"))
	if err != nil || !bytes.Equal(got, content) {
		t.Fatalf("the snapshot's file on node-b: %v", err)
	}
}

// killProcessesUnder SIGKILLs every process whose working directory is
// below dir: what a vanished node's tasks left running.
func killProcessesUnder(dir string) {
	for _, p := range testenv.Processes(func(p testenv.Proc) bool {
		return p.Cwd == dir || strings.HasPrefix(p.Cwd, dir+"/")
	}) {
		_ = syscall.Kill(p.PID, syscall.SIGKILL)
	}
}
