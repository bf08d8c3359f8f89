package api_test

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/klauspost/compress/zstd"
	"github.com/minio/minio-go/v7"

	"github.com/codehub-io/codehub/api/apitest"
	"github.com/codehub-io/codehub/archive"
	"github.com/codehub-io/codehub/internal/testenv"
	"github.com/codehub-io/codehub/workspace"
)

type archiveJSON struct {
	ID        string    `json:"id"`
	CreatedAt time.Time `json:"created_at"`
	SizeBytes int64     `json:"size_bytes"`
	Current   bool      `json:"current"`
}

// archiveFixture is alice's workspace "dev", her validated API client and
// bob, on an API whose archives are in a bucket of the real S3 server.
type archiveFixture struct {
	s3         testenv.S3
	store      *archive.Store
	env        *apitest.Env
	alice, bob apitest.User
	w          workspace.Workspace
	c          *http.Client
	v          *validating
}

func newArchiveFixture(t *testing.T) archiveFixture {
	f := archiveFixture{s3: testenv.NewS3(t)}
	f.store = archive.NewStore(hclog.NewNullLogger(), f.s3.Client, f.s3.Bucket)
	f.env = apitest.New(t, apitest.Config{Archives: f.store})
	f.alice, f.bob = f.env.CreateUser("alice", false), f.env.CreateUser("bob", false)
	f.w = f.env.CreateWorkspace(f.alice, "dev")
	f.c = f.env.Login(f.alice)
	f.v = validate(t, f.c)
	return f
}

func TestArchives(t *testing.T) {
	f := newArchiveFixture(t)
	s3, store, env, bob, w, c, v := f.s3, f.store, f.env, f.bob, f.w, f.c, f.v
	ctx := context.Background()

	list := func() []archiveJSON {
		t.Helper()
		res := env.Do(c, "GET", "/api/v1/workspaces/"+w.ID+"/archives", nil)
		if res.StatusCode != 200 {
			t.Fatalf("archives: %d %s", res.StatusCode, res.Body)
		}
		var body struct {
			Archives []archiveJSON `json:"archives"`
		}
		res.Decode(t, &body)
		return body.Archives
	}
	if got := list(); len(got) != 0 {
		t.Fatalf("archives of a new workspace: %+v", got)
	}

	older, newer := archive.Key(w.ID, workspace.NewID()), archive.Key(w.ID, workspace.NewID())
	for _, key := range []string{older, newer} {
		if err := store.CreateEmpty(ctx, key); err != nil {
			t.Fatal(err)
		}
	}
	// An attempt that died before its meta is no archive to show.
	unfinished := archive.Key(w.ID, workspace.NewID())
	if _, err := s3.Client.PutObject(ctx, s3.Bucket, unfinished, bytes.NewReader([]byte("partial")), 7, minio.PutObjectOptions{}); err != nil {
		t.Fatal(err)
	}
	env.Exec(`UPDATE workspaces SET archive_key = $2 WHERE id = $1`, w.ID, older)

	got := list()
	if len(got) != 2 {
		t.Fatalf("archives: %+v, want the two complete ones", got)
	}
	if got[0].Current || !got[1].Current {
		t.Errorf("current: %+v, want only the older one (the workspace's archive_key)", got)
	}
	for _, a := range got {
		if a.SizeBytes <= 0 || time.Since(a.CreatedAt) > time.Minute {
			t.Errorf("archive %+v: want its size and a creation time of now", a)
		}
	}
	if !slices.IsSortedFunc(got, func(a, b archiveJSON) int { return b.CreatedAt.Compare(a.CreatedAt) }) {
		t.Errorf("archives not newest first: %+v", got)
	}

	if res := env.Do(env.Login(bob), "GET", "/api/v1/workspaces/"+w.ID+"/archives", nil); res.StatusCode != 403 {
		t.Errorf("another user's archives: %d %s", res.StatusCode, res.Body)
	}
	if res := env.Do(c, "GET", "/api/v1/workspaces/"+workspace.NewID()+"/archives", nil); res.StatusCode != 404 {
		t.Errorf("archives of an unknown workspace: %d %s", res.StatusCode, res.Body)
	}
	if v.seen[200] == 0 || v.seen[404] == 0 {
		t.Fatalf("validated statuses %v", v.seen)
	}
}

