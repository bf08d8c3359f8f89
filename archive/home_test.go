package archive

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/minio/minio-go/v7"
)

// A home may hold anything under the staging directory's name, even a
// plain file: skipping it must not skip the entries after it.
func TestPackSkipsOnlyTheStagingName(t *testing.T) {
	for _, kind := range []string{"file", "symlink"} {
		t.Run(kind, func(t *testing.T) {
			src := t.TempDir()
			makeTree(t, src, 0)
			want := expectedSnapshot(t, src)
			reserved := filepath.Join(src, stagingName)
			if kind == "file" {
				mustWrite(t, reserved, "user data under a reserved name\n", 0o644)
			} else if err := os.Symlink("README.md", reserved); err != nil {
				t.Fatal(err)
			}

			dst, _, _ := packThenExtract(t, src)
			compareTrees(t, want, snapshot(t, dst))
		})
	}
}

// The archive job may be handed a path whose last component is a symlink
// to the home; walking the link itself would archive nothing.
func TestArchiveHomeBehindSymlink(t *testing.T) {
	store, _ := newTestStore(t)
	ctx := context.Background()
	src := t.TempDir()
	makeTree(t, src, 0)
	want := expectedSnapshot(t, src)
	link := filepath.Join(t.TempDir(), "home")
	if err := os.Symlink(src, link); err != nil {
		t.Fatal(err)
	}
	if _, err := store.Archive(ctx, link, testKey, nil); err != nil {
		t.Fatal(err)
	}
	dst := t.TempDir()
	if _, err := store.Restore(ctx, testKey, dst, nil); err != nil {
		t.Fatal(err)
	}
	compareTrees(t, want, snapshot(t, dst))
}

