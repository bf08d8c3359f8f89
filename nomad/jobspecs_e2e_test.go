package nomad

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/minio/minio-go/v7"

	"github.com/codehub-io/codehub/controller"
	"github.com/codehub-io/codehub/internal/nomadtest"
	"github.com/codehub-io/codehub/internal/testenv"
	"github.com/codehub-io/codehub/jobspecs"
)

// operatorArchive is an operator's own archive job, at a higher priority,
// around the embedded data mover task.
const operatorArchive = `# The platform team's archive of [[ .WorkspaceID ]].
job [[ hcl .JobID ]] {
  type        = "batch"
  priority    = 70
  namespace   = [[ hcl .Namespace ]]
  datacenters = [[ hclList .Datacenters ]]
  node_pool   = [[ hcl .NodePool ]]

  meta = {
    "codehub.io/workspace-id" = [[ hcl .WorkspaceID ]]
    "codehub.io/managed"      = "true"
    "codehub.io/op-id"        = [[ hcl .OpID ]]
    "codehub.io/archive-key"  = [[ hcl .ArchiveKey ]]
    "codehub.io/attempt"      = "[[ .Attempt ]]"
  }

  group "archive" {
    volume "home" {
      type            = "host"
      source          = [[ hcl .VolumeName ]]
      read_only       = true
      access_mode     = "single-node-reader-only"
      attachment_mode = "file-system"
    }

    restart {
      attempts = 0
      mode     = "fail"
    }

    reschedule {
      attempts  = 0
      unlimited = false
    }

    [[ template "mover_task" (mover . "archive") ]]
  }
}
`

// operatorHelpers replaces the embedded mover_args in every job: the
// directory as one "--src=DIR" or "--dst=DIR" argument.
const operatorHelpers = `[[ define "mover_args" -]]
["job", [[ hcl .Op ]][[ if .OnStop ]], "--on-stop"[[ end ]], [[ if .ReadOnly ]][[ hcl (printf "--src=%s" .HomeDir) ]][[ else ]][[ hcl (printf "--dst=%s" .HomeDir) ]][[ end ]]]
[[- end ]]
`

// TestE2EOperatorJobspecs: an operator's archive template and helpers,
// named by the configuration file's jobspecs dir, are what Nomad runs; the
// restore job, not overridden, is the embedded one with the operator's
// helper, and a home goes to S3 and back through them.
func TestE2EOperatorJobspecs(t *testing.T) {
	nomadtest.Binary(t)
	s3 := testenv.NewS3(t)
	bins := t.TempDir()
	nomadtest.BuildProgram(t, bins, "../cmd/codehub", "codehub")
	dir := t.TempDir()
	for name, text := range map[string]string{
		jobspecs.KindArchive.FileName(): operatorArchive,
		jobspecs.HelpersFile:            operatorHelpers,
	} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	a := nomadtest.Start(t, "")
	b := e2eBackend(t, a, bins, e2eConfig{s3: s3, command: "/bin/sh", jobspecsDir: dir})
	ctx := t.Context()
	const wsID = "01jb3x7k9q2m5n8p4r6s0t1v2w"

	if err := b.ProvisionVolume(ctx, controller.VolumeSpec{WorkspaceID: wsID, UID: os.Getuid(), GID: os.Getgid()}); err != nil {
		t.Fatal(err)
	}
	observeUntil(t, b, wsID, "volume ready", func(o controller.Observed) bool { return o.VolumeReady })
	home, err := b.HomeDir(ctx, wsID)
	if err != nil {
		t.Fatal(err)
	}
	content := []byte("kept by the operator's archive job\n")
	if err := os.WriteFile(filepath.Join(home, "notes.txt"), content, 0o600); err != nil {
		t.Fatal(err)
	}

	const opID = "01jb3xa00000000000000000op"
	key := archiveHome(t, b, s3, wsID, opID)
	archiveID := controller.JobName(wsID, controller.JobArchive)
	src := submittedSource(t, b, archiveID)
	if !strings.HasPrefix(src, "# The platform team's archive of "+wsID) || !strings.Contains(src, `"--src=`+home+`"`) {
		t.Errorf("archive job source is not the operator's template with its helper:\n%s", src)
	}
	job, _, err := b.client.Jobs().Info(archiveID, b.query(ctx))
	if err != nil {
		t.Fatal(err)
	}
	if job.Priority == nil || *job.Priority != 70 {
		t.Errorf("archive job priority %v, want the operator's 70", job.Priority)
	}
	if err := b.PurgeJob(ctx, wsID, controller.JobArchive); err != nil {
		t.Fatal(err)
	}

	if err := os.Remove(filepath.Join(home, "notes.txt")); err != nil {
		t.Fatal(err)
	}
	if err := b.SubmitRestore(ctx, controller.JobSpec{WorkspaceID: wsID, OpID: opID, ArchiveKey: key, Attempt: 1}); err != nil {
		t.Fatal(err)
	}
	o := observeUntil(t, b, wsID, "restore finished", func(o controller.Observed) bool {
		return o.Restore != nil && (o.Restore.Status == controller.JobSucceeded || o.Restore.Status == controller.JobFailed)
	})
	if o.Restore.Status != controller.JobSucceeded {
		t.Fatalf("restore result = %+v", o.Restore)
	}
	src = submittedSource(t, b, controller.JobName(wsID, controller.JobRestore))
	if !strings.HasPrefix(src, "# Restores the home volume of workspace "+wsID) || !strings.Contains(src, `"--dst=`+home+`"`) {
		t.Errorf("restore job source is not the embedded template with the operator's helper:\n%s", src)
	}
	got, err := os.ReadFile(filepath.Join(home, "notes.txt"))
	if err != nil || !bytes.Equal(got, content) {
		t.Fatalf("restored notes.txt = %q, %v; want %q", got, err, content)
	}
	if err := b.PurgeJob(ctx, wsID, controller.JobRestore); err != nil {
		t.Fatal(err)
	}
	deleteVolume(t, b, wsID)
}

// archiveHome runs the first attempt of an archive of wsID's home as opID
// and returns its key once the job succeeded and the object is in S3.
func archiveHome(t *testing.T, b *Backend, s3 testenv.S3, wsID, opID string) string {
	t.Helper()
	key := "archives/" + wsID + "/" + opID + "/home.tar.zst"
	if err := b.SubmitArchive(t.Context(), controller.JobSpec{WorkspaceID: wsID, OpID: opID, ArchiveKey: key, Attempt: 1}); err != nil {
		t.Fatal(err)
	}
	o := observeUntil(t, b, wsID, "archive finished", func(o controller.Observed) bool {
		return o.Archive != nil && (o.Archive.Status == controller.JobSucceeded || o.Archive.Status == controller.JobFailed)
	})
	if o.Archive.Status != controller.JobSucceeded {
		t.Fatalf("archive result = %+v", o.Archive)
	}
	if _, err := s3.Client.StatObject(t.Context(), s3.Bucket, key, minio.StatObjectOptions{}); err != nil {
		t.Fatalf("archive object %s: %v", key, err)
	}
	return key
}
