package controller

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/codehub-io/codehub/archive"
	"github.com/codehub-io/codehub/workspace"
)

func TestGarbage(t *testing.T) {
	ops := []string{"01jb0000000000000000000001", "01jb0000000000000000000002", "01jb0000000000000000000003",
		"01jb0000000000000000000004", "01jb0000000000000000000005"}
	var keys []string
	for _, op := range ops {
		keys = append(keys, archive.Key(wsID, op))
	}
	k := func(i int) string { return keys[i-1] }
	deleted := ptr(t0)
	cases := []struct {
		name string
		w    workspace.Workspace
		want []string
	}{
		{"live keeps newest 3", workspace.Workspace{ID: wsID, Phase: workspace.PhaseRunning}, []string{k(2), k(1)}},
		{"live keeps its archive key", workspace.Workspace{ID: wsID, Phase: workspace.PhaseArchived, ArchiveKey: ptr(k(1))}, []string{k(2)}},
		{"live keeps its op id archive", workspace.Workspace{ID: wsID, Phase: workspace.PhaseError, OpID: ptr(ops[1])}, []string{k(1)}},
		// A drain's stop archive of the current run, not committed yet.
		{"live keeps its run's stop archive", workspace.Workspace{ID: wsID, Phase: workspace.PhaseStandby, RunID: ops[0]}, []string{k(2)}},
		{"deleted loses all", workspace.Workspace{ID: wsID, Phase: workspace.PhaseDeleted, DeletedAt: deleted, ArchiveKey: ptr(k(5))}, []string{k(5), k(4), k(3), k(2), k(1)}},
		{"deleted in ERROR keeps what recovery needs", workspace.Workspace{ID: wsID, Phase: workspace.PhaseError, DeletedAt: deleted,
			ArchiveKey: ptr(k(2)), OpID: ptr(ops[4])}, []string{k(4), k(3), k(1)}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := Garbage(c.w, keys, 3); !slices.Equal(got, c.want) {
				t.Errorf("garbage = %v, want %v", got, c.want)
			}
		})
	}
}

func TestStaleUploads(t *testing.T) {
	now := t0
	up := func(op string, age time.Duration) archive.Upload {
		return archive.Upload{Key: archive.Key(wsID, op), ID: op + "-upload", Initiated: now.Add(-age)}
	}
	killed, young, current := up(opOld, 3*time.Hour), up(opOld, 10*time.Minute), up(opNew, 5*time.Hour)
	uploads := []archive.Upload{killed, young, current}
	cases := []struct {
		name string
		w    workspace.Workspace
		want []archive.Upload
	}{
		{"idle: every old one", workspace.Workspace{ID: wsID, Phase: workspace.PhaseStandby}, []archive.Upload{killed, current}},
		{"archiving keeps its own upload however old", workspace.Workspace{ID: wsID, Phase: workspace.PhaseStandby,
			Operation: workspace.OpArchiving, OpID: ptr(opNew)}, []archive.Upload{killed}},
		{"a failed archive's op id does not protect its upload", workspace.Workspace{ID: wsID, Phase: workspace.PhaseStandby,
			OpID: ptr(opNew)}, []archive.Upload{killed, current}},
		{"deleted", workspace.Workspace{ID: wsID, Phase: workspace.PhaseDeleted, DeletedAt: ptr(t0)}, []archive.Upload{killed, current}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := StaleUploads(c.w, uploads, now, time.Hour); !slices.Equal(got, c.want) {
				t.Errorf("stale = %v, want %v", got, c.want)
			}
		})
	}
}