// A file that grows or is rewritten after its header was taken must fail
// the archive rather than be stored cut short or mixed.
func TestPackFailsOnFileChangedWhileRead(t *testing.T) {
	changes := map[string]func(t *testing.T, name string){
		"grown": func(t *testing.T, name string) {
			f, err := os.OpenFile(name, os.O_WRONLY|os.O_APPEND, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			if _, err := f.WriteString("appended after the header\n"); err != nil {
				t.Fatal(err)
			}
		},
		"rewritten": func(t *testing.T, name string) {
			if err := os.WriteFile(name, bytes.Repeat([]byte("y"), 4096), 0o644); err != nil {
				t.Fatal(err)
			}
			later := time.Now().Add(time.Hour)
			if err := os.Chtimes(name, later, later); err != nil {
				t.Fatal(err)
			}
		},
	}
	for what, change := range changes {
		t.Run(what, func(t *testing.T) {
			dir := t.TempDir()
			name := filepath.Join(dir, "log")
			mustWrite(t, name, strings.Repeat("x", 4096), 0o644)
			root, m, err := scanTree(context.Background(), hclog.NewNullLogger(), dir, false)
			if err != nil {
				t.Fatal(err)
			}
			change(t, name)
			var read atomic.Int64
			if err := writeLayer(context.Background(), root, m, "", true, false, io.Discard, &read); !errors.Is(err, errChangedWhileArchiving) {
				t.Fatalf("a file changed while archived: %v, want %v", err, errChangedWhileArchiving)
			} else {
				t.Logf("refused: %v", err)
			}
		})
	}
}

// The staging directory's name inside an archive would collide with the
// staging directory itself during the swap, after the old home is gone.
func TestRestoreRefusesStagingNameInArchive(t *testing.T) {
	archives := map[string][]tarEntry{
		"file":      {{name: "a", body: "a"}, {name: stagingName, body: "x"}, {name: "z", body: "z"}},
		"directory": {{name: stagingName + "/", typ: tar.TypeDir}, {name: stagingName + "/x", body: "x"}},
	}
	ctx := context.Background()
	for name, entries := range archives {
		t.Run(name, func(t *testing.T) {
			store, _ := newTestStore(t)
			body := compress(t, hostileTar(t, entries))
			putObject(t, store, testKey, body)
			if err := store.putMeta(ctx, testKey, metaOf(body)); err != nil {
				t.Fatal(err)
			}
			dst, before := existingHome(t)
			_, err := store.Restore(ctx, testKey, dst, nil)
			wantCode(t, err, CodeTarExtractFailed)
			compareTrees(t, before, snapshot(t, dst))
		})
	}
}

// The restore job runs as the workspace user. Moving a directory to a new
// parent rewrites its ".." entry, so a read-only directory at the top of
// the home must still be swapped in.
func TestRestoreReadOnlyTopDirAsUser(t *testing.T) {
	store, s3 := newTestStore(t)
	ctx := context.Background()
	src := t.TempDir()
	mustWrite(t, filepath.Join(src, "locked", "notes.txt"), "keep me\n", 0o444)
	mustWrite(t, filepath.Join(src, "open.txt"), "hello\n", 0o644)
	if err := os.Chmod(filepath.Join(src, "locked"), 0o555); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(src, "sealed"), 0o1500); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Join(src, "sealed"), 0o1500); err != nil {
		t.Fatal(err)
	}
	want := snapshot(t, src)
	if _, err := store.Archive(ctx, src, testKey, nil); err != nil {
		t.Fatal(err)
	}

	if os.Geteuid() != 0 {
		dst := t.TempDir()
		mustWrite(t, filepath.Join(dst, "old"), "old\n", 0o644)
		if _, err := store.Restore(ctx, testKey, dst, nil); err != nil {
			t.Fatal(err)
		}
		compareTrees(t, want, snapshot(t, dst))
		return
	}
	// As root every permission check passes: restore in a child running as
	// an unprivileged user, as the job does.
	const uid, gid = 65534, 65534
	base, err := os.MkdirTemp("", "codehub-restore-as-user-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { removeTree(base) })
	if err := os.Chmod(base, 0o755); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(base, "archive.test")
	copyFile(t, os.Args[0], bin, 0o755)
	dst := filepath.Join(base, "home")
	mustWrite(t, filepath.Join(dst, "old"), "old\n", 0o644)
	for _, p := range []string{dst, filepath.Join(dst, "old")} {
		if err := os.Chown(p, uid, gid); err != nil {
			t.Fatal(err)
		}
	}
	cmd := helperCmd(s3, "restore", dst, "")
	cmd.Path, cmd.Args[0] = bin, bin
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: gid}}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("restore as uid %d: %v\n%s", uid, err, out)
	}
	compareTrees(t, want, snapshot(t, dst))
}

