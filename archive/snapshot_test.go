package archive

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"

	"github.com/hashicorp/go-hclog"
)

// snapshotThrough makes the snapshot at key of src on parent the way the
// server and the agent do, with the agent's stream in between.
func snapshotThrough(t *testing.T, store *Store, src, key, parent string) SnapshotResult {
	t.Helper()
	ctx := context.Background()
	req := store.SnapshotRequestFor(ctx, key, parent)
	// The request crosses the network as JSON.
	wire, err := json.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	var got SnapshotRequest
	if err := json.Unmarshal(wire, &got); err != nil {
		t.Fatal(err)
	}
	var stream bytes.Buffer
	if err := WriteSnapshot(ctx, hclog.NewNullLogger(), src, got, &stream); err != nil {
		t.Fatalf("snapshot %s on %q: %v", key, parent, err)
	}
	res, err := store.StoreSnapshot(ctx, req, &stream)
	if err != nil {
		t.Fatalf("store snapshot %s: %v", key, err)
	}
	return res
}

func TestSnapshotRoundTrip(t *testing.T) {
	store, _ := newTestStore(t)
	src := t.TempDir()
	makeTree(t, src, 4<<20)
	first := expectedSnapshot(t, src)
	full := snapshotThrough(t, store, src, chainKey(0), "")
	if !full.Full || full.Meta.Manifest == nil || full.Meta.Incremental() {
		t.Fatalf("first snapshot %+v: want a complete one with a manifest", full)
	}

	// Untouched: nothing is written, the archive stays what it was.
	same := snapshotThrough(t, store, src, chainKey(1), chainKey(0))
	if !same.Unchanged {
		t.Fatalf("snapshot of an untouched home: %+v, want unchanged", same)
	}
	if _, err := store.Stat(context.Background(), chainKey(1)); !errors.Is(err, ErrArchiveNotFound) {
		t.Fatalf("an unchanged snapshot wrote %s: %v", chainKey(1), err)
	}

	changeTree(t, src)
	after := expectedSnapshot(t, src)
	incr := snapshotThrough(t, store, src, chainKey(2), chainKey(0))
	if incr.Full || incr.Meta.Parent != chainKey(0) || incr.Stored != 4 || incr.Meta.Size > 16<<10 {
		t.Fatalf("snapshot after a few edits %+v: want 4 files on %s in a small object", incr, chainKey(0))
	}
	restoreEquals(t, store, chainKey(2), after)
	restoreEquals(t, store, chainKey(0), first)
	// A stop archive builds on a snapshot as on any archive.
	mustWrite(t, filepath.Join(src, "after-snapshot.txt"), "written later\n", 0o644)
	last := expectedSnapshot(t, src)
	meta, _ := archiveFrom(t, store, src, chainKey(3), chainKey(2))
	if meta.Parent != chainKey(2) {
		t.Fatalf("stop archive on a snapshot: %+v", meta)
	}
	restoreEquals(t, store, chainKey(3), last)
}

