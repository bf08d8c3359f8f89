package archive

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"
	"github.com/minio/minio-go/v7"

	"github.com/codehub-io/codehub/internal/testenv"
)

const testKey = "archives/01jb3x7k9q2m5n8p4r6s0t1v2w/01jb3x8a0000000000000000aa/home.tar.zst"

func newTestStore(t testing.TB) (*Store, testenv.S3) {
	t.Helper()
	s3 := testenv.NewS3(t)
	logger := hclog.New(&hclog.LoggerOptions{Name: "archive-test", Level: hclog.Debug, Output: testWriter{t}})
	return NewStore(logger, s3.Client, s3.Bucket), s3
}

type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

func wantCode(t testing.TB, err error, code Code) {
	t.Helper()
	if got := CodeOf(err); got != code {
		t.Fatalf("error %v: code %s, want %s", err, got, code)
	}
}

func pendingUploads(t testing.TB, s *Store, key string) int {
	t.Helper()
	res, err := s.core.ListMultipartUploads(context.Background(), s.bucket, key, "", "", "", 1000)
	if err != nil {
		t.Fatalf("list multipart uploads: %v", err)
	}
	return len(res.Uploads)
}

func TestRoundTrip(t *testing.T) {
	store, _ := newTestStore(t)
	ctx := context.Background()
	src := t.TempDir()
	makeTree(t, src, 66<<20)
	want := expectedSnapshot(t, src)

	var log bytes.Buffer
	meta, err := store.Archive(ctx, src, testKey, &log)
	if err != nil {
		t.Fatalf("archive: %v\n%s", err, log.String())
	}
	t.Logf("archive log:\n%s", log.String())
	if meta.Format != Format || meta.Size < 64<<20 {
		t.Fatalf("meta %+v", meta)
	}
	if !strings.Contains(log.String(), "STEP=upload") || !strings.Contains(log.String(), "RESULT=OK") {
		t.Fatalf("archive log lacks upload step:\n%s", log.String())
	}
	// The last report says how far the upload got of the home's bytes.
	if p, ok, err := LastProgress(strings.NewReader(log.String()), ResultTail); err != nil || !ok ||
		p.Step != "upload" || p.Result != "OK" || p.Total < 64<<20 || p.Done != p.Total || p.Percent() != 100 {
		t.Fatalf("archive progress %+v (%v, %v)", p, ok, err)
	}
	stat, err := store.Stat(ctx, testKey)
	if err != nil || !reflect.DeepEqual(stat, meta) {
		t.Fatalf("stat = %+v, %v; want %+v", stat, err, meta)
	}
	if n := pendingUploads(t, store, testKey); n != 0 {
		t.Fatalf("%d multipart uploads left pending", n)
	}

	dst := t.TempDir()
	mustWrite(t, filepath.Join(dst, "old-file"), "replaced by the restore\n", 0o644)
	log.Reset()
	if _, err := store.Restore(ctx, testKey, dst, &log); err != nil {
		t.Fatalf("restore: %v\n%s", err, log.String())
	}
	t.Logf("restore log:\n%s", log.String())
	compareTrees(t, want, snapshot(t, dst))
	if p, ok, err := LastProgress(strings.NewReader(log.String()), ResultTail); err != nil || !ok ||
		p.Step != "download" || p.Result != "OK" || p.Total != meta.Size || p.Done != meta.Size {
		t.Fatalf("restore progress %+v (%v, %v), archive of %d bytes", p, ok, err, meta.Size)
	}

	// A second archive of the same key finds it complete and uploads nothing.
	log.Reset()
	again, err := store.Archive(ctx, src, testKey, &log)
	if err != nil || !reflect.DeepEqual(again, meta) {
		t.Fatalf("second archive = %+v, %v", again, err)
	}
	if !strings.Contains(log.String(), "RESULT=EXISTS") || strings.Contains(log.String(), "STEP=upload") {
		t.Fatalf("second archive did not skip:\n%s", log.String())
	}
}

