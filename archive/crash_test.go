package archive

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"
	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/codehub-io/codehub/internal/testenv"
)

// The crash tests re-run this test binary as a child that archives or
// restores and then stops dead at a chosen request; the parent SIGKILLs it
// there, so the kill lands at the same point on every run.
const (
	envHelper    = "CODEHUB_ARCHIVE_TEST_HELPER" // archive | restore
	envHelperDir = "CODEHUB_ARCHIVE_TEST_DIR"
	envBucket    = "CODEHUB_ARCHIVE_TEST_BUCKET"
	envStopAt    = "CODEHUB_ARCHIVE_TEST_STOP_AT" // part2 | manifest | meta | body
	envParent    = "CODEHUB_ARCHIVE_TEST_PARENT"
	blockedLine  = "HELPER-BLOCKED"
)

func TestMain(m *testing.M) {
	if op := os.Getenv(envHelper); op != "" {
		os.Exit(runHelper(op))
	}
	os.Exit(m.Run())
}

func runHelper(op string) int {
	opts := &minio.Options{
		Creds:  credentials.NewStaticV4(os.Getenv(testenv.EnvS3AccessKey), os.Getenv(testenv.EnvS3SecretKey), ""),
		Region: os.Getenv(testenv.EnvS3Region),
	}
	if at := os.Getenv(envStopAt); at != "" {
		opts.Transport = &stopTransport{next: http.DefaultTransport, at: at}
	}
	client, err := minio.New(strings.TrimPrefix(os.Getenv(testenv.EnvS3Endpoint), "http://"), opts)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	logger := hclog.New(&hclog.LoggerOptions{Output: os.Stderr, Level: hclog.Debug})
	store := NewStore(logger, client, os.Getenv(envBucket))
	dir := os.Getenv(envHelperDir)
	if op == "archive" {
		_, err = store.ArchiveFrom(context.Background(), dir, testKey, os.Getenv(envParent), os.Stdout)
	} else {
		_, err = store.Restore(context.Background(), testKey, dir, os.Stdout)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// stopTransport announces blockedLine and hangs forever at its stop point:
// before sending part 2, before writing the manifest or the meta, or after
// 20 MiB of the archive body.
type stopTransport struct {
	next http.RoundTripper
	at   string
}

func (s *stopTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	q := r.URL.Query()
	switch {
	case s.at == "part2" && r.Method == http.MethodPut && q.Get("partNumber") == "2",
		s.at == "manifest" && r.Method == http.MethodPut && strings.HasSuffix(r.URL.Path, manifestSuffix),
		s.at == "meta" && r.Method == http.MethodPut && strings.HasSuffix(r.URL.Path, metaSuffix):
		hang()
	}
	resp, err := s.next.RoundTrip(r)
	if err == nil && s.at == "body" && r.Method == http.MethodGet && strings.HasSuffix(r.URL.Path, ".zst") {
		resp.Body = &stopBody{ReadCloser: resp.Body, left: 20 << 20}
	}
	return resp, err
}

type stopBody struct {
	io.ReadCloser
	left int
}

func (b *stopBody) Read(p []byte) (int, error) {
	if b.left <= 0 {
		hang()
	}
	n, err := b.ReadCloser.Read(p[:min(len(p), b.left)])
	b.left -= n
	return n, err
}

func hang() {
	fmt.Println(blockedLine)
	select {}
}

// helperCmd returns the command that runs the helper; stopAt "" runs it
// to the end. env adds variables (an archive's parent).
func helperCmd(s3 testenv.S3, op, dir, stopAt string, env ...string) *exec.Cmd {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), envHelper+"="+op, envHelperDir+"="+dir, envBucket+"="+s3.Bucket, envStopAt+"="+stopAt)
	cmd.Env = append(cmd.Env, env...)
	return cmd
}

