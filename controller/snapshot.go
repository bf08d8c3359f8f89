package controller

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/codehub-io/codehub/archive"
	"github.com/codehub-io/codehub/store"
	"github.com/codehub-io/codehub/workspace"
)

// Snapshots bound what losing a node costs a running home. Every stop
// archives the home, but a home that runs all day would otherwise risk the
// whole day: so while it runs, its agent reads it every snapshot interval
// and the server writes what changed to S3 as an incremental archive on the
// last one (archive.WriteSnapshot, archive.Store.StoreSnapshot). A
// snapshot is no operation: it never holds up a stop or a start, and it
// commits only if the run it read is still running with nothing claimed
// and the same archive under it (store.CommitSnapshot). What it then
// commits is what every rule already reads: the archive and the restore
// marker, with the run still marked as changed since.

// Snapshot results of codehub_snapshots_total.
const (
	snapshotStored     = "stored"
	snapshotUnchanged  = "unchanged"
	snapshotFailed     = "failed"
	snapshotSuperseded = "superseded"
)

// SnapshotConfig configures the snapshot runner.
type SnapshotConfig struct {
	// Interval is the recovery point a running home is held to: it is
	// snapshotted once what S3 holds of it is this old. 0 turns snapshots
	// off.
	Interval time.Duration
	// Timeout bounds one snapshot, from the request to the commit.
	Timeout time.Duration
	// Parallel is how many snapshots run at once (0: snapshotParallel).
	Parallel int
	// Epoch is the leader's current epoch; commits are fenced by it.
	Epoch func() int64
	// Metrics counts snapshots (nil: none).
	Metrics *Metrics
}

// SnapshotWorkspaces is what the runner needs of the workspace service.
type SnapshotWorkspaces interface {
	ProgramsRunning(ctx context.Context) ([]workspace.Workspace, error)
	CommitSnapshot(ctx context.Context, w workspace.Workspace, key *string, at time.Time, epoch int64) error
}

// SnapshotStore writes snapshots to S3.
type SnapshotStore interface {
	SnapshotRequestFor(ctx context.Context, key, parent string) archive.SnapshotRequest
	StoreSnapshot(ctx context.Context, req archive.SnapshotRequest, r io.Reader) (archive.SnapshotResult, error)
}

// SnapshotSource asks the agent of run runID of a workspace for a snapshot
// of its home and returns the stream of frames.
type SnapshotSource func(ctx context.Context, wsID, runID string, req archive.SnapshotRequest) (io.ReadCloser, error)

// SnapshotRunner snapshots running homes whose recovery point is due.
type SnapshotRunner struct {
	logger hclog.Logger
	svc    SnapshotWorkspaces
	store  SnapshotStore
	source SnapshotSource
	cfg    SnapshotConfig
	now    func() time.Time

	// slots bounds the snapshots running at once; wg waits for them.
	slots chan struct{}
	wg    sync.WaitGroup

	mu sync.Mutex
	// notBefore is when a run may be snapshotted again after a failure
	// (keyed by workspace id and run id); inFlight, the runs being read.
	notBefore map[string]time.Time
	inFlight  map[string]bool
}

// snapshotParallel is how many snapshots run at once by default: each
// reads a home on its node and passes its changes through the server.
const snapshotParallel = 2

// snapshotRetry is how long a run whose snapshot failed waits before the
// next attempt (at most the interval).
const snapshotRetry = time.Minute

// ErrSnapshotUnsupported marks a run that cannot be snapshotted at all (it
// runs without the workspace agent): it is not asked again.
var ErrSnapshotUnsupported = errors.New("the run cannot be snapshotted")

// NewSnapshotRunner returns a snapshot runner.
func NewSnapshotRunner(logger hclog.Logger, svc SnapshotWorkspaces, st SnapshotStore, source SnapshotSource, cfg SnapshotConfig) *SnapshotRunner {
	if cfg.Parallel < 1 {
		cfg.Parallel = snapshotParallel
	}
	return &SnapshotRunner{logger: logger, svc: svc, store: st, source: source, cfg: cfg, now: time.Now,
		slots: make(chan struct{}, cfg.Parallel), notBefore: map[string]time.Time{}, inFlight: map[string]bool{}}
}