func TestArchiveIsDeterministic(t *testing.T) {
	store, _ := newTestStore(t)
	ctx := context.Background()
	src := t.TempDir()
	makeTree(t, src, 0)
	first, err := store.Archive(ctx, src, testKey, nil)
	if err != nil {
		t.Fatal(err)
	}
	// Dropping the meta makes the object an unfinished attempt: it is
	// written again, byte for byte the same.
	if err := store.client.RemoveObject(ctx, store.bucket, MetaKey(testKey), minio.RemoveObjectOptions{}); err != nil {
		t.Fatal(err)
	}
	second, err := store.Archive(ctx, src, testKey, nil)
	if err != nil {
		t.Fatal(err)
	}
	if first.SHA256 != second.SHA256 || first.Size != second.Size {
		t.Fatalf("re-archive differs: %+v vs %+v", first, second)
	}
}

// archiveSmall archives a small tree and returns the archive bytes.
func archiveSmall(t *testing.T, store *Store) []byte {
	t.Helper()
	ctx := context.Background()
	src := t.TempDir()
	makeTree(t, src, 1<<20)
	if _, err := store.Archive(ctx, src, testKey, nil); err != nil {
		t.Fatal(err)
	}
	obj, err := store.client.GetObject(ctx, store.bucket, testKey, minio.GetObjectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer obj.Close()
	b, err := io.ReadAll(obj)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func putObject(t *testing.T, store *Store, key string, body []byte) {
	t.Helper()
	_, err := store.client.PutObject(context.Background(), store.bucket, key, bytes.NewReader(body), int64(len(body)), minio.PutObjectOptions{})
	if err != nil {
		t.Fatal(err)
	}
}

func removeObject(t *testing.T, store *Store, key string) {
	t.Helper()
	if err := store.client.RemoveObject(context.Background(), store.bucket, key, minio.RemoveObjectOptions{}); err != nil {
		t.Fatal(err)
	}
}

// existingHome is a restore target with content that a failed restore must
// leave exactly as it was.
func existingHome(t *testing.T) (string, map[string]string) {
	t.Helper()
	dst := t.TempDir()
	mustWrite(t, filepath.Join(dst, "keep", "me.txt"), "precious\n", 0o600)
	return dst, snapshot(t, dst)
}

func TestRestoreFailuresLeaveTargetUntouched(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name  string
		setup func(t *testing.T, store *Store)
		code  Code
	}{
		{"corrupted object", func(t *testing.T, store *Store) {
			b := archiveSmall(t, store)
			for _, off := range []int{len(b) / 3, len(b) / 2, len(b) - 5} {
				b[off] ^= 0x5a
			}
			putObject(t, store, testKey, b)
		}, CodeChecksumMismatch},
		{"truncated object", func(t *testing.T, store *Store) {
			b := archiveSmall(t, store)
			putObject(t, store, testKey, b[:len(b)/2])
		}, CodeChecksumMismatch},
		{"missing meta", func(t *testing.T, store *Store) {
			archiveSmall(t, store)
			if err := store.client.RemoveObject(ctx, store.bucket, MetaKey(testKey), minio.RemoveObjectOptions{}); err != nil {
				t.Fatal(err)
			}
		}, CodeMetaNotFound},
		{"garbage meta", func(t *testing.T, store *Store) {
			archiveSmall(t, store)
			putObject(t, store, MetaKey(testKey), []byte(`{"sha256":"zz"}`))
		}, CodeMetaNotFound},
		{"missing object", func(t *testing.T, store *Store) {}, CodeArchiveNotFound},
		{"object gone, meta left", func(t *testing.T, store *Store) {
			archiveSmall(t, store)
			if err := store.client.RemoveObject(ctx, store.bucket, testKey, minio.RemoveObjectOptions{}); err != nil {
				t.Fatal(err)
			}
		}, CodeArchiveNotFound},
		{"hostile archive with honest meta", func(t *testing.T, store *Store) {
			body := compress(t, hostileTar(t, []tarEntry{
				{name: "fine.txt", body: "ok"},
				{name: "../outside.txt", body: "escaped"},
			}))
			putObject(t, store, testKey, body)
			if err := store.putMeta(ctx, testKey, metaOf(body)); err != nil {
				t.Fatal(err)
			}
		}, CodeTarExtractFailed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			store, _ := newTestStore(t)
			tt.setup(t, store)
			dst, before := existingHome(t)
			_, err := store.Restore(ctx, testKey, dst, nil)
			wantCode(t, err, tt.code)
			compareTrees(t, before, snapshot(t, dst))
			if _, err := os.Stat(filepath.Join(filepath.Dir(dst), "outside.txt")); !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("restore wrote outside its target: %v", err)
			}
		})
	}
}