func TestImages(t *testing.T) {
	env := apitest.New(t, apitest.Config{})
	c := env.Login(env.CreateUser("alice", false))
	validate(t, c)
	if res := env.Do(env.Client(), "GET", "/api/v1/images", nil); res.StatusCode != 401 {
		t.Fatalf("images without a session: %d", res.StatusCode)
	}
	var body struct {
		Default string   `json:"default"`
		Images  []string `json:"images"`
	}
	res := env.Do(c, "GET", "/api/v1/images", nil)
	res.Decode(t, &body)
	if res.StatusCode != 200 || body.Default != apitest.Images[0] || !slices.Equal(body.Images, apitest.Images) {
		t.Fatalf("images: %d %s", res.StatusCode, res.Body)
	}
	// Each one listed is one a workspace may be created with.
	res = env.Do(c, "POST", "/api/v1/workspaces", map[string]string{"name": "second", "image": body.Images[1]})
	var ws wsJSON
	res.Decode(t, &ws)
	if res.StatusCode != 201 || ws.Image != body.Images[1] {
		t.Fatalf("create with the second image: %d %s", res.StatusCode, res.Body)
	}
}

// A start that failed and waits for its retry shows how often it failed
// and when the next attempt runs.
func TestRetryShown(t *testing.T) {
	env := apitest.New(t, apitest.Config{})
	alice := env.CreateUser("alice", false)
	c := env.Login(alice)
	validate(t, c)
	w := env.CreateWorkspace(alice, "flaky")
	next := time.Now().Add(20 * time.Second).UTC().Truncate(time.Microsecond)
	env.Exec(`UPDATE workspaces SET phase = 'STANDBY', error_reason = 'StartFailed', error_message = 'exited with code 1',
		error_count = 2, next_attempt_at = $2 WHERE id = $1`, w.ID, next)
	var got struct {
		ErrorReason   string     `json:"error_reason"`
		ErrorCount    int        `json:"error_count"`
		NextAttemptAt *time.Time `json:"next_attempt_at"`
	}
	res := env.Do(c, "GET", "/api/v1/workspaces/"+w.ID, nil)
	res.Decode(t, &got)
	if got.ErrorReason != "StartFailed" || got.ErrorCount != 2 || got.NextAttemptAt == nil || !got.NextAttemptAt.Equal(next) {
		t.Fatalf("failing workspace: %s", res.Body)
	}
}

