package archive

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"

	"github.com/hashicorp/go-hclog"
)

// The tar layer alone, without S3: what writeTree writes, extractTar
// restores entry for entry.
func TestPackThenExtract(t *testing.T) {
	src := t.TempDir()
	makeTree(t, src, 0)
	mustWrite(t, filepath.Join(src, "latin1-\xe9t\xe9.txt"), "not UTF-8\n", 0o644)
	want := expectedSnapshot(t, src)

	dst, read, written := packThenExtract(t, src)
	compareTrees(t, want, snapshot(t, dst))
	if read != written {
		t.Fatalf("read %d bytes, wrote %d", read, written)
	}
}

// packThenExtract writes src as tar and extracts it into a new directory,
// returning that directory and the bytes read and written.
func packThenExtract(t *testing.T, src string) (dst string, read, written int64) {
	t.Helper()
	var tarball bytes.Buffer
	var r, w atomic.Int64
	if err := writeTree(context.Background(), hclog.NewNullLogger(), src, &tarball, &r); err != nil {
		t.Fatal(err)
	}
	dst = t.TempDir()
	root, err := os.OpenRoot(dst)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	if err := extractTar(context.Background(), hclog.NewNullLogger(), &tarball, root, &w); err != nil {
		t.Fatal(err)
	}
	return dst, r.Load(), w.Load()
}

// writeTree writes the contents of root (not root itself) to w as one
// complete tar, as a complete archive holds it.
func writeTree(ctx context.Context, logger hclog.Logger, root string, w io.Writer, read *atomic.Int64) error {
	root, m, err := scanTree(ctx, logger, root, false)
	if err != nil {
		return err
	}
	const key = "" // a tree of its own: every file is its layer's
	return writeLayer(ctx, root, m, key, true, false, w, read)
}

// compressTree writes the tar stream of root to enc as an archive does.
func compressTree(ctx context.Context, logger hclog.Logger, root string, enc io.Writer, read *atomic.Int64) error {
	return compressStream(enc, func(w io.Writer) error { return writeTree(ctx, logger, root, w, read) })
}
