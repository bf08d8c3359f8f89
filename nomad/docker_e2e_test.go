package nomad

import (
	"bytes"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"testing"

	"github.com/hashicorp/go-hclog"

	"github.com/codehub-io/codehub/config"
	"github.com/codehub-io/codehub/controller"
	"github.com/codehub-io/codehub/internal/nomadtest"
	"github.com/codehub-io/codehub/internal/testenv"
	"github.com/codehub-io/codehub/jobspecs"
)

// Environment of the docker driver check. It needs a Docker engine and an
// image already loaded in it, so it never runs under `make test`: see
// docs/nomad.md for how to start an engine without a bridge and load the
// image built from testdata/wsserver.
const (
	envDockerEndpoint = "CODEHUB_TEST_DOCKER_ENDPOINT"  // e.g. unix:///tmp/docker.sock
	envDockerImage    = "CODEHUB_TEST_DOCKER_IMAGE"     // wsserver image, entrypoint /wsserver
	envDockerJobImage = "CODEHUB_TEST_DOCKER_JOB_IMAGE" // codehub image, entrypoint /codehub
)

// TestE2EDockerWorkspace runs the workspace job under the docker driver:
// the home volume is mounted at /home/coder and writable by uid 1000, the
// service passes its check on the host network, and the container demands
// the upstream token it read from its Nomad Variable. Then the archive job
// (home mounted read-only) and the restore job run from the job image.
func TestE2EDockerWorkspace(t *testing.T) {
	nomadtest.Binary(t)
	endpoint, image, jobImage := os.Getenv(envDockerEndpoint), os.Getenv(envDockerImage), os.Getenv(envDockerJobImage)
	if endpoint == "" || image == "" || jobImage == "" {
		t.Skipf("%s, %s and %s not set: no Docker engine for the docker driver check", envDockerEndpoint, envDockerImage, envDockerJobImage)
	}
	s3 := testenv.NewS3(t)
	a := nomadtest.Start(t, fmt.Sprintf(`
plugin "docker" {
  config {
    endpoint = %q
  }
}
`, endpoint), DriverDocker)
	r, err := jobspecs.NewRenderer("")
	if err != nil {
		t.Fatal(err)
	}
	upstreamToken := func(id string) string { return "tok-" + id }
	b := New(hclog.NewNullLogger(), a.Client, Options{
		Driver:        DriverDocker,
		JobImage:      jobImage,
		UpstreamToken: upstreamToken,
		S3: config.S3{
			Endpoint: s3.Endpoint, Bucket: s3.Bucket, Region: s3.Region,
			AccessKey: config.Secret(s3.AccessKey), SecretKey: config.Secret(s3.SecretKey),
		},
		Workspace: WorkspaceOptions{
			Image:        image,
			Args:         []string{"-listen", "127.0.0.1:%PORT%", "-home", "%HOME%"},
			NetworkMode:  "host",
			UpstreamAuth: true,
			UID:          1000, GID: 1000, CPU: 100, Memory: 64,
		},
	}, r)
	ctx := t.Context()
	const wsID = "01jb3x7k9q2m5n8p4r6s0tdock"
	token := upstreamToken(wsID)
	if err := b.ProvisionVolume(ctx, controller.VolumeSpec{WorkspaceID: wsID, UID: 1000, GID: 1000}); err != nil {
		t.Fatal(err)
	}
	observeUntil(t, b, wsID, "volume ready", func(o controller.Observed) bool { return o.VolumeReady })
	hostPath, err := b.hostPath(ctx, wsID)
	if err != nil {
		t.Fatal(err)
	}
	content := []byte("written on the host, served from the container\n")
	if err := os.WriteFile(filepath.Join(hostPath, "hello.txt"), content, 0o644); err != nil {
		t.Fatal(err)
	}

	if err := b.StartWorkspace(ctx, controller.WorkspaceSpec{WorkspaceID: wsID}); err != nil {
		t.Fatal(err)
	}
	observeUntil(t, b, wsID, "upstream ready", func(o controller.Observed) bool { return o.UpstreamReady })
	addr, err := NewServiceResolver(hclog.NewNullLogger(), a.Client, ResolverOptions{}).Resolve(ctx, wsID)
	if err != nil {
		t.Fatal(err)
	}
	// The template put the token into the container's environment; the
	// check passed without it because /healthz is open.
	hello := "http://" + addr + "/files/hello.txt"
	if code, _ := get(t, hello, ""); code != http.StatusUnauthorized {
		t.Fatalf("GET %s without the session cookie: %d, want 401", hello, code)
	}
	if code, _ := get(t, hello, "tok-wrong"); code != http.StatusUnauthorized {
		t.Fatalf("GET %s with a wrong session cookie: %d, want 401", hello, code)
	}
	if got := fetchWithToken(t, hello, token); !bytes.Equal(got, content) {
		t.Fatalf("container serves %q", got)
	}
	// The program wrote its marker as uid 1000 into the mounted home.
	st, err := os.Stat(filepath.Join(hostPath, ".wsserver-started"))
	if err != nil {
		t.Fatal(err)
	}
	if uid := fileUID(st); uid != 1000 {
		t.Fatalf("marker owned by uid %d, want 1000", uid)
	}

	if err := b.StopWorkspace(ctx, wsID); err != nil {
		t.Fatal(err)
	}
	observeUntil(t, b, wsID, "container gone", func(o controller.Observed) bool { return !o.ContainerLive })
	if err := b.PurgeJob(ctx, wsID, controller.JobWorkspace); err != nil {
		t.Fatal(err)
	}

	key := "archives/" + wsID + "/01jb3xd00000000000000000op/home.tar.zst"
	job := controller.JobSpec{WorkspaceID: wsID, OpID: "01jb3xd00000000000000000op", ArchiveKey: key, Attempt: 1}
	if err := b.SubmitArchive(ctx, job); err != nil {
		t.Fatal(err)
	}
	o := observeUntil(t, b, wsID, "archive finished", func(o controller.Observed) bool {
		return o.Archive != nil && (o.Archive.Status == controller.JobSucceeded || o.Archive.Status == controller.JobFailed)
	})
	if o.Archive.Status != controller.JobSucceeded {
		t.Fatalf("archive under docker: %+v", o.Archive)
	}
	if err := b.PurgeJob(ctx, wsID, controller.JobArchive); err != nil {
		t.Fatal(err)
	}
	deleteVolume(t, b, wsID)

	if err := b.ProvisionVolume(ctx, controller.VolumeSpec{WorkspaceID: wsID, UID: 1000, GID: 1000}); err != nil {
		t.Fatal(err)
	}
	observeUntil(t, b, wsID, "new volume ready", func(o controller.Observed) bool { return o.VolumeReady })
	if err := b.SubmitRestore(ctx, job); err != nil {
		t.Fatal(err)
	}
	o = observeUntil(t, b, wsID, "restore finished", func(o controller.Observed) bool {
		return o.Restore != nil && (o.Restore.Status == controller.JobSucceeded || o.Restore.Status == controller.JobFailed)
	})
	if o.Restore.Status != controller.JobSucceeded {
		t.Fatalf("restore under docker: %+v", o.Restore)
	}
	hostPath, err = b.hostPath(ctx, wsID)
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(filepath.Join(hostPath, "hello.txt"))
	if err != nil || !bytes.Equal(got, content) {
		t.Fatalf("restored hello.txt = %q, %v", got, err)
	}
	// Restored as the workspace user, so the workspace can write its home.
	st, err = os.Stat(filepath.Join(hostPath, "hello.txt"))
	if err != nil {
		t.Fatal(err)
	}
	if uid := fileUID(st); uid != 1000 {
		t.Fatalf("restored file owned by uid %d, want 1000", uid)
	}
	if err := b.PurgeJob(ctx, wsID, controller.JobRestore); err != nil {
		t.Fatal(err)
	}
	deleteVolume(t, b, wsID)
}