// killHelperAt runs the helper until it blocks at stopAt, then SIGKILLs it.
func killHelperAt(t *testing.T, s3 testenv.S3, op, dir, stopAt string, env ...string) {
	t.Helper()
	cmd := helperCmd(s3, op, dir, stopAt, env...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	scanner := bufio.NewScanner(stdout)
	blocked := false
	for !blocked && scanner.Scan() {
		t.Logf("helper: %s", scanner.Text())
		blocked = scanner.Text() == blockedLine
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	waitErr := cmd.Wait()
	if !blocked {
		t.Fatalf("helper ended before reaching %s: %v\n%s", stopAt, waitErr, stderr.String())
	}
	var exitErr *exec.ExitError
	if !errors.As(waitErr, &exitErr) || exitErr.ExitCode() != -1 {
		t.Fatalf("helper was not killed: %v", waitErr)
	}
}

func TestArchiveKilledThenRerun(t *testing.T) {
	tests := []struct {
		stopAt  string
		after   Code // what Stat says right after the kill
		pending int  // unfinished multipart uploads right after the kill
	}{
		{"part2", CodeArchiveNotFound, 1},
		{"meta", CodeMetaNotFound, 0},
	}
	for _, tt := range tests {
		t.Run(tt.stopAt, func(t *testing.T) {
			store, s3 := newTestStore(t)
			ctx := context.Background()
			src := t.TempDir()
			makeTree(t, src, 24<<20)
			want := expectedSnapshot(t, src)

			killHelperAt(t, s3, "archive", src, tt.stopAt)
			_, err := store.Stat(ctx, testKey)
			wantCode(t, err, tt.after)
			if n := pendingUploads(t, store, testKey); n != tt.pending {
				t.Fatalf("%d unfinished uploads after the kill, want %d", n, tt.pending)
			}

			if _, err := store.Archive(ctx, src, testKey, nil); err != nil {
				t.Fatalf("rerun: %v", err)
			}
			if n := pendingUploads(t, store, testKey); n != 0 {
				t.Fatalf("%d unfinished uploads left after the rerun", n)
			}
			l, err := store.List(ctx, "01jb3x7k9q2m5n8p4r6s0t1v2w")
			if err != nil || len(l.Complete) != 1 || l.Complete[0] != testKey || len(l.Incomplete) != 0 {
				t.Fatalf("List = %+v, %v; want exactly %s", l, err, testKey)
			}
			dst := t.TempDir()
			if _, err := store.Restore(ctx, testKey, dst, nil); err != nil {
				t.Fatal(err)
			}
			compareTrees(t, want, snapshot(t, dst))
		})
	}
}

// An incremental archive killed before it commits leaves its parent's
// chain as it was and nothing that reads as an archive; the rerun stores
// the changes on the same parent.
func TestIncrementalArchiveKilledThenRerun(t *testing.T) {
	for _, stopAt := range []string{"manifest", "meta"} {
		t.Run(stopAt, func(t *testing.T) {
			store, s3 := newTestStore(t)
			ctx := context.Background()
			src := t.TempDir()
			makeTree(t, src, 4<<20)
			parent := chainKey(0)
			archiveFrom(t, store, src, parent, "")
			before := expectedSnapshot(t, src)
			changeTree(t, src)
			after := expectedSnapshot(t, src)

			killHelperAt(t, s3, "archive", src, stopAt, envParent+"="+parent)
			_, err := store.Stat(ctx, testKey)
			wantCode(t, err, CodeMetaNotFound)
			l, err := store.List(ctx, testWorkspace)
			if err != nil || len(l.Complete) != 1 || l.Complete[0] != parent {
				t.Fatalf("List = %+v, %v; want only the parent complete", l, err)
			}
			restoreEquals(t, store, parent, before)

			meta, log := archiveFrom(t, store, src, testKey, parent)
			if meta.Parent != parent || !strings.Contains(log, "RESULT=INCREMENTAL") {
				t.Fatalf("rerun: %+v, want an incremental archive on %s", meta, parent)
			}
			restoreEquals(t, store, testKey, after)
			restoreEquals(t, store, parent, before)
		})
	}
}

func TestRestoreKilledThenRerun(t *testing.T) {
	store, s3 := newTestStore(t)
	ctx := context.Background()
	src := t.TempDir()
	makeTree(t, src, 40<<20)
	want := expectedSnapshot(t, src)
	if _, err := store.Archive(ctx, src, testKey, nil); err != nil {
		t.Fatal(err)
	}
	dst := t.TempDir()
	mustWrite(t, filepath.Join(dst, "stale", "file"), "from before\n", 0o644)

	killHelperAt(t, s3, "restore", dst, "body")
	if _, err := os.Stat(filepath.Join(dst, stagingName)); err != nil {
		t.Fatalf("killed restore left no staging directory: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dst, "stale", "file")); err != nil {
		t.Fatalf("killed restore touched the target before verifying: %v", err)
	}
	if _, err := store.Restore(ctx, testKey, dst, nil); err != nil {
		t.Fatalf("rerun: %v", err)
	}
	compareTrees(t, want, snapshot(t, dst))
}

// A crash between the renames of the swap leaves part of the new tree, part
// of the old one and the rest in staging; a rerun ends with the archive.
func TestRestoreRerunAfterCrashMidSwap(t *testing.T) {
	store, _ := newTestStore(t)
	ctx := context.Background()
	src := t.TempDir()
	makeTree(t, src, 0)
	want := expectedSnapshot(t, src)
	if _, err := store.Archive(ctx, src, testKey, nil); err != nil {
		t.Fatal(err)
	}
	dst := t.TempDir()
	if _, err := store.Restore(ctx, testKey, dst, nil); err != nil {
		t.Fatal(err)
	}
	staging := filepath.Join(dst, stagingName)
	if err := os.Mkdir(staging, 0o700); err != nil {
		t.Fatal(err)
	}
	for _, moved := range []string{"src", "go", "README.md"} {
		if err := os.Rename(filepath.Join(dst, moved), filepath.Join(staging, moved)); err != nil {
			t.Fatal(err)
		}
	}
	mustWrite(t, filepath.Join(dst, "old-leftover"), "x", 0o644)
	mustWrite(t, filepath.Join(dst, "bin", "extra"), "x", 0o644)

	if _, err := store.Restore(ctx, testKey, dst, nil); err != nil {
		t.Fatal(err)
	}
	compareTrees(t, want, snapshot(t, dst))
}
