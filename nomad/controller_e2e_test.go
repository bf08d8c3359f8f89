package nomad

import (
	"bytes"
	"context"
	"crypto/rand"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/minio/minio-go/v7"

	"github.com/codehub-io/codehub/archive"
	"github.com/codehub-io/codehub/controller"
	"github.com/codehub-io/codehub/internal/nomadtest"
	"github.com/codehub-io/codehub/internal/testenv"
	"github.com/codehub-io/codehub/store"
	"github.com/codehub-io/codehub/workspace"
)

// TestE2EControllerLifecycle drives one workspace through every phase with
// the real controller, PostgreSQL, S3 server and Nomad agent:
// create -> RUNNING -> STANDBY -> ARCHIVED -> RUNNING (home restored byte
// for byte) -> DELETED.
func TestE2EControllerLifecycle(t *testing.T) {
	h := newControllerHarness(t, true)
	ctx, s3, backend, svc := t.Context(), h.s3, h.backend, h.svc

	created, err := svc.Create(ctx, workspace.CreateRequest{OwnerID: h.owner, Name: "e2e"})
	if err != nil {
		t.Fatal(err)
	}
	w := created.Workspace
	h.tickUntil(w.ID, "RUNNING", settled(workspace.PhaseRunning))
	home, err := backend.HomeDir(ctx, w.ID)
	if err != nil {
		t.Fatal(err)
	}
	content := make([]byte, 256<<10)
	if _, err := rand.Read(content); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(home, "project.bin"), content, 0o600); err != nil {
		t.Fatal(err)
	}

	if _, err := svc.SetDesired(ctx, w.ID, workspace.DesiredStandby, workspace.CauseUser); err != nil {
		t.Fatal(err)
	}
	h.tickUntil(w.ID, "STANDBY", settled(workspace.PhaseStandby))
	assertObserved(t, backend, w.ID, func(o controller.Observed) bool { return !o.ContainerLive && o.VolumeReady })

	if _, err := svc.SetDesired(ctx, w.ID, workspace.DesiredArchived, workspace.CauseUser); err != nil {
		t.Fatal(err)
	}
	w = h.tickUntil(w.ID, "ARCHIVED", settled(workspace.PhaseArchived))
	if w.ArchiveKey == nil {
		t.Fatal("ARCHIVED without an archive key")
	}
	for _, k := range []string{*w.ArchiveKey, *w.ArchiveKey + ".meta"} {
		if _, err := s3.Client.StatObject(ctx, s3.Bucket, k, minio.StatObjectOptions{}); err != nil {
			t.Fatalf("archive object %s: %v", k, err)
		}
	}
	assertObserved(t, backend, w.ID, func(o controller.Observed) bool { return !o.VolumeExists && !o.ContainerLive })

	if _, err := svc.SetDesired(ctx, w.ID, workspace.DesiredRunning, workspace.CauseUser); err != nil {
		t.Fatal(err)
	}
	h.tickUntil(w.ID, "RUNNING after restore", settled(workspace.PhaseRunning))
	addr, err := NewServiceResolver(hclog.NewNullLogger(), h.agent.Client, ResolverOptions{Namespace: "default"}).Resolve(ctx, w.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got := fetch(t, "http://"+addr+"/files/project.bin"); !bytes.Equal(got, content) {
		t.Fatal("the restored workspace serves different bytes than were archived")
	}

	if err := svc.Delete(ctx, w.ID); err != nil {
		t.Fatal(err)
	}
	h.tickUntil(w.ID, "DELETED", func(w workspace.Workspace) bool { return w.Phase == workspace.PhaseDeleted })
	assertObserved(t, backend, w.ID, func(o controller.Observed) bool { return !o.VolumeExists && !o.ContainerLive })
}