func TestWrongCredentials(t *testing.T) {
	store, s3 := newTestStore(t)
	archiveSmall(t, store)
	client, err := NewClient(ClientConfig{Endpoint: s3.Endpoint, AccessKey: s3.AccessKey, SecretKey: "wrong-" + s3.SecretKey, Region: s3.Region})
	if err != nil {
		t.Fatal(err)
	}
	bad := NewStore(hclog.NewNullLogger(), client, s3.Bucket)
	ctx := context.Background()
	_, err = bad.Archive(ctx, t.TempDir(), Key("ws", "op"), nil)
	wantCode(t, err, CodeS3Access)
	_, err = bad.Restore(ctx, testKey, t.TempDir(), nil)
	wantCode(t, err, CodeS3Access)
	wantCode(t, bad.CreateEmpty(ctx, Key("ws", "op2")), CodeS3Access)
}

func TestCreateEmptyRestoresToEmptyHome(t *testing.T) {
	store, _ := newTestStore(t)
	ctx := context.Background()
	key := Key("01jb3x7k9q2m5n8p4r6s0t1v2w", "01jb3x8a0000000000000000bb")
	if err := store.CreateEmpty(ctx, key); err != nil {
		t.Fatal(err)
	}
	first, err := store.Stat(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if err := store.CreateEmpty(ctx, key); err != nil {
		t.Fatalf("second CreateEmpty: %v", err)
	}
	if again, err := store.Stat(ctx, key); err != nil || !reflect.DeepEqual(again, first) {
		t.Fatalf("CreateEmpty is not idempotent: %+v, %v vs %+v", again, err, first)
	}
	// Same format as an archive of an empty directory.
	emptyKey := Key("01jb3x7k9q2m5n8p4r6s0t1v2w", "01jb3x8a0000000000000000cc")
	fromDir, err := store.Archive(ctx, t.TempDir(), emptyKey, nil)
	if err != nil {
		t.Fatal(err)
	}
	if fromDir.SHA256 != first.SHA256 {
		t.Fatalf("empty archive %s differs from archive of an empty dir %s", first.SHA256, fromDir.SHA256)
	}
	dst := t.TempDir()
	mustWrite(t, filepath.Join(dst, "junk"), "x", 0o644)
	if _, err := store.Restore(ctx, key, dst, nil); err != nil {
		t.Fatal(err)
	}
	if got := snapshot(t, dst); len(got) != 0 {
		t.Fatalf("restored empty archive left %v", got)
	}
}

func TestListAndDelete(t *testing.T) {
	store, _ := newTestStore(t)
	ctx := context.Background()
	ws := "01jb3x7k9q2m5n8p4r6s0t1v2w"
	older, newer, unfinished := Key(ws, "01jb3x8a0000000000000000aa"), Key(ws, "01jb3x9a0000000000000000aa"), Key(ws, "01jb3xaa0000000000000000aa")
	for _, k := range []string{older, newer} {
		if err := store.CreateEmpty(ctx, k); err != nil {
			t.Fatal(err)
		}
	}
	putObject(t, store, unfinished, []byte("no meta yet"))
	if err := store.CreateEmpty(ctx, Key("01jb3x7k9q2m5n8p4r6s0t1v2x", "01jb3x8a0000000000000000aa")); err != nil {
		t.Fatal(err)
	}
	// A deletion that died between its two removals.
	halfDeleted := Key(ws, "01jb3xba0000000000000000aa")
	if err := store.CreateEmpty(ctx, halfDeleted); err != nil {
		t.Fatal(err)
	}
	removeObject(t, store, MetaKey(halfDeleted))
	got, err := store.List(ctx, ws)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(got.Complete, ",") != newer+","+older {
		t.Fatalf("List = %v, want [%s %s]", got.Complete, newer, older)
	}
	var incomplete []string
	for _, o := range got.Incomplete {
		if o.Modified.IsZero() {
			t.Errorf("incomplete %s has no time", o.Key)
		}
		incomplete = append(incomplete, o.Key)
	}
	if strings.Join(incomplete, ",") != unfinished+","+halfDeleted {
		t.Fatalf("incomplete = %v, want [%s %s]", incomplete, unfinished, halfDeleted)
	}
	for _, k := range []string{newer, unfinished, halfDeleted} {
		if err := store.Delete(ctx, k); err != nil {
			t.Fatal(err)
		}
	}
	_, err = store.Stat(ctx, newer)
	if !errors.Is(err, ErrArchiveNotFound) {
		t.Fatalf("stat after delete: %v", err)
	}
	if got, _ := store.List(ctx, ws); len(got.Complete) != 1 || got.Complete[0] != older || len(got.Incomplete) != 0 {
		t.Fatalf("List after delete = %+v", got)
	}
}

func TestUnfinishedUploads(t *testing.T) {
	store, _ := newTestStore(t)
	ctx := context.Background()
	ws, other := "01jb3x7k9q2m5n8p4r6s0t1v2w", "01jb3x7k9q2m5n8p4r6s0t1v2x"
	killed, running, elsewhere := Key(ws, "01jb3x8a0000000000000000aa"), Key(ws, "01jb3x9a0000000000000000aa"), Key(other, "01jb3x8a0000000000000000aa")
	ids := map[string]string{}
	for _, k := range []string{killed, running, elsewhere} {
		id, err := store.core.NewMultipartUpload(ctx, store.bucket, k, minio.PutObjectOptions{})
		if err != nil {
			t.Fatal(err)
		}
		part := bytes.Repeat([]byte("x"), 1<<20)
		if _, err := store.core.PutObjectPart(ctx, store.bucket, k, id, 1, bytes.NewReader(part), int64(len(part)), minio.PutObjectPartOptions{}); err != nil {
			t.Fatal(err)
		}
		ids[k] = id
	}
	got, err := store.Unfinished(ctx, ws)
	if err != nil {
		t.Fatal(err)
	}
	keys := map[string]string{}
	for _, u := range got {
		keys[u.Key] = u.ID
		if u.Initiated.IsZero() {
			t.Errorf("upload %s of %s has no start time", u.ID, u.Key)
		}
	}
	if len(got) != 2 || keys[killed] != ids[killed] || keys[running] != ids[running] {
		t.Fatalf("Unfinished(%s) = %+v, want the uploads of %s and %s", ws, got, killed, running)
	}
	for _, u := range got {
		if u.Key == killed {
			if err := store.AbortUpload(ctx, u); err != nil {
				t.Fatal(err)
			}
		}
	}
	if n := pendingUploads(t, store, killed); n != 0 {
		t.Errorf("%d uploads of %s left after the abort", n, killed)
	}
	for _, k := range []string{running, elsewhere} {
		if n := pendingUploads(t, store, k); n != 1 {
			t.Errorf("%d uploads of %s, want it untouched", n, k)
		}
	}
	if err := store.AbortUpload(ctx, Upload{Key: killed, ID: ids[killed]}); CodeOf(err) != CodeS3Access {
		t.Errorf("aborting an aborted upload: %v", err)
	}
}