// A home in use changes under the snapshot: a file removed, replaced or
// truncated after the walk listed it is left out or stored as it was
// opened, never fails the snapshot, and the snapshot restores.
func TestSnapshotOfAHomeInUse(t *testing.T) {
	ctx := context.Background()
	src := t.TempDir()
	mustWrite(t, filepath.Join(src, "gone.txt"), "about to go\n", 0o644)
	mustWrite(t, filepath.Join(src, "replaced.txt"), "old content\n", 0o644)
	mustWrite(t, filepath.Join(src, "shrinks.txt"), "0123456789", 0o644)
	mustWrite(t, filepath.Join(src, "kept.txt"), "kept\n", 0o644)
	if err := os.Link(filepath.Join(src, "gone.txt"), filepath.Join(src, "link-to-gone")); err != nil {
		t.Fatal(err)
	}
	root, m, err := scanTree(ctx, hclog.NewNullLogger(), src, true)
	if err != nil {
		t.Fatal(err)
	}
	key := chainKey(0)
	m.header.Archive = key
	if _, err := planLayer(ctx, root, m, key, nil, true); err != nil {
		t.Fatal(err)
	}
	// Between the plan and the layer, the user goes on working.
	if err := os.Remove(filepath.Join(src, "gone.txt")); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(src, "link-to-gone")); err != nil {
		t.Fatal(err)
	}
	mustWrite(t, filepath.Join(src, "replaced.txt.new"), "new and longer content\n", 0o644)
	if err := os.Rename(filepath.Join(src, "replaced.txt.new"), filepath.Join(src, "replaced.txt")); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(filepath.Join(src, "shrinks.txt"), 4); err != nil {
		t.Fatal(err)
	}
	var read atomic.Int64
	var layer bytes.Buffer
	if err := writeLayer(ctx, root, m, key, true, true, &layer, &read); err != nil {
		t.Fatalf("live layer: %v", err)
	}
	byPath := map[string]Entry{}
	for _, e := range m.entries {
		byPath[e.Path] = e
	}
	if _, ok := byPath["gone.txt"]; ok {
		t.Error("a file removed before it was read is in the manifest")
	}
	if _, ok := byPath["link-to-gone"]; ok {
		t.Error("a hard link to a file left out is in the manifest")
	}
	if e := byPath["replaced.txt"]; e.Size != int64(len("new and longer content\n")) {
		t.Errorf("replaced file recorded with %d bytes, want the new file's", e.Size)
	}
	if e := byPath["shrinks.txt"]; e.Size != 4 {
		t.Errorf("truncated file recorded with %d bytes, want 4", e.Size)
	}
	if err := m.check(key, map[string]bool{key: true}); err != nil {
		t.Fatalf("the live manifest does not hold: %v", err)
	}
	// Without live, the same changes fail the archive.
	mustWrite(t, filepath.Join(src, "kept.txt"), "kept, edited\n", 0o644)
	if err := writeLayer(ctx, root, m, key, true, false, io.Discard, &read); !errors.Is(err, errChangedWhileArchiving) {
		t.Fatalf("a plain archive of a changing home: %v, want errChangedWhileArchiving", err)
	}
}

// What an agent sends is checked before anything is committed: a stream
// that fails, stops short or names layers outside its chain stores no
// complete archive.
func TestStoreSnapshotRefusesBadStreams(t *testing.T) {
	store, _ := newTestStore(t)
	ctx := context.Background()
	src := t.TempDir()
	makeTree(t, src, 64<<10)
	good := func(key string) []byte {
		var b bytes.Buffer
		if err := WriteSnapshot(ctx, hclog.NewNullLogger(), src, SnapshotRequest{Key: key}, &b); err != nil {
			t.Fatal(err)
		}
		return b.Bytes()
	}
	whole := good(chainKey(0))
	var failed bytes.Buffer
	_ = writeFrame(&failed, frameError, []byte("disk on fire"))
	var lying bytes.Buffer
	_ = writeFrame(&lying, framePlan, []byte(`{"unchanged":false,"full":false}`))
	for name, stream := range map[string][]byte{
		"agent error":                  failed.Bytes(),
		"cut short":                    whole[:len(whole)/2],
		"incremental without a parent": lying.Bytes(),
		"garbage":                      []byte("HTTP/1.1 200 OK\r\n\r\n"),
		"another key's stream":         good(chainKey(5)),
	} {
		t.Run(name, func(t *testing.T) {
			key := chainKey(0)
			if _, err := store.StoreSnapshot(ctx, SnapshotRequest{Key: key}, bytes.NewReader(stream)); !errors.Is(err, ErrSnapshot) {
				t.Fatalf("StoreSnapshot = %v, want ErrSnapshot", err)
			}
			if _, err := store.Stat(ctx, key); err == nil {
				t.Fatal("a refused snapshot left a complete archive")
			}
		})
	}
	if _, err := store.StoreSnapshot(ctx, SnapshotRequest{Key: chainKey(0)}, bytes.NewReader(whole)); err != nil {
		t.Fatalf("the good stream: %v", err)
	}
}