func copyFile(t *testing.T, from, to string, mode os.FileMode) {
	t.Helper()
	in, err := os.Open(from)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out, err := os.OpenFile(to, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
}

// An archive found complete must still clear the parts a killed attempt
// left: nothing else ever aborts them while the archive is kept.
func TestArchiveExistingAbortsStaleUploads(t *testing.T) {
	store, _ := newTestStore(t)
	ctx := context.Background()
	if _, err := store.Archive(ctx, t.TempDir(), testKey, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := store.core.NewMultipartUpload(ctx, store.bucket, testKey, minio.PutObjectOptions{}); err != nil {
		t.Fatal(err)
	}
	var log bytes.Buffer
	if _, err := store.Archive(ctx, t.TempDir(), testKey, &log); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(log.String(), "RESULT=EXISTS") {
		t.Fatalf("second archive did not find the first:\n%s", log.String())
	}
	if n := pendingUploads(t, store, testKey); n != 0 {
		t.Fatalf("%d unfinished uploads left beside the complete archive", n)
	}
}

// Cancellation is not an S3 failure, whatever layer notices it first.
func TestCancelledIsUnknown(t *testing.T) {
	store, _ := newTestStore(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := store.Archive(ctx, t.TempDir(), testKey, nil)
	wantCode(t, err, CodeUnknown)
	_, err = store.Restore(ctx, testKey, t.TempDir(), nil)
	wantCode(t, err, CodeUnknown)
}

// Local file system errors carry a syscall.Errno, which has the methods of a
// net.Error; they are not S3 failures.
func TestLocalErrorsAreNotS3Errors(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want Code
	}{
		{"unreadable file", &os.PathError{Op: "open", Path: "f", Err: syscall.EACCES}, CodeUnknown},
		{"vanished file", fmt.Errorf("walk: %w", &os.PathError{Op: "lstat", Path: "f", Err: syscall.ENOENT}), CodeUnknown},
		{"rename", &os.LinkError{Op: "rename", Old: "a", New: "b", Err: syscall.EEXIST}, CodeUnknown},
		{"bare errno", syscall.EPERM, CodeUnknown},
		{"refused", &url.Error{Op: "Put", URL: "http://s3/k", Err: &net.OpError{Op: "dial", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}}, CodeS3Access},
		{"reset", &net.OpError{Op: "read", Err: os.NewSyscallError("read", syscall.ECONNRESET)}, CodeS3Access},
	}
	for _, tt := range tests {
		if got := CodeOf(tt.err); got != tt.want {
			t.Errorf("%s: CodeOf(%v) = %s, want %s", tt.name, tt.err, got, tt.want)
		}
	}
}

// A sparse file in a home (a disk image, a database preallocated with
// holes) is archived as its full length of zeros; written back densely it
// could need many times the space the home had, and the restore would fail
// for lack of room on the very volume it came from.
func TestPackThenExtractKeepsHoles(t *testing.T) {
	const apparent = 64 << 20
	src := t.TempDir()
	name := filepath.Join(src, "disk.img")
	f, err := os.Create(name)
	if err != nil {
		t.Fatal(err)
	}
	for _, at := range []int64{0, 40 << 20, apparent - 3} {
		if _, err := f.WriteAt([]byte("abc"), at); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	mustWrite(t, filepath.Join(src, "zeros-then-hole"), string(make([]byte, 10000)), 0o644)
	want := snapshot(t, src)

	dst, read, written := packThenExtract(t, src)
	compareTrees(t, want, snapshot(t, dst))
	fi, err := os.Stat(filepath.Join(dst, "disk.img"))
	if err != nil {
		t.Fatal(err)
	}
	if used := fi.Sys().(*syscall.Stat_t).Blocks * 512; used > 1<<20 {
		t.Fatalf("restored %d-byte sparse file occupies %d bytes", fi.Size(), used)
	}
	if read != written {
		t.Fatalf("read %d bytes, wrote %d", read, written)
	}
}

// A HEAD answer has no body, so a 404 to it says nothing about why: a
// missing bucket answers so, and some servers answer an unknown access key
// so. Reporting ARCHIVE_NOT_FOUND for either would write the workspace's
// data off as lost over a configuration mistake.
func TestMisconfigurationIsNotArchiveNotFound(t *testing.T) {
	store, s3 := newTestStore(t)
	archiveSmall(t, store)
	stores := map[string]*Store{}
	unknownKey, err := NewClient(ClientConfig{Endpoint: s3.Endpoint, AccessKey: "unknown-" + s3.AccessKey, SecretKey: s3.SecretKey, Region: s3.Region})
	if err != nil {
		t.Fatal(err)
	}
	stores["unknown access key"] = NewStore(hclog.NewNullLogger(), unknownKey, s3.Bucket)
	stores["missing bucket"] = NewStore(hclog.NewNullLogger(), store.client, s3.Bucket+"-missing")
	ctx := context.Background()
	for name, bad := range stores {
		t.Run(name, func(t *testing.T) {
			_, err := bad.Stat(ctx, testKey)
			wantCode(t, err, CodeS3Access)
			dst, before := existingHome(t)
			_, err = bad.Restore(ctx, testKey, dst, nil)
			wantCode(t, err, CodeS3Access)
			compareTrees(t, before, snapshot(t, dst))
		})
	}
	// A key that really is missing still says so.
	_, err = store.Stat(ctx, Key("01jb3x7k9q2m5n8p4r6s0t1v2w", "01jb3xzz0000000000000000aa"))
	wantCode(t, err, CodeArchiveNotFound)
}
