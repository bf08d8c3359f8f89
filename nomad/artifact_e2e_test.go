package nomad

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"
	"github.com/minio/minio-go/v7"

	"github.com/codehub-io/codehub/archive"
	"github.com/codehub-io/codehub/controller"
	"github.com/codehub-io/codehub/internal/nomadtest"
	"github.com/codehub-io/codehub/internal/testenv"
)

// serveBinary serves the file at path on loopback as /dl/codehub, as the
// control plane serves itself, and returns its URL and the "sha256:<hex>"
// checksum Nomad's artifact options take.
func serveBinary(t *testing.T, path string) (url, checksum string) {
	t.Helper()
	content, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(content)
	mux := http.NewServeMux()
	mux.HandleFunc("GET /dl/codehub", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/octet-stream")
		http.ServeContent(w, r, "codehub", time.Time{}, bytes.NewReader(content))
	})
	srv := httptest.NewServer(mux) // listens on 127.0.0.1
	t.Cleanup(srv.Close)
	return srv.URL + "/dl/codehub", "sha256:" + hex.EncodeToString(sum[:])
}

// artifactBackend builds a raw_exec backend whose batch jobs fetch codehub
// with an artifact block (codehub_path left empty) instead of a path on the
// node.
func artifactBackend(t *testing.T, a *nomadtest.Agent, s3 testenv.S3, url, checksum string) *Backend {
	t.Helper()
	return e2eBackend(t, a, t.TempDir(), e2eConfig{
		codehubPath:      "-",
		publicURL:        strings.TrimSuffix(url, "/dl/codehub"),
		artifactChecksum: checksum,
		s3:               s3,
	})
}

// provisionReady provisions the home volume of wsID and returns its path.
func provisionReady(t *testing.T, b *Backend, wsID string) string {
	t.Helper()
	if err := b.ProvisionVolume(t.Context(), controller.VolumeSpec{WorkspaceID: wsID, UID: os.Getuid(), GID: os.Getgid()}); err != nil {
		t.Fatal(err)
	}
	observeUntil(t, b, wsID, "volume of "+wsID+" ready", func(o controller.Observed) bool { return o.VolumeReady })
	home, err := b.HomeDir(t.Context(), wsID)
	if err != nil {
		t.Fatal(err)
	}
	return home
}

func finished(j *controller.JobResult) bool {
	return j != nil && (j.Status == controller.JobSucceeded || j.Status == controller.JobFailed)
}