// TestArchiveDownload downloads an archive through the API from the real S3
// server: the stored bytes as home.tar.zst, and a damaged object never as a
// complete download.
func TestArchiveDownload(t *testing.T) {
	f := newArchiveFixture(t)
	s3, store, env, alice, bob, w, c, v := f.s3, f.store, f.env, f.alice, f.bob, f.w, f.c, f.v
	ctx := context.Background()

	home := t.TempDir()
	content := make([]byte, 3<<20)
	if _, err := rand.Read(content); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(home, "project.bin"), content, 0o600); err != nil {
		t.Fatal(err)
	}
	op := workspace.NewID()
	key := archive.Key(w.ID, op)
	meta, err := store.Archive(ctx, home, key, nil)
	if err != nil {
		t.Fatal(err)
	}
	stored := readObject(t, s3, key)

	res := env.Do(c, "GET", "/api/v1/workspaces/"+w.ID+"/archives", nil)
	var list struct {
		Archives []archiveJSON `json:"archives"`
	}
	res.Decode(t, &list)
	if len(list.Archives) != 1 || list.Archives[0].ID != op {
		t.Fatalf("archives: %s", res.Body)
	}
	path := "/api/v1/workspaces/" + w.ID + "/archives/" + op + "/home.tar.zst"
	res = env.Do(c, "GET", path, nil)
	if res.StatusCode != 200 || !bytes.Equal(res.Body, stored) || int64(len(res.Body)) != meta.Size {
		t.Fatalf("download: %d, %d bytes, want the %d stored", res.StatusCode, len(res.Body), len(stored))
	}
	if cd := res.Header.Get("Content-Disposition"); cd != `attachment; filename="home.tar.zst"` {
		t.Errorf("Content-Disposition %q", cd)
	}
	if cl := res.Header.Get("Content-Length"); cl != strconv.FormatInt(meta.Size, 10) {
		t.Errorf("Content-Length %q, want %d", cl, meta.Size)
	}
	// What was downloaded restores to the home.
	restored := t.TempDir()
	if _, err := store.Restore(ctx, key, restored, nil); err != nil {
		t.Fatal(err)
	}
	if got, err := os.ReadFile(filepath.Join(restored, "project.bin")); err != nil || !bytes.Equal(got, content) {
		t.Fatalf("restored file: %v", err)
	}

	for name, p := range map[string]string{
		"unknown archive":   "/api/v1/workspaces/" + w.ID + "/archives/" + workspace.NewID() + "/home.tar.zst",
		"malformed archive": "/api/v1/workspaces/" + w.ID + "/archives/..%2f..%2fx/home.tar.zst",
		"unknown workspace": "/api/v1/workspaces/" + workspace.NewID() + "/archives/" + op + "/home.tar.zst",
	} {
		if res := env.Do(c, "GET", p, nil); res.StatusCode != 404 {
			t.Errorf("%s: %d %s", name, res.StatusCode, res.Body)
		}
	}
	if res := env.Do(env.Login(bob), "GET", path, nil); res.StatusCode != 403 {
		t.Errorf("another user's archive: %d %s", res.StatusCode, res.Body)
	}
	if res := env.Do(env.Client(), "GET", path, nil); res.StatusCode != 401 {
		t.Errorf("without a session: %d %s", res.StatusCode, res.Body)
	}
	if v.seen[200] == 0 || v.seen[404] == 0 {
		t.Fatalf("validated statuses %v", v.seen)
	}

	// The object damaged in the bucket, its size and meta unchanged: the
	// download starts, then breaks off short of its announced length.
	damaged := bytes.Clone(stored)
	damaged[len(damaged)/2] ^= 0xff
	if _, err := s3.Client.PutObject(ctx, s3.Bucket, key, bytes.NewReader(damaged), int64(len(damaged)), minio.PutObjectOptions{}); err != nil {
		t.Fatal(err)
	}
	raw := env.Login(alice)
	resp, err := raw.Get(env.URL + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	got, err := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 || err == nil || int64(len(got)) >= meta.Size {
		t.Fatalf("damaged archive: status %d, read %d of %d bytes, error %v", resp.StatusCode, len(got), meta.Size, err)
	}
	if !bytes.Equal(got, damaged[:len(got)]) {
		t.Fatal("the bytes sent are not the stored ones")
	}
}

