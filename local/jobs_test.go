package local

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/hashicorp/go-hclog"
	"github.com/minio/minio-go/v7"

	"github.com/codehub-io/codehub/archive"
	"github.com/codehub-io/codehub/config"
	"github.com/codehub-io/codehub/controller"
	"github.com/codehub-io/codehub/internal/testenv"
)

// envCodehubBinary names an already built codehub binary to use instead of
// building one.
const envCodehubBinary = "CODEHUB_TEST_CODEHUB_BINARY"

// buildCodehub builds the real codehub binary, whose `job` command the
// backend runs.
func buildCodehub(t *testing.T) string {
	t.Helper()
	bin := os.Getenv(envCodehubBinary)
	if bin == "" {
		bin = filepath.Join(t.TempDir(), "codehub")
		build := exec.Command("go", "build", "-o", bin, "../cmd/codehub")
		if out, err := build.CombinedOutput(); err != nil {
			t.Fatalf("build codehub: %v\n%s", err, out)
		}
	}
	var usage bytes.Buffer
	probe := exec.Command(bin, "job")
	probe.Stderr = &usage
	_ = probe.Run()
	if bytes.Contains(usage.Bytes(), []byte("unknown command")) {
		t.Skip("codehub has no `job` command wired into main yet")
	}
	return bin
}

func TestArchiveAndRestoreWithCodehubJob(t *testing.T) {
	s3 := testenv.NewS3(t)
	bin := buildCodehub(t)
	ctx := context.Background()
	b, err := New(hclog.NewNullLogger(), Options{
		DataDir:       t.TempDir(),
		Command:       fakeWorkspace,
		CodehubBinary: bin,
		S3: config.S3{
			Endpoint: s3.Endpoint, Bucket: s3.Bucket, Region: s3.Region,
			AccessKey: config.Secret(s3.AccessKey), SecretKey: config.Secret(s3.SecretKey),
		},
	})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	if err := b.ProvisionVolume(ctx, controller.VolumeSpec{WorkspaceID: testID}); err != nil {
		t.Fatalf("ProvisionVolume: %v", err)
	}
	note := filepath.Join(b.HomeDir(testID), "project", "notes.txt")
	if err := os.MkdirAll(filepath.Dir(note), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(note, []byte("kept across archive"), 0o600); err != nil {
		t.Fatal(err)
	}

	const opID = "01jb3x8a0000000000000000aa"
	job := controller.JobSpec{WorkspaceID: testID, OpID: opID, ArchiveKey: archive.Key(testID, opID), Attempt: 1}
	if err := b.SubmitArchive(ctx, job); err != nil {
		t.Fatalf("SubmitArchive: %v", err)
	}
	// Resubmitting the same attempt neither fails nor reruns it.
	if err := b.SubmitArchive(ctx, job); err != nil {
		t.Fatalf("SubmitArchive again: %v", err)
	}
	o := waitFor(t, b, "archived", func(o controller.Observed) bool {
		return o.Archive != nil && o.Archive.Status != controller.JobRunning && o.Archive.Status != controller.JobPending
	})
	if o.Archive.Status != controller.JobSucceeded || o.Archive.OpID != opID || o.Archive.ArchiveKey != job.ArchiveKey || o.Archive.Attempt != 1 {
		t.Fatalf("archive job = %+v, want succeeded for %+v", o.Archive, job)
	}
	if _, err := s3.Client.StatObject(ctx, s3.Bucket, archive.MetaKey(job.ArchiveKey), minio.StatObjectOptions{}); err != nil {
		t.Fatalf("archive meta not in S3: %v", err)
	}
	if err := b.PurgeJob(ctx, testID, controller.JobArchive); err != nil {
		t.Fatalf("PurgeJob archive: %v", err)
	}
	if err := b.DeleteVolume(ctx, testID, ""); err != nil {
		t.Fatalf("DeleteVolume: %v", err)
	}

	if err := b.ProvisionVolume(ctx, controller.VolumeSpec{WorkspaceID: testID}); err != nil {
		t.Fatalf("ProvisionVolume for restore: %v", err)
	}
	if err := b.SubmitRestore(ctx, job); err != nil {
		t.Fatalf("SubmitRestore: %v", err)
	}
	o = waitFor(t, b, "restored", func(o controller.Observed) bool {
		return o.Restore != nil && o.Restore.Status != controller.JobRunning && o.Restore.Status != controller.JobPending
	})
	if o.Restore.Status != controller.JobSucceeded {
		t.Fatalf("restore job = %+v, want succeeded", o.Restore)
	}
	got, err := os.ReadFile(note)
	if err != nil || string(got) != "kept across archive" {
		t.Fatalf("restored note = %q, %v", got, err)
	}

	// A restore of an archive that does not exist fails with the job's code.
	missing := controller.JobSpec{WorkspaceID: testID, OpID: "01jb3x8b0000000000000000bb", Attempt: 2}
	missing.ArchiveKey = archive.Key(testID, missing.OpID)
	if err := b.SubmitRestore(ctx, missing); err != nil {
		t.Fatalf("SubmitRestore missing: %v", err)
	}
	o = waitFor(t, b, "failed restore", func(o controller.Observed) bool {
		return o.Restore != nil && o.Restore.Attempt == 2 && (o.Restore.Status == controller.JobFailed || o.Restore.Status == controller.JobSucceeded)
	})
	if o.Restore.Status != controller.JobFailed || o.Restore.ExitCode == 0 || o.Restore.ErrorCode != archive.CodeArchiveNotFound {
		t.Fatalf("restore of a missing archive = %+v, want failed with %s", o.Restore, archive.CodeArchiveNotFound)
	}
}

func TestJobRefusedWhileWorkspaceRuns(t *testing.T) {
	ctx := context.Background()
	b := newTestBackend(t, t.TempDir())
	stopOnCleanup(t, b)
	provisionAndStart(ctx, t, b)
	waitFor(t, b, "live", func(o controller.Observed) bool { return o.ContainerLive })
	job := controller.JobSpec{WorkspaceID: testID, OpID: "op", ArchiveKey: archive.Key(testID, "op"), Attempt: 1}
	if err := b.SubmitArchive(ctx, job); !errors.Is(err, controller.ErrVolumeInUse) {
		t.Fatalf("SubmitArchive while running = %v, want ErrVolumeInUse", err)
	}
}
