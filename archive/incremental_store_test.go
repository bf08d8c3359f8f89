package archive

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/klauspost/compress/zstd"
	"github.com/minio/minio-go/v7"
)

const testWorkspace = "01jb3x7k9q2m5n8p4r6s0t1v2w"

// chainKey is the key of the nth archive of the test workspace; testKey
// is chainKey(0)'s neighbour, used by the crash helper.
func chainKey(n int) string {
	return Key(testWorkspace, fmt.Sprintf("01jb3x8a%018d", n+1))
}

// changeTree applies every kind of change a home sees between two stops.
func changeTree(t *testing.T, dir string) {
	t.Helper()
	p := func(name string) string { return filepath.Join(dir, filepath.FromSlash(name)) }
	f, err := os.OpenFile(p("src/pkg01/file001.go"), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString("// edited\n"); err != nil {
		t.Fatal(err)
	}
	f.Close()
	mustWrite(t, p("new/added.txt"), "a new file\n", 0o640)
	mustWrite(t, p("new/latin1-\xe9t\xe9.txt"), "a name that is not UTF-8\n", 0o644)
	steps := []error{
		os.Remove(p("src/pkg02/file002.go")),
		os.Chmod(p("bin/run.sh"), 0o700),
		os.Symlink("README.md", p("link-new")),
		os.Remove(p("link-to-dir")),
		os.Symlink("src/pkg05", p("link-to-dir")),
		os.Rename(p("src/pkg03/file003.go"), p("src/moved.go")),
		os.Link(p("new/added.txt"), p("new/added-link")),
		os.Link(p("src/pkg04/file004.go"), p("src/pkg04-link.go")),
		os.MkdirAll(p("new/empty"), 0o750),
		os.RemoveAll(p("nested/empty/dirs")),
	}
	if err := errors.Join(steps...); err != nil {
		t.Fatal(err)
	}
}

func archiveFrom(t *testing.T, store *Store, src, key, parent string) (Meta, string) {
	t.Helper()
	var log bytes.Buffer
	meta, err := store.ArchiveFrom(context.Background(), src, key, parent, &log)
	if err != nil {
		t.Fatalf("archive %s from %q: %v\n%s", key, parent, err, log.String())
	}
	t.Logf("archive %s:\n%s", key, log.String())
	return meta, log.String()
}

func restoreEquals(t *testing.T, store *Store, key string, want map[string]string) {
	t.Helper()
	dst := t.TempDir()
	mustWrite(t, filepath.Join(dst, "stale", "file"), "from before\n", 0o644)
	if _, err := store.Restore(context.Background(), key, dst, nil); err != nil {
		t.Fatalf("restore %s: %v", key, err)
	}
	compareTrees(t, want, snapshot(t, dst))
}

// downloadEquals reads the archive at key as a download does and checks
// that it is one complete home.tar.zst of the tree want.
func downloadEquals(t *testing.T, store *Store, key string, want map[string]string) {
	t.Helper()
	body, _, err := store.Open(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	data, err := io.ReadAll(body)
	body.Close()
	if err != nil {
		t.Fatalf("download %s: %v", key, err)
	}
	zr, err := zstd.NewReader(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	defer zr.Close()
	tarball, err := io.ReadAll(zr)
	if err != nil {
		t.Fatalf("download %s is not zstd: %v", key, err)
	}
	_, target, err := extractInto(t, tarball)
	if err != nil {
		t.Fatalf("extract download of %s: %v", key, err)
	}
	compareTrees(t, want, snapshot(t, target))
}

func TestIncrementalRoundTrip(t *testing.T) {
	store, _ := newTestStore(t)
	src := t.TempDir()
	makeTree(t, src, 8<<20)
	before := expectedSnapshot(t, src)
	full, _ := archiveFrom(t, store, src, chainKey(0), "")
	if full.Incremental() || full.Manifest == nil {
		t.Fatalf("first archive %+v: want a complete one with a manifest", full)
	}

	changeTree(t, src)
	after := expectedSnapshot(t, src)
	incr, log := archiveFrom(t, store, src, chainKey(1), chainKey(0))
	if incr.Parent != chainKey(0) || len(incr.Chain) != 1 || !strings.Contains(log, "STEP=plan RESULT=INCREMENTAL") {
		t.Fatalf("second archive %+v: want an incremental one on %s", incr, chainKey(0))
	}
	// The 8 MiB of random data did not change: only a few small files are
	// stored again.
	if incr.Size > 16<<10 || full.Size < 8<<20 {
		t.Fatalf("incremental object has %d bytes, the complete one %d", incr.Size, full.Size)
	}
	// Stored: the edited, the two added and the moved file. Hashed, not
	// stored: the chmodded one and the one that gained a hard link (both
	// have a new ctime). The 8 MiB are not read.
	if !strings.Contains(log, "CHANGED=4 ") || !strings.Contains(log, "HASHED=") || strings.Contains(log, "HASHED=0 ") {
		t.Errorf("want 4 files stored, a few hashed:\n%s", log)
	}
	if hashed := fieldOf(log, "HASHED"); len(hashed) > 4 {
		t.Errorf("hashed %s bytes: more than the few changed files", hashed)
	}
	restoreEquals(t, store, chainKey(1), after)
	restoreEquals(t, store, chainKey(0), before)
	downloadEquals(t, store, chainKey(1), after)
}

func TestIncrementalChain(t *testing.T) {
	store, _ := newTestStore(t)
	src := t.TempDir()
	makeTree(t, src, 1<<20)
	var snapshots []map[string]string
	for i := range 5 {
		parent := ""
		if i > 0 {
			parent = chainKey(i - 1)
			mustWrite(t, filepath.Join(src, "notes", fmt.Sprintf("day%d.md", i)), strings.Repeat("note ", 100*i), 0o644)
			f, err := os.OpenFile(filepath.Join(src, "README.md"), os.O_WRONLY|os.O_APPEND, 0)
			if err != nil {
				t.Fatal(err)
			}
			fmt.Fprintf(f, "line %d\n", i)
			f.Close()
		}
		meta, _ := archiveFrom(t, store, src, chainKey(i), parent)
		if len(meta.Chain) != i {
			t.Fatalf("archive %d has a chain of %d", i, len(meta.Chain))
		}
		snapshots = append(snapshots, expectedSnapshot(t, src))
	}
	for i, want := range snapshots {
		restoreEquals(t, store, chainKey(i), want)
	}
	downloadEquals(t, store, chainKey(4), snapshots[4])
}

// Unchanged files are known without reading them on the same volume, and
// by their hash elsewhere: the first archive after a restore on another
// node reads the home but uploads nothing of it.
func TestIncrementalReadsOnlyWhatItMust(t *testing.T) {
	store, _ := newTestStore(t)
	src := t.TempDir()
	makeTree(t, src, 4<<20)
	want := expectedSnapshot(t, src)
	archiveFrom(t, store, src, chainKey(0), "")
	_, log := archiveFrom(t, store, src, chainKey(1), chainKey(0))
	if !strings.Contains(log, "CHANGED=0 BYTES=0 HASHED=0 ") {
		t.Errorf("archive of an untouched home read or stored files:\n%s", log)
	}
	moved := t.TempDir()
	if _, err := store.Restore(context.Background(), chainKey(1), moved, nil); err != nil {
		t.Fatal(err)
	}
	meta, log := archiveFrom(t, store, moved, chainKey(2), chainKey(1))
	if !strings.Contains(log, "CHANGED=0 BYTES=0 ") || strings.Contains(log, "HASHED=0 ") || meta.Parent != chainKey(1) {
		t.Errorf("archive of the home restored elsewhere: want every file hashed, none stored:\n%s", log)
	}
	restoreEquals(t, store, chainKey(2), want)
}

func TestIncrementalParentUnusableMeansComplete(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name   string
		parent func(t *testing.T, store *Store, src string) string
	}{
		{"missing", func(t *testing.T, store *Store, src string) string { return chainKey(7) }},
		{"not a key", func(t *testing.T, store *Store, src string) string { return "../../etc/passwd" }},
		{"another workspace's", func(t *testing.T, store *Store, src string) string {
			other := Key("01jb3x7k9q2m5n8p4r6s0t1zzz", "01jb3x8a000000000000000001")
			archiveFrom(t, store, src, other, "")
			return other
		}},
		{"made before manifests", func(t *testing.T, store *Store, src string) string {
			meta, _ := archiveFrom(t, store, src, chainKey(0), "")
			removeObject(t, store, ManifestKey(chainKey(0)))
			old := fmt.Sprintf(`{"sha256":%q,"size":%d,"format":"tar+zstd","created_at":"2025-06-01T00:00:00Z"}`, meta.SHA256, meta.Size)
			putObject(t, store, MetaKey(chainKey(0)), []byte(old))
			return chainKey(0)
		}},
		{"garbled manifest", func(t *testing.T, store *Store, src string) string {
			archiveFrom(t, store, src, chainKey(0), "")
			putObject(t, store, ManifestKey(chainKey(0)), []byte("garbage"))
			return chainKey(0)
		}},
		{"manifest gone", func(t *testing.T, store *Store, src string) string {
			archiveFrom(t, store, src, chainKey(0), "")
			removeObject(t, store, ManifestKey(chainKey(0)))
			return chainKey(0)
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			store, _ := newTestStore(t)
			src := t.TempDir()
			makeTree(t, src, 1<<20)
			parent := tt.parent(t, store, src)
			mustWrite(t, filepath.Join(src, "changed.txt"), "after the parent\n", 0o644)
			want := expectedSnapshot(t, src)
			meta, log := archiveFrom(t, store, src, chainKey(1), parent)
			if meta.Incremental() || !strings.Contains(log, "STEP=parent PARENT=") || !strings.Contains(log, "RESULT=FULL") {
				t.Fatalf("archive on an unusable parent: %+v, want a complete one, reported:\n%s", meta, log)
			}
			if _, err := store.Stat(ctx, chainKey(1)); err != nil {
				t.Fatal(err)
			}
			restoreEquals(t, store, chainKey(1), want)
		})
	}
}

// A complete archive written before manifests existed (meta of four
// fields, no manifest object) restores and downloads as before.
func TestArchiveWithoutManifestStillRestores(t *testing.T) {
	store, _ := newTestStore(t)
	src := t.TempDir()
	makeTree(t, src, 1<<20)
	want := expectedSnapshot(t, src)
	meta, _ := archiveFrom(t, store, src, chainKey(0), "")
	removeObject(t, store, ManifestKey(chainKey(0)))
	old := fmt.Sprintf(`{"sha256":%q,"size":%d,"format":"tar+zstd","created_at":"2025-06-01T00:00:00Z"}`, meta.SHA256, meta.Size)
	putObject(t, store, MetaKey(chainKey(0)), []byte(old))
	restoreEquals(t, store, chainKey(0), want)
	downloadEquals(t, store, chainKey(0), want)
}

// rewriteManifest replaces the manifest of key by what edit makes of it,
// with a meta that vouches for the new bytes: a manifest intact but wrong.
func rewriteManifest(t *testing.T, store *Store, key string, edit func(entries []Entry) []Entry) {
	t.Helper()
	ctx := context.Background()
	meta, err := store.Stat(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	chain := map[string]bool{key: true}
	for _, k := range meta.Chain {
		chain[k] = true
	}
	m, _, err := store.readManifest(ctx, key, meta, chain)
	if err != nil {
		t.Fatal(err)
	}
	m.entries = edit(m.entries)
	data, err := encodeManifest(m)
	if err != nil {
		t.Fatal(err)
	}
	putObject(t, store, ManifestKey(key), data)
	sum := sha256.Sum256(data)
	meta.Manifest = &ManifestRef{SHA256: hex.EncodeToString(sum[:]), Size: int64(len(data))}
	if err := store.putMeta(ctx, key, meta); err != nil {
		t.Fatal(err)
	}
}

func TestIncrementalRestoreFailuresLeaveTargetUntouched(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name   string
		break_ func(t *testing.T, store *Store)
		code   Code
		says   string
	}{
		{"garbled manifest", func(t *testing.T, store *Store) {
			putObject(t, store, ManifestKey(chainKey(1)), []byte("garbage"))
		}, CodeChecksumMismatch, "manifest of"},
		{"manifest gone", func(t *testing.T, store *Store) {
			removeObject(t, store, ManifestKey(chainKey(1)))
		}, CodeMetaNotFound, "manifest of"},
		{"manifest climbing out", func(t *testing.T, store *Store) {
			rewriteManifest(t, store, chainKey(1), func(e []Entry) []Entry {
				return append(e, Entry{Path: "../outside.txt", Type: TypeDir})
			})
		}, CodeTarExtractFailed, "bad manifest"},
		{"manifest with a wrong hash", func(t *testing.T, store *Store) {
			rewriteManifest(t, store, chainKey(1), func(e []Entry) []Entry {
				for i := range e {
					if e[i].Path == "data/blob0.bin" {
						e[i].SHA256 = strings.Repeat("0", 64)
					}
				}
				return e
			})
		}, CodeTarExtractFailed, "the manifest says"},
		{"layer object gone", func(t *testing.T, store *Store) {
			removeObject(t, store, chainKey(0))
		}, CodeArchiveNotFound, chainKey(0)},
		{"layer meta gone", func(t *testing.T, store *Store) {
			removeObject(t, store, MetaKey(chainKey(0)))
		}, CodeMetaNotFound, chainKey(0)},
		{"layer corrupted", func(t *testing.T, store *Store) {
			obj, err := store.client.GetObject(ctx, store.bucket, chainKey(0), minio.GetObjectOptions{})
			if err != nil {
				t.Fatal(err)
			}
			b, err := io.ReadAll(obj)
			obj.Close()
			if err != nil {
				t.Fatal(err)
			}
			b[len(b)/2] ^= 0x5a
			putObject(t, store, chainKey(0), b)
		}, CodeChecksumMismatch, chainKey(0)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			store, _ := newTestStore(t)
			src := t.TempDir()
			makeTree(t, src, 1<<20)
			archiveFrom(t, store, src, chainKey(0), "")
			mustWrite(t, filepath.Join(src, "changed.txt"), "after the parent\n", 0o644)
			archiveFrom(t, store, src, chainKey(1), chainKey(0))
			tt.break_(t, store)

			dst, before := existingHome(t)
			_, err := store.Restore(ctx, chainKey(1), dst, nil)
			wantCode(t, err, tt.code)
			if !strings.Contains(err.Error(), tt.says) {
				t.Errorf("error %q does not say %q", err, tt.says)
			}
			compareTrees(t, before, snapshot(t, dst))
			if _, err := os.Stat(filepath.Join(filepath.Dir(dst), "outside.txt")); !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("restore wrote outside its target: %v", err)
			}
			// A download of it never ends as if complete.
			if body, _, err := store.Open(ctx, chainKey(1)); err == nil {
				_, err = io.Copy(io.Discard, body)
				body.Close()
				if err == nil {
					t.Fatal("download of a broken chain read to its end")
				}
			}
		})
	}
}

// fieldOf is the value of the first KEY=value field named key in log.
func fieldOf(log, key string) string {
	for _, f := range strings.Fields(log) {
		if v, ok := strings.CutPrefix(f, key+"="); ok {
			return v
		}
	}
	return ""
}