func readObject(t *testing.T, s3 testenv.S3, key string) []byte {
	t.Helper()
	obj, err := s3.Client.GetObject(context.Background(), s3.Bucket, key, minio.GetObjectOptions{})
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

// TestIncrementalArchiveDownload downloads an archive that holds only what
// changed since its parent: the client gets the complete home.tar.zst of
// its chain, and, when an archive of the chain is damaged, a connection cut
// short instead of a complete-looking download.
func TestIncrementalArchiveDownload(t *testing.T) {
	f := newArchiveFixture(t)
	s3, store, env, alice, w, c := f.s3, f.store, f.env, f.alice, f.w, f.c
	ctx := context.Background()

	home := t.TempDir()
	files := map[string][]byte{"old.bin": make([]byte, 2<<20), "new.txt": []byte("written after the first archive\n")}
	if _, err := rand.Read(files["old.bin"]); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(home, "old.bin"), files["old.bin"], 0o600); err != nil {
		t.Fatal(err)
	}
	parent := archive.Key(w.ID, workspace.NewID())
	if _, err := store.Archive(ctx, home, parent, nil); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(home, "new.txt"), files["new.txt"], 0o644); err != nil {
		t.Fatal(err)
	}
	op := workspace.NewID()
	meta, err := store.ArchiveFrom(ctx, home, archive.Key(w.ID, op), parent, nil)
	if err != nil || meta.Parent != parent {
		t.Fatalf("incremental archive: %+v, %v", meta, err)
	}

	path := "/api/v1/workspaces/" + w.ID + "/archives/" + op + "/home.tar.zst"
	res := env.Do(c, "GET", path, nil)
	if res.StatusCode != 200 || res.Header.Get("Content-Length") != "" {
		t.Fatalf("download: %d, Content-Length %q", res.StatusCode, res.Header.Get("Content-Length"))
	}
	got := untarZstd(t, res.Body)
	if len(got) != len(files) {
		t.Errorf("downloaded home holds %d files, want %d", len(got), len(files))
	}
	for name, want := range files {
		if !bytes.Equal(got[name], want) {
			t.Errorf("downloaded %s: %d bytes, want %d", name, len(got[name]), len(want))
		}
	}

	// The parent damaged in the bucket: the download breaks off.
	stored := readObject(t, s3, parent)
	stored[len(stored)/2] ^= 0xff
	if _, err := s3.Client.PutObject(ctx, s3.Bucket, parent, bytes.NewReader(stored), int64(len(stored)), minio.PutObjectOptions{}); err != nil {
		t.Fatal(err)
	}
	resp, err := env.Login(alice).Get(env.URL + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if _, err := io.ReadAll(resp.Body); resp.StatusCode != 200 || err == nil {
		t.Fatalf("download of a damaged chain: status %d, read to the end (error %v)", resp.StatusCode, err)
	}
}

// untarZstd returns the regular files of a home.tar.zst by name.
func untarZstd(t *testing.T, data []byte) map[string][]byte {
	t.Helper()
	zr, err := zstd.NewReader(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	defer zr.Close()
	out := map[string][]byte{}
	tr := tar.NewReader(zr)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatalf("downloaded archive: %v", err)
		}
		if h.Typeflag == tar.TypeReg {
			if out[h.Name], err = io.ReadAll(tr); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// A prebuilt home's archive is named after its template, version and
// commit: it lists and downloads by its op id like any other.
func TestPrebuiltArchiveDownload(t *testing.T) {
	f := newArchiveFixture(t)
	store, env, w, c := f.store, f.env, f.w, f.c
	home := t.TempDir()
	if err := os.WriteFile(filepath.Join(home, "built"), []byte("yes\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	op := workspace.NewID()
	key := archive.PrebuildKey(archive.PrebuildPrefix(w.ID, op, "web", "0a1b2c3d4e5f"), "0123456789abcdef0123456789abcdef01234567")
	meta, err := store.Archive(context.Background(), home, key, nil)
	if err != nil {
		t.Fatal(err)
	}
	env.Exec(`UPDATE workspaces SET archive_key = $2 WHERE id = $1`, w.ID, key)
	res := env.Do(c, "GET", "/api/v1/workspaces/"+w.ID+"/archives", nil)
	var list struct {
		Archives []archiveJSON `json:"archives"`
	}
	res.Decode(t, &list)
	if len(list.Archives) != 1 || list.Archives[0].ID != op {
		t.Fatalf("archives: %s", res.Body)
	}
	res = env.Do(c, "GET", "/api/v1/workspaces/"+w.ID+"/archives/"+op+"/home.tar.zst", nil)
	if res.StatusCode != 200 || int64(len(res.Body)) != meta.Size {
		t.Fatalf("download: %d, %d bytes, want %d", res.StatusCode, len(res.Body), meta.Size)
	}
}