func assertObserved(t *testing.T, b *Backend, wsID string, cond func(controller.Observed) bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	snap, err := b.Observe(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if o := snap.Workspaces[wsID]; !cond(o) {
		t.Fatalf("observed %+v", o)
	}
}

// controllerHarness is the real controller over PostgreSQL, the S3 server
// and a real Nomad agent running the test workspace program.
type controllerHarness struct {
	tb      testing.TB
	pool    *pgxpool.Pool
	s3      testenv.S3
	agent   *nomadtest.Agent
	backend *Backend
	ctl     *controller.WorkspaceController
	// newController makes a controller as a fresh codehub process would.
	newController func() *controller.WorkspaceController
	svc           *workspace.Service
	owner         string
	epoch         int64
}

// newControllerHarness starts everything; withCodehub builds the codehub
// binary for archive and restore jobs.
func newControllerHarness(tb testing.TB, withCodehub bool) *controllerHarness {
	tb.Helper()
	nomadtest.Binary(tb)
	return newControllerHarnessOn(tb, withCodehub, func() *nomadtest.Agent { return nomadtest.Start(tb, "") }, controller.DefaultConfig())
}

// newControllerHarnessOn is newControllerHarness on the agent start
// returns (called once the programs are built) with the controller
// configured by cfg.
func newControllerHarnessOn(tb testing.TB, withCodehub bool, start func() *nomadtest.Agent, cfg controller.Config) *controllerHarness {
	tb.Helper()
	h := &controllerHarness{tb: tb, s3: testenv.NewS3(tb)}
	h.pool, h.owner, h.epoch = newTestDB(tb, "nomad-e2e")
	pool := h.pool
	logger := hclog.NewNullLogger()
	bins := tb.TempDir()
	nomadtest.BuildProgram(tb, bins, "./testdata/wsserver", "wsserver")
	if withCodehub {
		nomadtest.BuildProgram(tb, bins, "../cmd/codehub", "codehub")
	}
	h.agent = start()
	h.backend = e2eBackend(tb, h.agent, bins, e2eConfig{s3: h.s3})

	cfg.VolumeUID, cfg.VolumeGID = os.Getuid(), os.Getgid()
	h.newController = func() *controller.WorkspaceController {
		return controller.NewWorkspaceController(logger, pool, h.backend, archive.NewStore(logger, h.s3.Client, h.s3.Bucket), cfg)
	}
	h.ctl = h.newController()
	h.svc = workspace.NewService(logger, pool, workspace.Options{DefaultImage: "wsserver:test"})
	return h
}

// newTestDB opens a migrated database of the test's own holding one
// user, owner, and leads it as holder: epoch is the leader's fence.
func newTestDB(tb testing.TB, holder string) (pool *pgxpool.Pool, owner string, epoch int64) {
	tb.Helper()
	ctx := tb.Context()
	pool, err := store.Open(ctx, testenv.PostgresURL(tb))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(pool.Close)
	if err := store.Migrate(ctx, pool, hclog.NewNullLogger()); err != nil {
		tb.Fatal(err)
	}
	owner = workspace.NewID()
	if _, err := pool.Exec(ctx, `INSERT INTO users (id, username, password_hash) VALUES ($1, 'e2e', 'x')`, owner); err != nil {
		tb.Fatal(err)
	}
	if epoch, err = store.BumpEpoch(ctx, pool, holder); err != nil {
		tb.Fatal(err)
	}
	return pool, owner, epoch
}

// tickUntil runs controller passes until the workspace row satisfies cond.
func (h *controllerHarness) tickUntil(id, what string, cond func(workspace.Workspace) bool) workspace.Workspace {
	h.tb.Helper()
	ctx := h.tb.Context()
	var w workspace.Workspace
	nomadtest.Eventually(h.tb, 3*time.Minute, what, func() bool {
		if _, err := h.ctl.Tick(ctx, h.epoch); err != nil {
			h.tb.Fatalf("tick: %v", err)
		}
		w = h.row(h.tb, id)
		if w.Phase == workspace.PhaseError {
			h.tb.Fatalf("workspace in ERROR: %v %v", deref(w.ErrorReason), deref(w.ErrorMessage))
		}
		return cond(w)
	})
	return w
}

// row reads the workspace's row, even once it is soft-deleted (DELETED).
func (h *controllerHarness) row(tb testing.TB, id string) workspace.Workspace {
	tb.Helper()
	rows, err := h.pool.Query(tb.Context(), `SELECT `+store.WorkspaceColumns+` FROM workspaces WHERE id = $1`, id)
	var w workspace.Workspace
	if err == nil {
		w, err = pgx.CollectOneRow(rows, pgx.RowToStructByName[workspace.Workspace])
	}
	if err != nil {
		tb.Fatal(err)
	}
	return w
}

// settled: the workspace is in phase p with no operation in flight.
func settled(p workspace.Phase) func(workspace.Workspace) bool {
	return func(w workspace.Workspace) bool { return w.Phase == p && w.Operation == workspace.OpNone }
}

// BenchmarkControllerWakeToReady measures what a user waits for when a
// STANDBY workspace is opened: from desired RUNNING until the controller
// records phase RUNNING, which requires the upstream's check to pass.
// Controller passes run back to back with 100 ms between them.
func BenchmarkControllerWakeToReady(b *testing.B) {
	h := newControllerHarness(b, false)
	ctx := b.Context()
	w, err := h.svc.Create(ctx, workspace.CreateRequest{OwnerID: h.owner, Name: "wake"})
	if err != nil {
		b.Fatal(err)
	}
	h.tickUntil(w.ID, "RUNNING", settled(workspace.PhaseRunning))

	var samples []time.Duration
	for b.Loop() {
		b.StopTimer()
		if _, err := h.svc.SetDesired(ctx, w.ID, workspace.DesiredStandby, workspace.CauseUser); err != nil {
			b.Fatal(err)
		}
		h.tickUntil(w.ID, "STANDBY", settled(workspace.PhaseStandby))
		b.StartTimer()

		start := time.Now()
		if _, err := h.svc.SetDesired(ctx, w.ID, workspace.DesiredRunning, workspace.CauseUser); err != nil {
			b.Fatal(err)
		}
		h.tickUntil(w.ID, "RUNNING", settled(workspace.PhaseRunning))
		samples = append(samples, time.Since(start))
	}
	slices.Sort(samples)
	b.ReportMetric(samples[len(samples)/2].Seconds(), "p50-s")
	b.ReportMetric(samples[len(samples)*9/10].Seconds(), "p90-s")
	b.ReportMetric(samples[len(samples)-1].Seconds(), "max-s")
}
