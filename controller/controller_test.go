package controller

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/codehub-io/codehub/internal/testenv"
	"github.com/codehub-io/codehub/store"
	"github.com/codehub-io/codehub/workspace"
)

// harness is one database, one fake backend and a clock the test moves.
type harness struct {
	t       testing.TB
	pool    *pgxpool.Pool
	url     string
	svc     *workspace.Service
	backend *fakeBackend
	epoch   int64
	owner   string

	clock     *testenv.Clock
	realClock atomic.Bool
}

func newPool(t testing.TB) (*pgxpool.Pool, string) {
	t.Helper()
	ctx := context.Background()
	url := testenv.PostgresURL(t)
	pool, err := store.Open(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	if err := store.Migrate(ctx, pool, hclog.NewNullLogger()); err != nil {
		t.Fatal(err)
	}
	return pool, url
}

func newHarness(t testing.TB) *harness {
	t.Helper()
	pool, url := newPool(t)
	h := &harness{t: t, pool: pool, url: url, backend: newFakeBackend(), clock: testenv.NewClock(time.Now())}
	h.svc = workspace.NewService(hclog.NewNullLogger(), pool, workspace.Options{DefaultImage: "img:1"})
	h.owner = addUser(t, pool, "alice")
	epoch, err := store.BumpEpoch(context.Background(), pool, "test")
	if err != nil {
		t.Fatal(err)
	}
	h.epoch = epoch
	h.checkVolumeDeletions()
	return h
}

func addUser(t testing.TB, pool *pgxpool.Pool, name string) string {
	t.Helper()
	id := workspace.NewID()
	if _, err := pool.Exec(context.Background(),
		`INSERT INTO users (id, username, password_hash) VALUES ($1, $2, 'x')`, id, name); err != nil {
		t.Fatal(err)
	}
	return id
}

// checkVolumeDeletions fails the test if a live workspace's volume is
// deleted while the home is not where a deletion may happen: LocateHome
// must place it in a committed archive, and that archive must hold
// exactly the volume's contents.
func (h *harness) checkVolumeDeletions() {
	h.backend.beforeDeleteVolume = func(wsID string) {
		row, ok := h.archivedBefore("volume deletion", wsID)
		if !ok {
			return
		}
		home := h.backend.volumes[wsID].data
		if home == "" {
			// Nothing to lose: a volume a restore never filled.
			return
		}
		archived, ok := h.backend.store.data(*row.ArchiveKey)
		if !ok || archived != home {
			h.t.Errorf("volume of %s (%q) deleted; committed archive %s holds %q (exists %v)", wsID, home, *row.ArchiveKey, archived, ok)
		}
	}
}

// archivedBefore reads the row of a live workspace whose volume is about
// to be deleted or overwritten, and fails the test unless LocateHome,
// given that row and the volume as the backend holds it, says a committed
// archive holds the home. The backend's lock is held. ok is false when
// there is nothing more to check.
func (h *harness) archivedBefore(what, wsID string) (row workspace.Workspace, ok bool) {
	rows, err := h.pool.Query(context.Background(), `SELECT `+store.WorkspaceColumns+` FROM workspaces WHERE id = $1`, wsID)
	if err != nil {
		h.t.Errorf("read workspace before %s: %v", what, err)
		return row, false
	}
	ws, err := collect(rows)
	if err != nil || len(ws) != 1 {
		h.t.Errorf("read workspace before %s: %v", what, err)
		return row, false
	}
	row = ws[0]
	if row.DeletedAt != nil {
		return row, false
	}
	if home := workspace.LocateHome(row, h.backend.volumeState(wsID)); !home.Archived() {
		h.t.Errorf("%s for %s with the home %s (archive key %q, restore marker %q, op %s)",
			what, wsID, home, deref(row.ArchiveKey), deref(row.RestoreMarker), row.Operation)
		return row, false
	}
	return row, true
}

func (h *harness) now() time.Time {
	if h.realClock.Load() {
		return time.Now()
	}
	return h.clock.Now()
}

// setClockReal makes controllers use the wall clock (coordinator tests).
func (h *harness) setClockReal() { h.realClock.Store(true) }

func (h *harness) advance(d time.Duration) { h.clock.Add(d) }

func (h *harness) controller() *WorkspaceController {
	return h.controllerWithMetrics(nil)
}

// controllerWithMetrics is a controller on the harness's clock recording to m.
func (h *harness) controllerWithMetrics(m *Metrics) *WorkspaceController {
	cfg := DefaultConfig()
	cfg.Metrics = m
	c := NewWorkspaceController(hclog.NewNullLogger(), h.pool, h.backend, h.backend.store, cfg)
	c.SetClock(h.now)
	return c
}

// tick runs passes of c, failing the test on a pass error.
func (h *harness) tick(c *WorkspaceController, passes int) {
	h.t.Helper()
	for range passes {
		if _, err := c.Tick(context.Background(), h.epoch); err != nil {
			h.t.Fatal(err)
		}
	}
}

// archiveTimesOut takes a new workspace to STANDBY and asks to archive it
// with the backend holding every job, then lets ARCHIVING run out of time.
func (h *harness) archiveTimesOut(c *WorkspaceController) workspace.Workspace {
	h.t.Helper()
	w := h.create("dev")
	h.converge(c)
	h.setDesired(w.ID, workspace.DesiredStandby)
	h.converge(c)
	h.setDesired(w.ID, workspace.DesiredArchived)
	h.backend.hold = true
	h.tick(c, 3)
	h.advance(time.Hour)
	h.tick(c, 1)
	return w
}

func (h *harness) create(name string) workspace.Workspace {
	h.t.Helper()
	w, err := h.svc.Create(context.Background(), workspace.CreateRequest{OwnerID: h.owner, Name: name})
	if err != nil {
		h.t.Fatal(err)
	}
	return w.Workspace
}

// archiveThenRestore archives workspace id and wakes it again, so its home
// is one restored from its archive.
func (h *harness) archiveThenRestore(c *WorkspaceController, id string) {
	h.t.Helper()
	h.setDesired(id, workspace.DesiredArchived)
	h.converge(c)
	h.setDesired(id, workspace.DesiredRunning)
	h.converge(c)
}

// converge ticks a fresh controller until a pass finds nothing to do.
func (h *harness) converge(c *WorkspaceController) {
	h.t.Helper()
	for range 60 {
		stats, err := c.Tick(context.Background(), h.epoch)
		if err != nil {
			h.t.Fatalf("tick: %v", err)
		}
		if stats.Writes == 0 && stats.Steps == 0 && stats.InFlight == 0 {
			return
		}
		h.advance(2 * time.Second)
	}
	h.t.Fatalf("no convergence after 60 passes")
}

func (h *harness) row(id string) workspace.Workspace {
	h.t.Helper()
	rows, err := h.pool.Query(context.Background(), `SELECT `+store.WorkspaceColumns+` FROM workspaces WHERE id = $1`, id)
	if err != nil {
		h.t.Fatal(err)
	}
	ws, err := collect(rows)
	if err != nil || len(ws) != 1 {
		h.t.Fatalf("read workspace %s: %v", id, err)
	}
	return ws[0]
}

func (h *harness) setDesired(id string, d workspace.DesiredState) {
	h.t.Helper()
	if _, err := h.svc.SetDesired(context.Background(), id, d, workspace.CauseUser); err != nil {
		h.t.Fatalf("set desired %s: %v", d, err)
	}
}

func (h *harness) expect(id string, phase workspace.Phase, resources ...string) workspace.Workspace {
	h.t.Helper()
	w := h.row(id)
	if w.Phase != phase || w.Operation != workspace.OpNone || w.ErrorReason != nil {
		h.t.Fatalf("workspace %s: phase %s op %s error %s (%s); want %s", id, w.Phase, w.Operation,
			deref(w.ErrorReason), deref(w.ErrorMessage), phase)
	}
	if got := h.backend.resources(id); !slices.Equal(got, resources) {
		h.t.Fatalf("resources of %s = %v, want %v", id, got, resources)
	}
	return w
}

func TestLifecycle(t *testing.T) {
	h := newHarness(t)
	c := h.controller()
	w := h.create("dev")
	h.converge(c)
	first := h.expect(w.ID, workspace.PhaseRunning, "volume", "container")
	h.backend.writeHome(w.ID, "v1")
	if run := h.backend.runOf(w.ID); first.RunID == "" || run != first.RunID {
		t.Fatalf("stored run %q, started run %q", first.RunID, run)
	}

	h.setDesired(w.ID, workspace.DesiredStandby)
	h.converge(c)
	h.expect(w.ID, workspace.PhaseStandby, "volume")

	h.setDesired(w.ID, workspace.DesiredArchived)
	h.converge(c)
	got := h.expect(w.ID, workspace.PhaseArchived)
	if data, ok := h.backend.store.data(deref(got.ArchiveKey)); !ok || data != "v1" {
		t.Fatalf("archive %s holds %q (exists %v)", deref(got.ArchiveKey), data, ok)
	}

	h.setDesired(w.ID, workspace.DesiredRunning)
	h.converge(c)
	got = h.expect(w.ID, workspace.PhaseRunning, "volume", "container")
	if home, _ := h.backend.home(w.ID); home != "v1" {
		t.Fatalf("restored home = %q", home)
	}
	if deref(got.RestoreMarker) != deref(got.ArchiveKey) {
		t.Fatalf("restore marker %q, archive key %q", deref(got.RestoreMarker), deref(got.ArchiveKey))
	}
	// The second start is a new run: the first run's token opens nothing.
	if run := h.backend.runOf(w.ID); got.RunID == first.RunID || run != got.RunID {
		t.Fatalf("second start: stored run %q (first %q), started run %q", got.RunID, first.RunID, run)
	}

	// A converged pass costs one observation and writes nothing.
	calls := h.backend.actuatorCalls()
	stats, err := c.Tick(context.Background(), h.epoch)
	if err != nil || stats.Writes != 0 || stats.Steps != 0 || h.backend.actuatorCalls() != calls {
		t.Fatalf("converged pass: %+v, %v, %d actuator calls", stats, err, h.backend.actuatorCalls()-calls)
	}

	if err := h.svc.Delete(context.Background(), w.ID); err != nil {
		t.Fatal(err)
	}
	h.converge(c)
	h.expect(w.ID, workspace.PhaseDeleted)
}

func TestCreateArchivedMakesEmptyArchive(t *testing.T) {
	h := newHarness(t)
	c := h.controller()
	w := h.create("dev")
	h.setDesired(w.ID, workspace.DesiredArchived)
	h.converge(c)
	got := h.expect(w.ID, workspace.PhaseArchived)
	if keys := h.backend.store.keys(w.ID); len(keys) != 1 || keys[0] != deref(got.ArchiveKey) {
		t.Fatalf("archives %v, archive key %s", keys, deref(got.ArchiveKey))
	}
	h.setDesired(w.ID, workspace.DesiredStandby)
	h.converge(c)
	h.expect(w.ID, workspace.PhaseStandby, "volume")
}

// scenario drives one workspace from a converged start to a target.
type scenario struct {
	name      string
	setup     func(h *harness, c *WorkspaceController, id string)
	change    func(h *harness, id string)
	phase     workspace.Phase
	resources []string
	archives  int
}

func scenarios() []scenario {
	toStandby := func(h *harness, c *WorkspaceController, id string) {
		h.converge(c)
		h.backend.writeHome(id, "data")
		h.setDesired(id, workspace.DesiredStandby)
		h.converge(c)
	}
	toArchived := func(h *harness, c *WorkspaceController, id string) {
		toStandby(h, c, id)
		h.setDesired(id, workspace.DesiredArchived)
		h.converge(c)
	}
	desire := func(d workspace.DesiredState) func(h *harness, id string) {
		return func(h *harness, id string) { h.setDesired(id, d) }
	}
	del := func(h *harness, id string) {
		if err := h.svc.Delete(context.Background(), id); err != nil {
			h.t.Fatal(err)
		}
	}
	return []scenario{
		{name: "create", setup: func(*harness, *WorkspaceController, string) {}, change: func(*harness, string) {},
			phase: workspace.PhaseRunning, resources: []string{"volume", "container"}},
		{name: "create archived", setup: func(*harness, *WorkspaceController, string) {}, change: desire(workspace.DesiredArchived),
			phase: workspace.PhaseArchived, archives: 1},
		{name: "stop", setup: func(h *harness, c *WorkspaceController, id string) { h.converge(c) },
			change: desire(workspace.DesiredStandby), phase: workspace.PhaseStandby, resources: []string{"volume"}},
		{name: "archive", setup: toStandby, change: desire(workspace.DesiredArchived),
			phase: workspace.PhaseArchived, archives: 1},
		{name: "restore and start", setup: toArchived, change: desire(workspace.DesiredRunning),
			phase: workspace.PhaseRunning, resources: []string{"volume", "container"}, archives: 1},
		{name: "delete running", setup: func(h *harness, c *WorkspaceController, id string) { h.converge(c) },
			change: del, phase: workspace.PhaseDeleted},
		{name: "delete archived", setup: toArchived, change: del, phase: workspace.PhaseDeleted, archives: 1},
	}
}

// TestCrashSafety stops the controller right before and right after each
// actuator call of each operation, then lets a fresh controller on the same
// database and backend finish: it must converge with no orphan resource,
// no duplicate archive, and no volume deleted before its archive committed
// (checked on every deletion by the harness).
func TestCrashSafety(t *testing.T) {
	for _, sc := range scenarios() {
		for _, after := range []bool{false, true} {
			for k := 1; ; k++ {
				name := fmt.Sprintf("%s/crash-before-call-%d", sc.name, k)
				if after {
					name = fmt.Sprintf("%s/crash-after-call-%d", sc.name, k)
				}
				crashed := false
				t.Run(name, func(t *testing.T) { crashed = crashRun(t, sc, k, after) })
				if !crashed || t.Failed() {
					break
				}
			}
		}
	}
}

// crashRun returns whether the k-th actuator call happened (and so the
// controller was stopped there); the run without a crash is checked too.
func crashRun(t *testing.T, sc scenario, k int, after bool) bool {
	h := newHarness(t)
	w := h.create("dev")
	sc.setup(h, h.controller(), w.ID)
	sc.change(h, w.ID)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	calls, crashed := 0, false
	h.backend.afterActuator = func(string) {
		calls++
		if calls == k && after {
			crashed = true
			cancel()
		}
	}
	h.backend.store.afterWrite = h.backend.afterActuator
	if !after {
		h.backend.crashBefore = func() bool {
			if calls+1 == k {
				crashed = true
				cancel()
				return true
			}
			return false
		}
		h.backend.store.crashBefore = h.backend.crashBefore
	}
	first := h.controller()
	for range 60 {
		if _, err := first.Tick(ctx, h.epoch); err != nil {
			break
		}
		h.advance(2 * time.Second)
	}
	h.backend.afterActuator, h.backend.crashBefore = nil, nil
	h.backend.store.afterWrite, h.backend.store.crashBefore = nil, nil
	// Without a crash (k past the last call) the same checks hold for the
	// uninterrupted run.
	h.converge(h.controller())
	h.expect(w.ID, sc.phase, sc.resources...)
	keys := h.backend.store.keys(w.ID)
	if len(keys) != sc.archives {
		t.Fatalf("archives %v, want %d", keys, sc.archives)
	}
	for _, key := range keys {
		if n := h.backend.store.puts[key]; n != 1 {
			t.Fatalf("archive %s uploaded %d times", key, n)
		}
	}
	return crashed
}

func TestArchiveRetryReusesOpID(t *testing.T) {
	h := newHarness(t)
	c := h.controller()
	w := h.create("dev")
	h.converge(c)
	h.backend.writeHome(w.ID, "data")
	h.setDesired(w.ID, workspace.DesiredStandby)
	h.converge(c)
	h.setDesired(w.ID, workspace.DesiredArchived)
	h.backend.jobFail[JobArchive] = "S3_ACCESS_ERROR"
	h.tick(c, 5)
	failedRow := h.row(w.ID)
	if deref(failedRow.ErrorReason) != workspace.ReasonUnreachable || failedRow.ErrorCount != 1 || failedRow.Operation != workspace.OpNone {
		t.Fatalf("after a failed archive job: reason %s count %d op %s", deref(failedRow.ErrorReason), failedRow.ErrorCount, failedRow.Operation)
	}
	h.advance(time.Minute) // past the backoff
	h.converge(c)
	got := h.expect(w.ID, workspace.PhaseArchived)
	if deref(got.OpID) != deref(failedRow.OpID) || got.ErrorCount != 0 {
		t.Fatalf("retry used op id %s, first attempt %s; error count %d", deref(got.OpID), deref(failedRow.OpID), got.ErrorCount)
	}
	if h.backend.count("SubmitArchive") != 2 {
		t.Fatalf("%d archive submissions, want 2", h.backend.count("SubmitArchive"))
	}
}

func TestFailedRestoreVolumeGoesWhenKeptArchived(t *testing.T) {
	h := newHarness(t)
	h.checkVolumeDeletions()
	c := h.controller()
	w := h.create("dev")
	h.converge(c)
	h.backend.writeHome(w.ID, "data")
	h.setDesired(w.ID, workspace.DesiredArchived)
	h.converge(c)
	archived := h.expect(w.ID, workspace.PhaseArchived)

	// Opening it again fails in the restore job (S3 unreachable), and
	// the user decides to leave it archived.
	h.setDesired(w.ID, workspace.DesiredRunning)
	h.backend.jobFail[JobRestore] = "S3_ACCESS_ERROR"
	h.tick(c, 6)
	if row := h.row(w.ID); row.Operation != workspace.OpNone || row.ErrorCount != 1 {
		t.Fatalf("after the failed restore: op %s errors %d", row.Operation, row.ErrorCount)
	}
	if _, ok := h.backend.home(w.ID); !ok {
		t.Fatal("the failed restore left no volume; the test does not reach its case")
	}
	h.setDesired(w.ID, workspace.DesiredArchived)
	h.advance(time.Minute) // past the backoff
	h.converge(c)
	// The failed attempt stays on record until an operation succeeds.
	got := h.row(w.ID)
	if got.Phase != workspace.PhaseArchived || got.Operation != workspace.OpNone {
		t.Fatalf("phase %s op %s, want ARCHIVED with no operation", got.Phase, got.Operation)
	}
	if _, ok := h.backend.home(w.ID); ok {
		t.Error("the half-restored volume is still there")
	}
	if deref(got.ArchiveKey) != deref(archived.ArchiveKey) {
		t.Errorf("archive key changed from %s to %s", deref(archived.ArchiveKey), deref(got.ArchiveKey))
	}
	if data, ok := h.backend.store.data(deref(got.ArchiveKey)); !ok || data != "data" {
		t.Errorf("archive holds %q (exists %v)", data, ok)
	}
}

func TestRetriesExhaustedThenRecover(t *testing.T) {
	h := newHarness(t)
	c := h.controller()
	w := h.create("dev")
	for range workspace.MaxErrorCount {
		h.backend.fail["ProvisionVolume"] = errors.New("nomad unavailable")
		h.tick(c, 1)
		h.advance(10 * time.Minute)
	}
	got := h.row(w.ID)
	if got.Phase != workspace.PhaseError || got.ErrorCount != workspace.MaxErrorCount || deref(got.ErrorReason) != workspace.ReasonBackendError {
		t.Fatalf("phase %s count %d reason %s", got.Phase, got.ErrorCount, deref(got.ErrorReason))
	}
	// ERROR stays put: a pass changes nothing.
	if stats, err := c.Tick(context.Background(), h.epoch); err != nil || stats.Writes != 0 || stats.Steps != 0 {
		t.Fatalf("pass over ERROR: %+v %v", stats, err)
	}
	if _, err := h.svc.Recover(context.Background(), w.ID); err != nil {
		t.Fatal(err)
	}
	h.converge(c)
	h.expect(w.ID, workspace.PhaseRunning, "volume", "container")
}

func TestContainerWithoutVolumeThenDelete(t *testing.T) {
	h := newHarness(t)
	c := h.controller()
	w := h.create("dev")
	h.converge(c)
	h.backend.mu.Lock()
	delete(h.backend.volumes, w.ID)
	h.backend.mu.Unlock()
	h.tick(c, 1)
	got := h.row(w.ID)
	if got.Phase != workspace.PhaseError || deref(got.ErrorReason) != workspace.ReasonContainerWithoutVolume {
		t.Fatalf("phase %s reason %s", got.Phase, deref(got.ErrorReason))
	}
	if _, err := h.svc.SetDesired(context.Background(), w.ID, workspace.DesiredStandby, workspace.CauseUser); !errors.Is(err, workspace.ErrInvalidState) {
		t.Fatalf("set desired in ERROR: %v", err)
	}
	if err := h.svc.Delete(context.Background(), w.ID); err != nil {
		t.Fatal(err)
	}
	h.converge(c)
	h.expect(w.ID, workspace.PhaseDeleted)
}

func TestOperationTimeout(t *testing.T) {
	h := newHarness(t)
	c := h.controller()
	w := h.archiveTimesOut(c)
	got := h.row(w.ID)
	if got.Phase != workspace.PhaseError || deref(got.ErrorReason) != workspace.ReasonTimeout || got.Operation != workspace.OpNone {
		t.Fatalf("phase %s reason %s op %s", got.Phase, deref(got.ErrorReason), got.Operation)
	}
	if got.OpID == nil {
		t.Fatalf("op id dropped on ERROR; GC needs it")
	}
	if _, ok := h.backend.home(w.ID); !ok {
		t.Fatalf("volume deleted although the archive never finished")
	}
}

// TestLatePassSeesFinishedStart: while no controller ran (a failover
// longer than the STARTING timeout) the workspace came up. The first pass
// afterwards must record RUNNING, not a Timeout ERROR.
func TestLatePassSeesFinishedStart(t *testing.T) {
	h := newHarness(t)
	c := h.controller()
	w := h.create("dev")
	h.converge(c)
	h.setDesired(w.ID, workspace.DesiredStandby)
	h.converge(c)
	h.setDesired(w.ID, workspace.DesiredRunning)
	h.tick(c, 1)
	if got := h.row(w.ID); got.Operation != workspace.OpStarting {
		t.Fatalf("operation %s, want STARTING", got.Operation)
	}
	// The container comes up and passes its check with nobody watching.
	for range 2 {
		if _, err := h.backend.Observe(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	h.advance(DefaultConfig().Timeouts[workspace.OpStarting] + time.Minute)
	h.tick(h.controller(), 1)
	h.expect(w.ID, workspace.PhaseRunning, "volume", "container")
}

// eachHome runs test on a running workspace whose volume holds its home,
// in the two ways a home comes to be there: made there, or restored from
// the workspace's archive. Either way the volume is then the only copy of
// the home as it is.
func eachHome(t *testing.T, test func(t *testing.T, h *harness, c *WorkspaceController, id string)) {
	for _, restored := range []bool{false, true} {
		name := "never archived"
		if restored {
			name = "restored"
		}
		t.Run(name, func(t *testing.T) {
			h := newHarness(t)
			c := h.controller()
			w := h.create("dev")
			h.converge(c)
			h.backend.writeHome(w.ID, "v1")
			if restored {
				h.archiveThenRestore(c, w.ID)
			}
			h.expect(w.ID, workspace.PhaseRunning, "volume", "container")
			test(t, h, c, w.ID)
		})
	}
}

// TestNodeDownKeepsHome: a workspace's home has changed since its archive
// was made (if any). Its node goes down for longer than any operation's
// timeout (the volume exists but is unavailable, the container is lost).
// When the node is back, the home must be the one the user left, not the
// older archive, and the workspace no ERROR: waiting is not a failure.
// Before, a never-archived home claimed PROVISIONING and timed out.
func TestNodeDownKeepsHome(t *testing.T) {
	eachHome(t, func(t *testing.T, h *harness, c *WorkspaceController, id string) {
		h.backend.writeHome(id, "v2")
		h.backend.nodeDown(id, true)
		for range 5 {
			h.tick(c, 1)
			h.advance(time.Minute)
		}
		if got := h.row(id); got.Operation != workspace.OpNone || got.ErrorReason != nil {
			t.Fatalf("while the node is away: op %s error %s (%s)", got.Operation, deref(got.ErrorReason), deref(got.ErrorMessage))
		}
		h.backend.nodeDown(id, false)
		h.converge(c)
		if home, _ := h.backend.home(id); home != "v2" {
			t.Fatalf("home after the node came back = %q, want the user's %q", home, "v2")
		}
		h.expect(id, workspace.PhaseRunning, "volume", "container")
	})
}

// TestNodeLostIsDataLoss: the node never comes back and its volume is
// removed. The newer home is gone: that is DataLost for an operator to
// judge, not a silent restore of the older archive or a new empty volume.
// Before, a never-archived home got the new empty volume.
func TestNodeLostIsDataLoss(t *testing.T) {
	eachHome(t, func(t *testing.T, h *harness, c *WorkspaceController, id string) {
		restores, volumes := h.backend.count("SubmitRestore"), h.backend.count("ProvisionVolume")
		h.backend.nodeDown(id, true)
		h.tick(c, 2)
		h.backend.loseNode(id)
		h.tick(c, 2)
		got := h.row(id)
		if got.Phase != workspace.PhaseError || deref(got.ErrorReason) != workspace.ReasonDataLost {
			t.Fatalf("phase %s op %s reason %s", got.Phase, got.Operation, deref(got.ErrorReason))
		}
		if n := h.backend.count("SubmitRestore") - restores; n != 0 {
			t.Errorf("%d restores submitted after the node was lost", n)
		}
		if n := h.backend.count("ProvisionVolume") - volumes; n != 0 {
			t.Errorf("%d volumes provisioned after the node was lost", n)
		}
	})
}

// TestCommittedArchiveOutlastsDeadline: the archive is uploaded, verified
// and committed, but the volume stays in use past the ARCHIVING timeout.
// The home is safe in the archive: that is no ERROR for an admin to clear;
// the volume goes once it is free.
func TestCommittedArchiveOutlastsDeadline(t *testing.T) {
	h := newHarness(t)
	c := h.controller()
	w := h.create("dev")
	h.converge(c)
	h.backend.writeHome(w.ID, "data")
	h.setDesired(w.ID, workspace.DesiredStandby)
	h.converge(c)
	h.setDesired(w.ID, workspace.DesiredArchived)
	inUse := func() {
		h.backend.mu.Lock()
		h.backend.fail["DeleteVolume"] = ErrVolumeInUse
		h.backend.mu.Unlock()
	}
	for range 10 {
		inUse()
		h.tick(c, 1)
		if h.row(w.ID).ArchiveKey != nil {
			break
		}
	}
	if got := h.row(w.ID); got.ArchiveKey == nil || got.Operation != workspace.OpArchiving {
		t.Fatalf("archive key %s op %s: the test does not reach its case", deref(got.ArchiveKey), got.Operation)
	}
	h.advance(DefaultConfig().Timeouts[workspace.OpArchiving] + time.Minute)
	inUse()
	h.tick(c, 1)
	if got := h.row(w.ID); got.Phase == workspace.PhaseError || got.ErrorReason != nil {
		t.Fatalf("phase %s reason %s after the deadline with the archive committed", got.Phase, deref(got.ErrorReason))
	}
	h.converge(c)
	got := h.expect(w.ID, workspace.PhaseArchived)
	if data, _ := h.backend.store.data(deref(got.ArchiveKey)); data != "data" {
		t.Fatalf("archive holds %q", data)
	}
}

func TestDeposedControllerCannotWrite(t *testing.T) {
	h := newHarness(t)
	c := h.controller()
	w := h.create("dev")
	if _, err := store.BumpEpoch(context.Background(), h.pool, "newer"); err != nil {
		t.Fatal(err)
	}
	_, err := c.Tick(context.Background(), h.epoch)
	if !errors.Is(err, ErrDeposed) {
		t.Fatalf("tick with an old epoch: %v", err)
	}
	got := h.row(w.ID)
	if got.Version != w.Version || got.Operation != workspace.OpNone {
		t.Fatalf("deposed controller wrote: version %d -> %d, op %s", w.Version, got.Version, got.Operation)
	}
	if h.backend.actuatorCalls() != 0 {
		t.Fatalf("deposed controller called the backend %d times", h.backend.actuatorCalls())
	}
}

func TestClaimLosesToConcurrentDesiredChange(t *testing.T) {
	h := newHarness(t)
	c := h.controller()
	w := h.create("dev")
	h.converge(c)
	// The controller reads the row and plans STOPPING; meanwhile the API
	// asks for RUNNING again. The claim must lose, nothing may be stopped,
	// and the next pass must follow the new desired state.
	h.setDesired(w.ID, workspace.DesiredStandby)
	stale := h.row(w.ID)
	snap, err := h.backend.Observe(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	a := Plan(stale, snap.Workspaces[w.ID], ArchiveCheck{}, h.now(), DefaultConfig())
	if a.Next.Operation != workspace.OpStopping {
		t.Fatalf("planned %s, want STOPPING", a.Next.Operation)
	}
	h.setDesired(w.ID, workspace.DesiredRunning)
	var stats TickStats
	noFence := func(context.Context) error { return nil }
	if _, err := c.act(context.Background(), h.epoch, noFence, stale, a, nil, &stats); !errors.Is(err, errRowChanged) {
		t.Fatalf("claim on a changed row: %v", err)
	}
	if h.backend.count("StopWorkspace") != 0 {
		t.Fatalf("stopped after a lost claim")
	}
	h.converge(c)
	h.expect(w.ID, workspace.PhaseRunning, "volume", "container")
}

func collect(rows pgx.Rows) ([]workspace.Workspace, error) {
	return pgx.CollectRows(rows, pgx.RowToStructByName[workspace.Workspace])
}

func TestOrphans(t *testing.T) {
	known := &workspace.Workspace{ID: "01jb3x7k9q2m5n8p4r6s0t1v20"}
	snap := Snapshot{Workspaces: map[string]Observed{
		known.ID:                     {VolumeExists: true},
		"01jb3x7k9q2m5n8p4r6s0t1v22": {ContainerLive: true},
		"01jb3x7k9q2m5n8p4r6s0t1v21": {Archive: &JobResult{Status: JobSucceeded}},
		"01jb3x7k9q2m5n8p4r6s0t1v23": {},
	}}
	got := Orphans(snap, func(id string) bool { return id == known.ID })
	want := []string{"01jb3x7k9q2m5n8p4r6s0t1v21", "01jb3x7k9q2m5n8p4r6s0t1v22"}
	if !slices.Equal(got, want) {
		t.Errorf("Orphans = %v, want %v", got, want)
	}
}

func TestOrphanedVolumeIsReportedNotRemoved(t *testing.T) {
	h := newHarness(t)
	m, _ := newTestMetrics(t)
	c := h.controllerWithMetrics(m)
	w := h.create("dev")
	h.converge(c)
	// A volume the database knows nothing of, as after restoring an older
	// backup of the database.
	const stranger = "01jb3x7k9q2m5n8p4r6s0t1v2z"
	h.backend.mu.Lock()
	h.backend.volumes[stranger] = &fakeVolume{ready: true, data: "someone's home"}
	h.backend.mu.Unlock()

	// The full passes, once FullPassInterval has passed, judge orphans.
	full := DefaultConfig().FullPassInterval
	h.advance(full)
	h.tick(c, 1)
	if got := testutil.ToFloat64(m.orphans); got != 0 {
		t.Fatalf("orphan counted before its grace: %v", got)
	}
	h.advance(max(full, 2*orphanGrace))
	h.tick(c, 1)
	if got := testutil.ToFloat64(m.orphans); got != 1 {
		t.Fatalf("orphaned workspaces = %v, want 1", got)
	}
	if data, ok := h.backend.home(stranger); !ok || data != "someone's home" {
		t.Fatalf("orphaned volume touched: %q, exists %v", data, ok)
	}
	h.expect(w.ID, workspace.PhaseRunning, "volume", "container")

	h.backend.mu.Lock()
	delete(h.backend.volumes, stranger)
	h.backend.mu.Unlock()
	h.advance(full)
	h.tick(c, 1)
	if got := testutil.ToFloat64(m.orphans); got != 0 {
		t.Errorf("orphaned workspaces after removal = %v", got)
	}
}

// A failed submission tells the coordinator when to come back: the pass
// that records it, and every pass that waits out the backoff, report the
// row's next_attempt_at.
func TestFailedStepReportsNextAttempt(t *testing.T) {
	h := newHarness(t)
	c := h.controller()
	w := h.create("dev")
	h.backend.fail["ProvisionVolume"] = errors.New("nomad unavailable")
	stats, err := c.Tick(context.Background(), h.epoch)
	if err != nil {
		t.Fatal(err)
	}
	row := h.row(w.ID)
	// PostgreSQL keeps microseconds.
	if row.NextAttemptAt == nil || !stats.NextAttempt.Truncate(time.Microsecond).Equal(*row.NextAttemptAt) {
		t.Fatalf("pass reported next attempt %v, row holds %v", stats.NextAttempt, row.NextAttemptAt)
	}
	waiting, err := c.Tick(context.Background(), h.epoch)
	if err != nil {
		t.Fatal(err)
	}
	if waiting.Active() || !waiting.NextAttempt.Equal(*row.NextAttemptAt) {
		t.Fatalf("waiting pass: %+v, want inactive with next attempt %v", waiting, row.NextAttemptAt)
	}
	h.advance(c.cfg.BackoffMax)
	h.converge(c)
	if done, err := c.Tick(context.Background(), h.epoch); err != nil || !done.NextAttempt.IsZero() {
		t.Fatalf("converged pass still reports a retry: %+v %v", done, err)
	}
}

// Deleting a workspace while its archive job still runs (here, an
// ARCHIVING that ran out of time, whose job Nomad did not stop when asked
// at the timeout): the job is stopped (a purge is refused while it runs),
// then forgotten, then the volume goes. Before, DELETING retried the
// refused purge until it timed out into ERROR.
func TestDeleteWhileArchiveJobRuns(t *testing.T) {
	h := newHarness(t)
	c := h.controller()
	h.backend.fail["StopJob"] = errors.New("nomad did not answer")
	w := h.archiveTimesOut(c)
	if got := h.row(w.ID); got.Operation != workspace.OpNone || h.backend.archives[w.ID] == nil || !running(h.backend.archives[w.ID]) {
		t.Fatalf("setup: operation %s, archive job %+v", got.Operation, h.backend.archives[w.ID])
	}
	if err := h.svc.Delete(context.Background(), w.ID); err != nil {
		t.Fatal(err)
	}
	h.converge(c)
	got := h.row(w.ID)
	if got.Phase != workspace.PhaseDeleted {
		t.Fatalf("phase %s (%s), want DELETED", got.Phase, deref(got.ErrorMessage))
	}
	if h.backend.calls["StopJob"] == 0 {
		t.Error("the running archive job was never stopped")
	}
}

// failedRestoreLeftVolume brings a workspace to the state where the next
// pass deletes a volume without writing first: a restore failed, the user
// chose ARCHIVED again, and the half-restored volume goes.
func (h *harness) failedRestoreLeftVolume(c *WorkspaceController) workspace.Workspace {
	h.t.Helper()
	w := h.create("dev")
	h.converge(c)
	h.setDesired(w.ID, workspace.DesiredArchived)
	h.converge(c)
	h.setDesired(w.ID, workspace.DesiredRunning)
	h.backend.jobFail[JobRestore] = "S3_ACCESS_ERROR"
	h.tick(c, 6)
	h.setDesired(w.ID, workspace.DesiredArchived)
	h.advance(time.Minute) // past the backoff
	if _, ok := h.backend.home(w.ID); !ok {
		h.t.Fatal("the failed restore left no volume; the test does not reach its case")
	}
	return w
}

// Backend calls are not fenced by the database. A leader that observed,
// then paused while another took over, must not act on what it saw: here
// the pass would delete a volume without any write in front of it.
func TestBackendCallsFencedByEpoch(t *testing.T) {
	h := newHarness(t)
	c := h.controller()
	w := h.failedRestoreLeftVolume(c)
	h.backend.observed = func() {
		if _, err := store.BumpEpoch(context.Background(), h.pool, "newer-leader"); err != nil {
			t.Error(err)
		}
	}
	before := h.backend.actuatorCalls()
	if _, err := c.Tick(context.Background(), h.epoch); !errors.Is(err, ErrDeposed) {
		t.Fatalf("pass after a newer leader took over: %v, want ErrDeposed", err)
	}
	if n := h.backend.actuatorCalls() - before; n != 0 {
		t.Errorf("a deposed leader made %d backend calls", n)
	}
	if _, ok := h.backend.home(w.ID); !ok {
		t.Error("a deposed leader deleted the volume")
	}
}

// A pass whose observation grew old before it acted (a long pause) stops
// without calling the backend and asks for a new pass at once.
func TestStaleObservationIsNotActedOn(t *testing.T) {
	h := newHarness(t)
	m, _ := newTestMetrics(t)
	c := h.controllerWithMetrics(m)
	w := h.failedRestoreLeftVolume(c)
	h.pauseAfterObservation(c, time.Minute)
	before := h.backend.actuatorCalls()
	stats, err := c.Tick(context.Background(), h.epoch)
	if err != nil || !stats.Stale {
		t.Fatalf("pass on an old observation: %+v, %v; want Stale", stats, err)
	}
	if n := h.backend.actuatorCalls() - before; n != 0 {
		t.Errorf("%d backend calls on an old observation", n)
	}
	if got := testutil.ToFloat64(m.stale); got != 1 {
		t.Errorf("stale passes counted: %v, want 1", got)
	}
	h.backend.observed = nil
	c.SetClock(h.now)
	h.converge(c)
	if _, ok := h.backend.home(w.ID); ok {
		t.Error("a fresh pass did not delete the half-restored volume")
	}
}

// pauseAfterObservation makes c's clock jump by d once the next pass has
// read when its observation was complete: a leader paused between
// observing and acting.
func (h *harness) pauseAfterObservation(c *WorkspaceController, d time.Duration) {
	var armed atomic.Bool
	h.backend.observed = func() { armed.Store(true) }
	c.SetClock(func() time.Time {
		now := h.now()
		if armed.CompareAndSwap(true, false) {
			h.advance(d)
		}
		return now
	})
}

// The time an observation takes (a backend under load) is not held
// against its pass: each pass acts on what it saw, and the work gets done.
func TestSlowObservationIsActedOn(t *testing.T) {
	h := newHarness(t)
	m, _ := newTestMetrics(t)
	c := h.controllerWithMetrics(m)
	w := h.failedRestoreLeftVolume(c)
	h.backend.observed = func() { h.advance(time.Minute) }
	before := h.backend.actuatorCalls()
	stats, err := c.Tick(context.Background(), h.epoch)
	if err != nil || stats.Stale {
		t.Fatalf("pass after an observation that took a minute: %+v, %v; want it to act", stats, err)
	}
	if h.backend.actuatorCalls() == before {
		t.Error("no backend call after an observation that took a minute")
	}
	h.converge(c)
	if _, ok := h.backend.home(w.ID); ok {
		t.Error("passes after slow observations did not delete the half-restored volume")
	}
	if got := testutil.ToFloat64(m.stale); got != 0 {
		t.Errorf("stale passes counted: %v, want 0", got)
	}
}

// A volume is deleted by the id the pass observed, never by name: when a
// volume of the same name replaced it after the observation (another
// leader's restore), the delete leaves the new one alone.
func TestDeleteVolumeByObservedID(t *testing.T) {
	h := newHarness(t)
	c := h.controller()
	w := h.failedRestoreLeftVolume(c)
	h.backend.observed = func() {
		h.backend.volumes[w.ID] = &fakeVolume{id: "vol-replacement", ready: true, data: "restored by a newer leader"}
	}
	h.tick(c, 1)
	h.backend.observed = nil
	if v := h.backend.volumes[w.ID]; v == nil || v.id != "vol-replacement" {
		t.Fatalf("volume after the pass: %+v, want the replacement untouched", v)
	}
}

// Between full passes a pass plans only the workspaces whose row or
// observation changed, that have an operation in flight, or whose time
// came; a full pass plans every one, once FullPassInterval has passed.
func TestPassPlansWhatChanged(t *testing.T) {
	h := newHarness(t)
	c := h.controller()
	var ids []string
	for i := range 5 {
		ids = append(ids, h.create(fmt.Sprint("dev", i)).ID)
	}
	h.converge(c)
	pass := func(what string, planned int) TickStats {
		t.Helper()
		stats, err := c.Tick(context.Background(), h.epoch)
		if err != nil {
			t.Fatal(err)
		}
		if stats.Full || stats.Planned != planned || stats.Workspaces != len(ids) {
			t.Fatalf("%s: full %v, planned %d of %d; want %d planned, not full", what, stats.Full, stats.Planned, stats.Workspaces, planned)
		}
		return stats
	}
	pass("converged", 0)

	h.setDesired(ids[0], workspace.DesiredStandby)
	if stats := pass("row changed", 1); stats.Steps != 1 {
		t.Fatalf("the changed row's stop ran %d steps", stats.Steps)
	}
	h.converge(c)
	h.expect(ids[0], workspace.PhaseStandby, "volume")

	h.backend.nodeDown(ids[1], true)
	if stats := pass("observation changed", 1); stats.Writes != 1 {
		t.Fatalf("the node going down wrote %d rows, want its conditions", stats.Writes)
	}
	if got := h.row(ids[1]).Conditions[workspace.CondVolumeReady]; got.Status != workspace.ConditionFalse {
		t.Fatalf("volume condition %+v after its node went down", got)
	}
	h.backend.nodeDown(ids[1], false)
	h.converge(c)

	// A failed start waits out its backoff without being planned, and the
	// pass still reports when it comes.
	h.backend.fail["StartWorkspace"] = errors.New("nomad unavailable")
	h.setDesired(ids[0], workspace.DesiredRunning)
	pass("start fails", 1)
	pass("failure recorded", 1)
	retry := h.row(ids[0]).NextAttemptAt
	if retry == nil {
		t.Fatal("no next attempt recorded")
	}
	if stats := pass("waiting", 0); !stats.NextAttempt.Equal(*retry) {
		t.Fatalf("next attempt %v, want %v", stats.NextAttempt, *retry)
	}
	delete(h.backend.fail, "StartWorkspace")
	h.advance(retry.Sub(h.now()))
	if stats := pass("retry due", 1); stats.Steps != 1 {
		t.Fatalf("the retry ran %d steps", stats.Steps)
	}
	h.converge(c)
	h.expect(ids[0], workspace.PhaseRunning, "volume", "container")
	pass("converged again", 0)

	h.advance(DefaultConfig().FullPassInterval)
	stats, err := c.Tick(context.Background(), h.epoch)
	if err != nil {
		t.Fatal(err)
	}
	if !stats.Full || stats.Planned != len(ids) || stats.Writes != 0 || stats.Steps != 0 {
		t.Fatalf("full pass: full %v, planned %d, wrote %d, ran %d steps", stats.Full, stats.Planned, stats.Writes, stats.Steps)
	}
	// A new leadership term begins with a full pass (one with nothing to
	// do never checks the epoch).
	if stats, err := c.Tick(context.Background(), h.epoch+1); err != nil || !stats.Full {
		t.Fatalf("pass of a new term: full %v, error %v", stats.Full, err)
	}
}