func TestGCRunner(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	live, gone, recent := h.create("live"), h.create("gone"), h.create("recent")
	put := func(ws workspace.Workspace, n int) []string {
		var keys []string
		for range n {
			key := archive.Key(ws.ID, workspace.NewID())
			h.backend.store.put(key, "x")
			keys = append(keys, key)
		}
		return keys
	}
	liveKeys := put(live, 5)
	put(gone, 2)
	recentKeys := put(recent, 2)
	h.exec(`UPDATE workspaces SET archive_key = $2 WHERE id = $1`, live.ID, liveKeys[0])
	h.exec(`UPDATE workspaces SET deleted_at = now() - interval '3 hours', desired_state = 'DELETED', phase = 'DELETED' WHERE id = $1`, gone.ID)
	h.exec(`UPDATE workspaces SET deleted_at = now() - interval '1 hour', desired_state = 'DELETED', phase = 'DELETED' WHERE id = $1`, recent.ID)

	// A killed archive attempt of the live workspace left an upload, and so
	// did a gone workspace; a third one has just begun.
	stale := []archive.Upload{
		{Key: archive.Key(live.ID, workspace.NewID()), ID: "killed", Initiated: time.Now().Add(-3 * time.Hour)},
		{Key: archive.Key(gone.ID, workspace.NewID()), ID: "gone", Initiated: time.Now().Add(-3 * time.Hour)},
	}
	fresh := archive.Upload{Key: archive.Key(live.ID, workspace.NewID()), ID: "fresh", Initiated: time.Now()}
	for _, u := range append(stale, fresh) {
		h.backend.store.uploads[u.ID] = u
	}

	cfg := GCConfig{KeepArchives: 3, DeletedGrace: 2 * time.Hour, DryRun: true}
	dry, err := NewGCRunner(hclog.NewNullLogger(), h.svc, h.backend.store, cfg).RunOnce(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(dry) != 3 || len(h.backend.store.keys(live.ID)) != 5 || len(h.backend.store.keys(gone.ID)) != 2 || len(h.backend.store.uploads) != 3 {
		t.Fatalf("dry run: named %v and deleted or aborted something", dry)
	}
	cfg.DryRun = false
	deleted, err := NewGCRunner(hclog.NewNullLogger(), h.svc, h.backend.store, cfg).RunOnce(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(deleted, dry) {
		t.Fatalf("deleted %v, dry run named %v", deleted, dry)
	}
	wantLive := append([]string{liveKeys[0]}, liveKeys[2:]...)
	if got := h.backend.store.keys(live.ID); !slices.Equal(got, wantLive) {
		t.Errorf("live archives %v, want %v (newest 3 and the archive key)", got, wantLive)
	}
	if got := h.backend.store.keys(gone.ID); len(got) != 0 {
		t.Errorf("archives of a workspace deleted 3h ago left: %v", got)
	}
	if got := h.backend.store.keys(recent.ID); !slices.Equal(got, recentKeys) {
		t.Errorf("archives of a workspace deleted 1h ago: %v, want %v", got, recentKeys)
	}
	if _, kept := h.backend.store.uploads["fresh"]; !kept || len(h.backend.store.uploads) != 1 {
		t.Errorf("unfinished uploads left: %v, want only the one just begun", h.backend.store.uploads)
	}
}

func TestAbandoned(t *testing.T) {
	now := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	op, current := workspace.NewID(), "archives/ws/01current/home.tar.zst"
	live := workspace.Workspace{ID: "ws", Phase: workspace.PhaseStandby, OpID: &op, ArchiveKey: &current}
	inFlight := archive.Key("ws", op)
	old, young := now.Add(-2*time.Hour), now.Add(-time.Minute)
	incomplete := []archive.Object{
		{Key: "archives/ws/01old/home.tar.zst", Modified: old},
		{Key: "archives/ws/01young/home.tar.zst", Modified: young},
		{Key: inFlight, Modified: old},
		{Key: current, Modified: old},
	}
	if got := Abandoned(live, incomplete, now, time.Hour); !slices.Equal(got, []string{"archives/ws/01old/home.tar.zst"}) {
		t.Errorf("live workspace: %v, want only the old unprotected one", got)
	}
	gone := live
	gone.Phase = workspace.PhaseDeleted
	if got := Abandoned(gone, incomplete, now, time.Hour); len(got) != len(incomplete) {
		t.Errorf("deleted workspace: %v, want all", got)
	}
}

// Half-written archives (an attempt killed between the object and its
// meta, or a deletion between its two removals) were never listed, so they
// stayed forever. The GC removes them, but re-reads the workspace before
// every removal: an archive claimed after the pass listed the bucket keeps
// its upload and its object. A deleted workspace left with nothing is not
// listed again.
func TestGCIncompleteArchivesAndRecheck(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	live, gone := h.create("live"), h.create("gone")
	old := time.Now().Add(-3 * time.Hour)
	store := h.backend.store
	halfLive := archive.Key(live.ID, workspace.NewID())
	store.incomplete[halfLive] = old
	store.incomplete[archive.Key(gone.ID, workspace.NewID())] = old
	store.put(archive.Key(gone.ID, workspace.NewID()), "x")
	h.exec(`UPDATE workspaces SET deleted_at = now() - interval '3 hours', desired_state = 'DELETED', phase = 'DELETED' WHERE id = $1`, gone.ID)

	// Between the pass's read of the rows and its removals, an archive of
	// the live workspace is claimed: its op id names an old upload (a retry
	// reuses the op id) and the half-written object beside it.
	claimed := workspace.NewID()
	retried := archive.Upload{Key: archive.Key(live.ID, claimed), ID: "retried", Initiated: old}
	store.uploads[retried.ID] = retried
	store.incomplete[retried.Key] = old
	store.listed = func() {
		h.exec(`UPDATE workspaces SET operation = 'ARCHIVING', op_id = $2 WHERE id = $1`, live.ID, claimed)
	}
	gc := NewGCRunner(hclog.NewNullLogger(), h.svc, store, GCConfig{KeepArchives: 3, DeletedGrace: 2 * time.Hour})
	if _, err := gc.RunOnce(ctx); err != nil {
		t.Fatal(err)
	}
	store.listed = nil
	if _, ok := store.uploads[retried.ID]; !ok {
		t.Error("aborted the upload of an archive claimed after the pass began")
	}
	if _, ok := store.incomplete[retried.Key]; !ok {
		t.Error("deleted the object of an archive claimed after the pass began")
	}
	if _, ok := store.incomplete[halfLive]; ok {
		t.Error("an old half-written archive of the live workspace is still there")
	}
	if l, _ := store.list(gone.ID); len(l.Complete)+len(l.Incomplete) != 0 {
		t.Errorf("archives of the deleted workspace left: %+v", l)
	}

	before := store.calls["List"]
	if _, err := gc.RunOnce(ctx); err != nil {
		t.Fatal(err)
	}
	if n := store.calls["List"] - before; n != 1 {
		t.Errorf("second pass listed %d workspaces, want only the live one", n)
	}
}

// An incremental archive needs every archive of its chain: the GC keeps
// them as long as it keeps the archive, however old they are.
func TestGCKeepsAncestorsOfKeptArchives(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	ws := h.create("chained")
	var keys []string // oldest first
	for range 6 {
		key := archive.Key(ws.ID, workspace.NewID())
		h.backend.store.put(key, "x")
		keys = append(keys, key)
	}
	// keys[5] builds on keys[4], which builds on keys[3], which builds on
	// the complete keys[0]; keys[1] and keys[2] are complete and unused.
	h.backend.store.chains[keys[5]] = []string{keys[4], keys[3], keys[0]}
	h.backend.store.chains[keys[4]] = []string{keys[3], keys[0]}
	h.backend.store.chains[keys[3]] = []string{keys[0]}
	h.exec(`UPDATE workspaces SET archive_key = $2 WHERE id = $1`, ws.ID, keys[5])

	cfg := GCConfig{KeepArchives: 2, DeletedGrace: time.Hour}
	deleted, err := NewGCRunner(hclog.NewNullLogger(), h.svc, h.backend.store, cfg).RunOnce(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{keys[2], keys[1]}; !slices.Equal(deleted, want) {
		t.Errorf("deleted %v, want %v (neither kept nor in a kept chain)", deleted, want)
	}
	want := []string{keys[0], keys[3], keys[4], keys[5]}
	if got := h.backend.store.keys(ws.ID); !slices.Equal(got, want) {
		t.Errorf("archives left %v, want %v", got, want)
	}
}