// TestE2EArtifactDownload: with no codehub path on the node, archive and
// restore jobs fetch codehub from the control plane's URL, verified by
// checksum, and move a home through S3 byte for byte.
func TestE2EArtifactDownload(t *testing.T) {
	nomadtest.Binary(t)
	s3 := testenv.NewS3(t)
	url, checksum := serveBinary(t, nomadtest.BuildProgram(t, t.TempDir(), "../cmd/codehub", "codehub"))
	a := nomadtest.Start(t, "")
	b := artifactBackend(t, a, s3, url, checksum)
	ctx := t.Context()
	const src, dst = "01jb3x7k9q2m5n8p4r6s0tart1", "01jb3x7k9q2m5n8p4r6s0tart2"

	home := provisionReady(t, b, src)
	content := make([]byte, 128<<10)
	if _, err := rand.Read(content); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(home, "src"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(home, "src", "main.bin"), content, 0o600); err != nil {
		t.Fatal(err)
	}

	opID := "01jb3xa00000000000000art0p"
	key := "archives/" + src + "/" + opID + "/home.tar.zst"
	if err := b.SubmitArchive(ctx, controller.JobSpec{WorkspaceID: src, OpID: opID, ArchiveKey: key, Attempt: 1}); err != nil {
		t.Fatal(err)
	}
	o := observeUntil(t, b, src, "archive finished", func(o controller.Observed) bool { return finished(o.Archive) })
	if o.Archive.Status != controller.JobSucceeded || o.Archive.OpID != opID || o.Archive.ArchiveKey != key {
		t.Fatalf("archive result = %+v", o.Archive)
	}
	for _, k := range []string{key, key + ".meta"} {
		if _, err := s3.Client.StatObject(ctx, s3.Bucket, k, minio.StatObjectOptions{}); err != nil {
			t.Fatalf("archive object %s: %v", k, err)
		}
	}
	if alloc := onlyAlloc(t, a, controller.JobName(src, controller.JobArchive)); !hasEvent(alloc, api.TaskDownloadingArtifacts) {
		t.Fatal("the archive job ran without downloading its artifact")
	}

	// The restore goes into another workspace's fresh, empty volume.
	restored := provisionReady(t, b, dst)
	if err := b.SubmitRestore(ctx, controller.JobSpec{WorkspaceID: dst, OpID: opID, ArchiveKey: key, Attempt: 1}); err != nil {
		t.Fatal(err)
	}
	o = observeUntil(t, b, dst, "restore finished", func(o controller.Observed) bool { return finished(o.Restore) })
	if o.Restore.Status != controller.JobSucceeded {
		t.Fatalf("restore result = %+v", o.Restore)
	}
	got, err := os.ReadFile(filepath.Join(restored, "src", "main.bin"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, content) {
		t.Fatal("restored file differs from the archived one")
	}
}

// TestE2EArtifactChecksumMismatch: a binary that does not match the
// configured checksum is never run; the job fails and Observe says why.
func TestE2EArtifactChecksumMismatch(t *testing.T) {
	nomadtest.Binary(t)
	s3 := testenv.NewS3(t)
	url, _ := serveBinary(t, nomadtest.BuildProgram(t, t.TempDir(), "../cmd/codehub", "codehub"))
	wrong := sha256.Sum256([]byte("not the codehub binary"))
	a := nomadtest.Start(t, "")
	b := artifactBackend(t, a, s3, url, "sha256:"+hex.EncodeToString(wrong[:]))
	ctx := t.Context()
	const wsID = "01jb3x7k9q2m5n8p4r6s0tart3"

	provisionReady(t, b, wsID)
	opID := "01jb3xa00000000000000art1p"
	key := "archives/" + wsID + "/" + opID + "/home.tar.zst"
	if err := b.SubmitArchive(ctx, controller.JobSpec{WorkspaceID: wsID, OpID: opID, ArchiveKey: key, Attempt: 1}); err != nil {
		t.Fatal(err)
	}
	o := observeUntil(t, b, wsID, "archive finished", func(o controller.Observed) bool { return finished(o.Archive) })
	t.Logf("archive result: %+v", *o.Archive)
	if o.Archive.Status != controller.JobFailed {
		t.Fatalf("archive with a wrong artifact checksum = %+v, want failed", o.Archive)
	}
	if o.Archive.ErrorCode != archive.CodeUnknown {
		t.Fatalf("error code = %q, want %s: the job never ran to print one", o.Archive.ErrorCode, archive.CodeUnknown)
	}
	if !strings.Contains(o.Archive.Message, "artifact") {
		t.Fatalf("message %q does not name the artifact download", o.Archive.Message)
	}
	if _, err := s3.Client.StatObject(ctx, s3.Bucket, key, minio.StatObjectOptions{}); err == nil {
		t.Fatal("an archive exists although the job never ran")
	}

	// What Nomad itself reports for the allocation.
	alloc := onlyAlloc(t, a, controller.JobName(wsID, controller.JobArchive))
	for name, ts := range alloc.TaskStates {
		for _, ev := range ts.Events {
			t.Logf("task %s event %q: %s", name, ev.Type, ev.DisplayMessage)
		}
	}
	if !hasEvent(alloc, api.TaskArtifactDownloadFailed) || hasEvent(alloc, api.TaskStarted) {
		t.Fatalf("want a %q task event and no start", api.TaskArtifactDownloadFailed)
	}
}

// onlyAlloc is the single allocation of a batch job, with its task states.
func onlyAlloc(t *testing.T, a *nomadtest.Agent, jobID string) *api.AllocationListStub {
	t.Helper()
	allocs, _, err := a.Client.Jobs().Allocations(jobID, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(allocs) != 1 {
		t.Fatalf("job %s has %d allocations, want 1", jobID, len(allocs))
	}
	return allocs[0]
}

func hasEvent(a *api.AllocationListStub, typ string) bool {
	for _, ts := range a.TaskStates {
		for _, ev := range ts.Events {
			if ev.Type == typ {
				return true
			}
		}
	}
	return false
}
