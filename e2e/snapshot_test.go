package e2e

import (
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"
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