// Run looks for due snapshots a few times per interval until ctx ends,
// then waits for those it started.
func (r *SnapshotRunner) Run(ctx context.Context) error {
	defer r.wg.Wait()
	if r.cfg.Interval <= 0 {
		<-ctx.Done()
		return nil
	}
	ticker := time.NewTicker(snapshotTick(r.cfg.Interval))
	defer ticker.Stop()
	for {
		if err := r.RunOnce(ctx); err != nil && ctx.Err() == nil {
			r.logger.Warn("snapshot pass failed", "error", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-ticker.C:
		}
	}
}

// snapshotTick is how often the runner looks: a tenth of the interval,
// between a second and half a minute, so a snapshot is at most that late.
func snapshotTick(interval time.Duration) time.Duration {
	return min(max(interval/10, time.Second), 30*time.Second)
}

// RunOnce starts the snapshots that are due, as many as free slots allow,
// and returns without waiting for them: one slow home holds up only its
// own slot. Wait waits for them.
func (r *SnapshotRunner) RunOnce(ctx context.Context) error {
	ws, err := r.svc.ProgramsRunning(ctx)
	if err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.forgetGone(ws)
	for _, w := range SnapshotsDue(ws, r.now(), r.cfg.Interval, r.notBefore, r.inFlight) {
		select {
		case r.slots <- struct{}{}:
		default:
			return nil
		}
		r.inFlight[runKey(w)] = true
		r.wg.Go(func() {
			defer func() {
				r.mu.Lock()
				delete(r.inFlight, runKey(w))
				r.mu.Unlock()
				<-r.slots
			}()
			r.snapshot(ctx, w)
		})
	}
	return nil
}

// Wait waits for the snapshots RunOnce started.
func (r *SnapshotRunner) Wait() { r.wg.Wait() }

// forgetGone drops the failures of runs no longer running; r.mu is held.
func (r *SnapshotRunner) forgetGone(ws []workspace.Workspace) {
	live := make(map[string]bool, len(ws))
	for _, w := range ws {
		live[runKey(w)] = true
	}
	for k := range r.notBefore {
		if !live[k] {
			delete(r.notBefore, k)
		}
	}
}

func runKey(w workspace.Workspace) string { return w.ID + "/" + w.RunID }

// SnapshotsDue picks the workspaces to snapshot at now: running with no
// operation, their volume going on from their archive (or never
// archived), what S3 holds of their home at least interval old, not
// being read already, and not held back after a failure (notBefore).
func SnapshotsDue(ws []workspace.Workspace, now time.Time, interval time.Duration, notBefore map[string]time.Time, inFlight map[string]bool) []workspace.Workspace {
	var due []workspace.Workspace
	for _, w := range ws {
		if w.Phase != workspace.PhaseRunning || w.Operation != workspace.OpNone || w.RunID == "" {
			continue
		}
		if w.ArchiveKey != nil && (w.RestoreMarker == nil || *w.RestoreMarker != *w.ArchiveKey) {
			continue
		}
		if inFlight[runKey(w)] || now.Before(notBefore[runKey(w)]) {
			continue
		}
		if now.Sub(recoveryPointOf(w)) >= interval {
			due = append(due, w)
		}
	}
	return due
}

// recoveryPointOf is the time up to which S3 holds the home of running w:
// its archive's, or for a home never archived, when it began to run.
func recoveryPointOf(w workspace.Workspace) time.Time {
	if rp := workspace.RecoveryOf(w); rp.ArchivedAt != nil {
		return *rp.ArchivedAt
	}
	return w.PhaseChangedAt
}

// snapshot snapshots the home of w and commits it.
func (r *SnapshotRunner) snapshot(ctx context.Context, w workspace.Workspace) {
	log := r.logger.With("workspace_id", w.ID, "run_id", w.RunID)
	if r.cfg.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, r.cfg.Timeout)
		defer cancel()
	}
	began := r.now()
	parent := ownArchive(w)
	key := archive.Key(w.ID, workspace.NewID())
	res, err := r.take(ctx, w, key, parent)
	switch {
	case err == nil:
	case errors.Is(err, ErrSnapshotUnsupported):
		r.hold(w, farFuture)
		log.Info("this run is not snapshotted", "reason", err)
		return
	case errors.Is(err, context.Canceled) && ctx.Err() != nil:
		return
	default:
		r.hold(w, r.now().Add(min(snapshotRetry, r.cfg.Interval)))
		r.cfg.Metrics.snapshot(snapshotFailed, 0)
		log.Warn("snapshot failed", "error", err)
		return
	}
	var committed *string
	result := snapshotUnchanged
	if !res.Unchanged {
		committed, result = &key, snapshotStored
	}
	// The home is held as of when the agent began to read it.
	err = r.svc.CommitSnapshot(ctx, w, committed, began, r.cfg.Epoch())
	switch {
	case errors.Is(err, store.ErrConflict):
		// The run stopped, an operation began or another archive came
		// first: the snapshot is nobody's, and the GC takes it.
		r.cfg.Metrics.snapshot(snapshotSuperseded, res.Meta.Size)
		log.Info("snapshot superseded, not committed", "key", key)
	case err != nil:
		r.cfg.Metrics.snapshot(snapshotFailed, res.Meta.Size)
		log.Warn("commit snapshot", "key", key, "error", err)
	default:
		r.cfg.Metrics.snapshot(result, res.Meta.Size)
		log.Info("snapshot committed", "key", key, "unchanged", res.Unchanged, "files", res.Files,
			"stored", res.Stored, "bytes", res.Meta.Size, "took", r.now().Sub(began).Round(time.Millisecond))
	}
}

// farFuture holds a run back for as long as it runs.
var farFuture = time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC)

// hold keeps the run of w from being snapshotted before until.
func (r *SnapshotRunner) hold(w workspace.Workspace, until time.Time) {
	r.mu.Lock()
	r.notBefore[runKey(w)] = until
	r.mu.Unlock()
}

// take asks the agent for the snapshot and writes it to S3.
func (r *SnapshotRunner) take(ctx context.Context, w workspace.Workspace, key, parent string) (archive.SnapshotResult, error) {
	req := r.store.SnapshotRequestFor(ctx, key, parent)
	stream, err := r.source(ctx, w.ID, w.RunID, req)
	if err != nil {
		return archive.SnapshotResult{}, fmt.Errorf("ask the agent: %w", err)
	}
	defer stream.Close()
	return r.store.StoreSnapshot(ctx, req, stream)
}
