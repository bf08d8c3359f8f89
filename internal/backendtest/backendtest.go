// Package backendtest is the one contract suite every controller.Backend
// runs against itself: what Observe reports after each actuator call, that
// a repeated call changes nothing, what "gone" means, the data mover's
// result codes, and that a job stopped half way is never reported as done.
// A backend's own tests call Run with a Factory that builds it from a
// configuration file, the way `codehub server` does. Run needs the test S3
// server (internal/testenv); it never decides what is skipped for want of
// a backend's own programs, which is the factory's business.
package backendtest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/codehub-io/codehub/config"
	"github.com/codehub-io/codehub/controller"
	"github.com/codehub-io/codehub/internal/testenv"
)

// Subject is one backend under test.
type Subject struct {
	Backend   controller.Backend
	Upstreams controller.Upstreams
	// Home returns the directory of a workspace's home volume as this
	// process reaches it, for putting files in and reading them back.
	Home func(ctx context.Context, wsID string) (string, error)
}

// Factory builds a backend whose archives go to s3. Run calls it more than
// once: for the test S3 server, and for stores that fail on purpose.
type Factory func(t *testing.T, s3 testenv.S3) Subject

// Run holds the backends factory builds to the Backend contract. Each part
// uses workspaces of its own.
func Run(t *testing.T, factory Factory) {
	s3 := testenv.NewS3(t)
	s := factory(t, s3)
	t.Run("Volume", func(t *testing.T) { testVolume(t, s) })
	t.Run("Workspace", func(t *testing.T) { testWorkspace(t, s) })
	t.Run("ArchiveAndRestore", func(t *testing.T) { testArchiveAndRestore(t, s, s3) })
	t.Run("FailingArchive", func(t *testing.T) { testFailingArchive(t, factory(t, missingBucket(s3))) })
	t.Run("StoppedJobs", func(t *testing.T) { testStoppedJobs(t, factory(t, blackhole(t))) })
	t.Run("Gone", func(t *testing.T) { testGone(t, s) })
}

// LoadConfig writes blocks (a backend block and the settings it needs),
// the S3 block of s3 and placeholders for the services no backend uses to
// a configuration file, and loads it with config.Load.
func LoadConfig(t testing.TB, s3 testenv.S3, blocks string) *config.Config {
	t.Helper()
	text := fmt.Sprintf(`database {
  url = "postgres://codehub@127.0.0.1:5432/codehub"
}
redis {
  url = "redis://127.0.0.1:6379/0"
}
s3 {
  endpoint   = %q
  bucket     = %q
  region     = %q
  access_key = %q
  secret_key = %q
}
%s`, s3.Endpoint, s3.Bucket, s3.Region, s3.AccessKey, s3.SecretKey, blocks)
	path := filepath.Join(t.TempDir(), "codehub.hcl")
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(path)
	if err != nil {
		t.Fatalf("load test configuration: %v\n%s", err, text)
	}
	return cfg
}

// missingBucket is s3 with a bucket that does not exist: every upload fails
// with S3_ACCESS_ERROR.
func missingBucket(s3 testenv.S3) testenv.S3 {
	s3.Bucket = "missing-" + testenv.Suffix()
	return s3
}

// blackhole is an S3 endpoint that accepts connections and never answers,
// so a job using it runs until it is stopped.
func blackhole(t *testing.T) testenv.S3 {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		l.Close()
		<-done
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	return testenv.S3{Endpoint: l.Addr().String(), Bucket: "blackhole", Region: "us-east-1", AccessKey: "unused", SecretKey: "unused"}
}

// newID returns a workspace id of the form the service layer gives.
func newID() string { return strings.ToLower(ulid.Make().String()) }

// limit only keeps a broken backend from hanging the test; the assertions
// are the conditions, never the time they took.
const limit = 3 * time.Minute

// observe returns what the backend reports of wsID.
func observe(t *testing.T, s Subject, wsID string) controller.Observed {
	t.Helper()
	snap, err := s.Backend.Observe(t.Context())
	if err != nil {
		t.Fatalf("Observe: %v", err)
	}
	return snap.Workspaces[wsID]
}

// until observes wsID until cond holds, and fails with the last
// observation if it never does.
func until(t *testing.T, s Subject, wsID, what string, cond func(controller.Observed) bool) controller.Observed {
	t.Helper()
	deadline := time.Now().Add(limit)
	for {
		o := observe(t, s, wsID)
		if cond(o) {
			return o
		}
		if time.Now().After(deadline) {
			t.Fatalf("never observed %s; last observed %s", what, describe(o))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// steady fails unless cond holds on each of several observations over a
// second: what a repeated call must not disturb.
func steady(t *testing.T, s Subject, wsID, what string, cond func(controller.Observed) bool) {
	t.Helper()
	for range 5 {
		if o := observe(t, s, wsID); !cond(o) {
			t.Fatalf("%s no longer holds: observed %s", what, describe(o))
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// assertGone fails unless Observe reports nothing of wsID.
func assertGone(t *testing.T, s Subject, wsID string) {
	t.Helper()
	if o := observe(t, s, wsID); o != (controller.Observed{}) {
		t.Fatalf("gone workspace still observed as %s", describe(o))
	}
}

// provision creates the volume of wsID and waits until it is ready.
func provision(t *testing.T, s Subject, wsID string) controller.Observed {
	t.Helper()
	if err := s.Backend.ProvisionVolume(t.Context(), controller.VolumeSpec{WorkspaceID: wsID, UID: os.Getuid(), GID: os.Getgid()}); err != nil {
		t.Fatalf("ProvisionVolume: %v", err)
	}
	return until(t, s, wsID, "volume ready", func(o controller.Observed) bool { return o.VolumeExists && o.VolumeReady })
}

// deleteVolume deletes the volume observed as volumeID, retrying while the
// backend still counts a claim of what ended, and waits until it is gone.
func deleteVolume(t *testing.T, s Subject, wsID, volumeID string) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for {
		err := s.Backend.DeleteVolume(t.Context(), wsID, volumeID)
		if err == nil {
			break
		}
		if !errors.Is(err, controller.ErrVolumeInUse) || time.Now().After(deadline) {
			t.Fatalf("DeleteVolume: %v", err)
		}
		time.Sleep(250 * time.Millisecond)
	}
	until(t, s, wsID, "volume gone", func(o controller.Observed) bool { return !o.VolumeExists && !o.VolumeReady && o.VolumeID == "" })
}

// describe prints an observation with its job results and failure.
func describe(o controller.Observed) string {
	out := fmt.Sprintf("%+v", o)
	if o.Failure != nil {
		out += fmt.Sprintf(" failure=%+v", *o.Failure)
	}
	if o.Archive != nil {
		out += fmt.Sprintf(" archive=%+v", *o.Archive)
	}
	if o.Restore != nil {
		out += fmt.Sprintf(" restore=%+v", *o.Restore)
	}
	return out
}
