package archive

import (
	"bytes"
	"context"
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

	var tarball bytes.Buffer
	var read, written atomic.Int64
	if err := writeTree(context.Background(), hclog.NewNullLogger(), src, &tarball, &read); err != nil {
		t.Fatal(err)
	}
	dst := t.TempDir()
	root, err := os.OpenRoot(dst)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	if err := extractTar(context.Background(), &tarball, root, &written); err != nil {
		t.Fatal(err)
	}
	compareTrees(t, want, snapshot(t, dst))
	if read.Load() != written.Load() {
		t.Fatalf("read %d bytes, wrote %d", read.Load(), written.Load())
	}
}
