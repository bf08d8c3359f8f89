// Package controller drives every workspace from what the backend observes
// toward its desired state: a pure planner, the WorkspaceController that
// observes, plans and acts in passes, the coordinator that elects one leader
// among replicas and runs the background loops on it, and the TTL and GC
// runners. It depends only on the small interfaces it declares (Backend,
// ArchiveStore), never on Nomad or S3 directly, and it never writes
// desired_state: that goes through the workspace service layer.
package controller

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/codehub-io/codehub/archive"
	"github.com/codehub-io/codehub/config"
	"github.com/codehub-io/codehub/store"
	"github.com/codehub-io/codehub/workspace"
)

// ArchiveStore is what the controller needs of the archive bucket:
// creating the empty archive of a new workspace, verifying a finished
// archive, and (GC) listing and deleting archives.
type ArchiveStore interface {
	CreateEmpty(ctx context.Context, key string) error
	// Stat returns the meta of the complete archive at key; a missing
	// archive is archive.ErrArchiveNotFound or archive.ErrMetaNotFound.
	Stat(ctx context.Context, key string) (archive.Meta, error)
	// List returns the archives of a workspace, complete and incomplete.
	List(ctx context.Context, workspaceID string) (archive.Listing, error)
	// Delete removes the archive at key and its meta.
	Delete(ctx context.Context, key string) error
	// Unfinished lists the unfinished multipart uploads of a workspace's
	// archives; AbortUpload discards one.
	Unfinished(ctx context.Context, workspaceID string) ([]archive.Upload, error)
	AbortUpload(ctx context.Context, u archive.Upload) error
}

// ErrDeposed means a newer leader exists: this controller must stop.
var ErrDeposed = errors.New("controller: deposed by a newer leader")

// errStaleSnapshot stops a pass whose observation is too old to act on.
var errStaleSnapshot = errors.New("controller: observation too old to act on")

// TickStats summarises one pass.
type TickStats struct {
	Workspaces int
	// Planned counts the workspaces the pass planned: every one on a full
	// pass, otherwise those that changed, are in flight, or whose time came.
	Planned int
	// Full is set on a pass that planned every workspace.
	Full bool
	// Writes counts committed row updates.
	Writes int
	// Steps counts actuator calls.
	Steps int
	// InFlight counts workspaces with an operation running after the pass.
	InFlight int
	// NextAttempt is the earliest time after the pass at which a failed
	// attempt may be retried; zero when none waits.
	NextAttempt time.Time
	// Stale is set when the pass stopped because its observation had grown
	// too old to act on; the next pass should come at once.
	Stale bool
}

// noteRetry keeps the earliest retry time still ahead of now.
func (s *TickStats) noteRetry(at *time.Time, now time.Time) {
	if at == nil || !at.After(now) {
		return
	}
	if s.NextAttempt.IsZero() || at.Before(s.NextAttempt) {
		s.NextAttempt = *at
	}
}

// Active reports whether the next pass should come soon.
func (s TickStats) Active() bool { return s.InFlight > 0 || s.Writes > 0 || s.Steps > 0 }

// Config tunes the controller.
type Config struct {
	// Timeouts bound each operation, from op_started_at.
	Timeouts map[workspace.Operation]time.Duration
	// A failed attempt waits BackoffBase * 2^(error_count-1), at most
	// BackoffMax, before the next one.
	BackoffBase time.Duration
	BackoffMax  time.Duration
	// MaxSnapshotAge is how long after its observation was complete the
	// pass that made it may still call the backend; later, the pass ends.
	MaxSnapshotAge time.Duration
	// VolumeUID and VolumeGID own a new home volume.
	VolumeUID, VolumeGID int
	// NewOpID returns a fresh operation id (default workspace.NewID).
	NewOpID func() string
	// BackupInterval is how old the last archive of a changed home in
	// standby may get before it is archived again; 0 turns backups off.
	BackupInterval time.Duration
	// EvacuationParallel bounds the homes moving off evacuated or drained nodes at
	// once (Moves).
	EvacuationParallel int
	// Parallel is how many workspaces a pass acts on at once (at least
	// one); each workspace is acted on by one worker per pass.
	Parallel int
	// FullPassInterval is how often a pass plans every workspace; passes
	// between plan only the workspaces whose row or observation changed,
	// that have an operation in flight, or whose Recheck time came. 0:
	// every pass is full.
	FullPassInterval time.Duration
	// Metrics records committed transitions, operations and passes (nil:
	// none); Plan ignores it.
	Metrics *Metrics
	// Templates say what each workspace runs (nil: the backend's own
	// workspace settings); a start records the version it ran.
	Templates Templates
	// UpstreamAuth is the workspace block's upstream_auth, which decides
	// the program's arguments.
	UpstreamAuth string

	// submissions: the backend reports each start's submission
	// (SubmissionReporter), set by NewWorkspaceController.
	submissions bool
}

// DefaultConfig is ConfigFrom the configuration's defaults, without
// templates: a backend built from another configuration then runs its own
// workspace settings rather than the defaults' program.
func DefaultConfig() Config {
	cfg := ConfigFrom(config.Default())
	cfg.Templates = nil
	return cfg
}

// ConfigFrom takes the controller's settings from codehub's configuration,
// the one place that knows their defaults. What no operator sets (the
// empty archive's timeout, the snapshot age) is fixed here.
func ConfigFrom(cfg *config.Config) Config {
	co := cfg.Coordinator
	return Config{
		Timeouts: map[workspace.Operation]time.Duration{
			workspace.OpProvisioning:       co.ProvisionTimeout,
			workspace.OpStarting:           co.StartTimeout,
			workspace.OpStopping:           co.StopTimeout,
			workspace.OpArchiving:          co.ArchiveTimeout,
			workspace.OpRestoring:          co.RestoreTimeout,
			workspace.OpDeleting:           co.DeleteTimeout,
			workspace.OpCreateEmptyArchive: time.Minute,
		},
		BackoffBase:    co.BackoffBase,
		BackoffMax:     co.BackoffMax,
		MaxSnapshotAge: 5 * time.Second,
		VolumeUID:      cfg.Workspace.UID,
		VolumeGID:      cfg.Workspace.GID,
		NewOpID:        workspace.NewID,
		BackupInterval: cfg.Workspace.BackupInterval,

		EvacuationParallel: co.EvacuationParallel,
		Parallel:           co.Parallel,
		FullPassInterval:   time.Minute,

		Templates:    cfg,
		UpstreamAuth: cfg.Workspace.UpstreamAuth,
	}
}

// WorkspaceController observes every workspace once per pass, plans those
// that may need it with Plan and acts on the plans.
type WorkspaceController struct {
	logger   hclog.Logger
	pool     *pgxpool.Pool
	backend  Backend
	archives ArchiveStore
	cfg      Config
	now      func() time.Time
	// rows caches every unfinished workspace row, by id: a full pass
	// reloads the rows whose version moved, a pass between reloads those
	// the leader session's notifications named (notes) and those it
	// wrote itself (reread). Only Tick touches rows and reread.
	rows   map[string]*workspace.Workspace
	reread map[string]bool
	notes  rowNotes
	// orphans are the ids reportOrphans saw last pass: since when, and
	// whether they were reported.
	orphans map[string]orphan
	// settled holds, by id, the workspaces whose last plan left them as
	// they were: a pass plans them again only once their row or
	// observation changes or their Recheck time comes. Only Tick touches
	// it.
	settled map[string]settledPlan
	// lastFull is when the last full pass began, under leader epoch
	// fullEpoch: a new term begins with a full pass.
	lastFull  time.Time
	fullEpoch int64
}

// settledPlan is what a plan that left a workspace as it was looked at.
type settledPlan struct {
	version int64
	obs     Observed
	recheck time.Time
}

// due reports whether w, observed as obs, is to be planned at now.
func (p settledPlan) due(w *workspace.Workspace, obs Observed, now time.Time) bool {
	return p.version != w.Version || !sameObserved(p.obs, obs) || !p.recheck.IsZero() && !now.Before(p.recheck)
}

type orphan struct {
	since    time.Time
	reported bool
}

// NewWorkspaceController returns a controller over the workspaces in pool.
func NewWorkspaceController(logger hclog.Logger, pool *pgxpool.Pool, backend Backend, archives ArchiveStore, cfg Config) *WorkspaceController {
	if cfg.NewOpID == nil {
		cfg.NewOpID = workspace.NewID
	}
	if r, ok := backend.(SubmissionReporter); ok {
		cfg.submissions = r.ReportsSubmissions()
	}
	return &WorkspaceController{logger: logger, pool: pool, backend: backend, archives: archives, cfg: cfg, now: time.Now,
		rows: map[string]*workspace.Workspace{}, reread: map[string]bool{}, orphans: map[string]orphan{}, settled: map[string]settledPlan{}}
}

// SetClock replaces the clock (tests drive timeouts and backoff with it).
func (c *WorkspaceController) SetClock(now func() time.Time) { c.now = now }

// Tick runs one pass under leader epoch: one bulk read of the workspaces,
// one bulk observation, then judge and act per workspace. Writes of an
// older epoch never commit; when that happens Tick returns ErrDeposed.
func (c *WorkspaceController) Tick(ctx context.Context, epoch int64) (TickStats, error) {
	start := time.Now()
	stats, err := c.pass(ctx, epoch)
	if err == nil {
		c.cfg.Metrics.pass(time.Since(start))
	}
	return stats, err
}

// pass is Tick without its timing: a failed or cancelled pass is not
// observed, so it cannot skew the durations of real passes.
func (c *WorkspaceController) pass(ctx context.Context, epoch int64) (TickStats, error) {
	var stats TickStats
	began := c.now()
	stats.Full = c.cfg.FullPassInterval <= 0 || c.fullEpoch != epoch || began.Sub(c.lastFull) >= c.cfg.FullPassInterval
	load := c.loadAll
	if !stats.Full && c.notes.following(epoch) {
		load = c.loadNamed
	}
	ws, err := load(ctx)
	if err != nil {
		// The changes it took are lost to it: the next pass reads all.
		c.fullEpoch = 0
		return stats, fmt.Errorf("load workspaces: %w", err)
	}
	begun := time.Now()
	snap, err := c.backend.Observe(ctx)
	if err != nil {
		return stats, fmt.Errorf("observe backend: %w", err)
	}
	// The pass's time to act counts from here, not from when observing
	// began (see fence).
	observed := c.now()
	c.cfg.Metrics.observed(time.Since(begun))
	evacuating, err := c.evacuating(ctx)
	if err != nil {
		return stats, fmt.Errorf("load node evacuations: %w", err)
	}
	moves := Moves(ws, snap, evacuating, c.cfg.EvacuationParallel)
	observe := func(id string) Observed {
		obs := snap.Workspaces[id]
		obs.Evacuating, obs.Move = evacuating[obs.NodeID], moves[id]
		return obs
	}
	avoid := slices.Sorted(maps.Keys(evacuating))
	now := c.now()
	fence := func(ctx context.Context) error { return c.fence(ctx, epoch, observed) }
	stats.Workspaces = len(ws)
	var seen passTally
	todo := ws
	if !stats.Full {
		todo = make([]*workspace.Workspace, 0, len(ws)/8)
		for _, w := range ws {
			if p, ok := c.settled[w.ID]; !ok || p.due(w, observe(w.ID), now) {
				todo = append(todo, w)
				continue
			}
			// Settled, so no operation: it counts as it stands.
			stats.noteRetry(w.NextAttemptAt, now)
			seen.add(*w, now)
		}
	}
	stats.Planned = len(todo)
	results, err := c.actAll(ctx, waitingLongest(todo), func(ctx context.Context, w workspace.Workspace) acted {
		obs := observe(w.ID)
		check := c.checkArchive(ctx, w, obs)
		a := Plan(w, obs, check, now, c.cfg)
		var r acted
		r.after, r.err = c.act(ctx, epoch, fence, w, a, avoid, &r.stats)
		r.write = a.Write
		if !a.Write && len(a.Steps) == 0 && check.Key == "" && w.Operation == workspace.OpNone {
			r.settled = &settledPlan{version: w.Version, obs: obs, recheck: Recheck(w, now, c.cfg)}
		}
		return r
	})
	for _, r := range results {
		if r.write || r.err != nil {
			// Reread next pass: the trigger changed columns too.
			c.reread[r.after.ID] = true
		}
		if r.settled != nil {
			c.settled[r.after.ID] = *r.settled
		} else {
			delete(c.settled, r.after.ID)
		}
		stats.add(r.stats)
		switch {
		case errors.Is(r.err, errStaleSnapshot), errors.Is(r.err, ErrDeposed), r.err != nil && ctx.Err() != nil:
		case errors.Is(r.err, errRowChanged):
			c.logger.Debug("workspace changed during the pass", "workspace_id", r.after.ID)
		case r.err != nil:
			c.logger.Warn("workspace pass failed", "workspace_id", r.after.ID, "error", r.err)
		}
		if r.after.Operation != workspace.OpNone {
			stats.InFlight++
		}
		stats.noteRetry(r.after.NextAttemptAt, now)
		seen.add(r.after, now)
	}
	switch {
	case err == nil:
	case errors.Is(err, errStaleSnapshot):
		stats.Stale = true
		c.cfg.Metrics.stalePass()
		c.logger.Warn("pass stopped: its observation is too old to act on", "error", err)
		return stats, nil
	default:
		return stats, err
	}
	if stats.Full {
		c.lastFull, c.fullEpoch = began, epoch
		// Orphans take the whole observation to find and a minute to
		// count (orphanGrace): the full passes judge them. The cache
		// holds every unfinished row (a write only marks its row reread).
		c.reportOrphans(Orphans(snap, func(id string) bool { return c.rows[id] != nil }), now)
	}
	c.cfg.Metrics.passSeen(seen)
	return stats, nil
}

// sameObserved reports whether two observations say the same, comparing
// job results and failures by value: a backend may report an unchanged
// one anew.
func sameObserved(a, b Observed) bool {
	if !eqPtr(a.Failure, b.Failure) || !eqPtr(a.Archive, b.Archive) || !eqPtr(a.Restore, b.Restore) || !eqPtr(a.StopArchive, b.StopArchive) ||
		!a.RunningSince.Equal(b.RunningSince) || !a.Submitted.Equal(b.Submitted) {
		return false
	}
	return bare(a) == bare(b)
}

// bare is o without the fields sameObserved compares by value.
func bare(o Observed) Observed {
	o.Failure, o.Archive, o.Restore, o.StopArchive = nil, nil, nil, nil
	o.RunningSince, o.Submitted = time.Time{}, time.Time{}
	return o
}

// evacuating returns the ids of the nodes being evacuated.
func (c *WorkspaceController) evacuating(ctx context.Context) (map[string]bool, error) {
	list, err := store.ListEvacuations(ctx, c.pool)
	if err != nil {
		return nil, err
	}
	out := make(map[string]bool, len(list))
	for _, e := range list {
		out[e.NodeID] = true
	}
	return out, nil
}

// Orphans returns, sorted, the ids the backend holds objects of (a volume,
// a job) that are no unfinished workspace's: known reports those.
func Orphans(snap Snapshot, known func(id string) bool) []string {
	var out []string
	for id, obs := range snap.Workspaces {
		if !known(id) && obs != (Observed{}) {
			out = append(out, id)
		}
	}
	slices.Sort(out)
	return out
}

// orphanGrace is how long objects must outlive their workspace before they
// count as orphaned: a deleted workspace's volume may take a moment to go.
const orphanGrace = time.Minute

// reportOrphans warns once about each orphan that lasted orphanGrace and
// keeps the gauge current. Orphans are only reported, never removed: after
// a database restored from an older backup, an orphaned volume may hold the
// only copy of a home.
func (c *WorkspaceController) reportOrphans(ids []string, now time.Time) {
	current := make(map[string]orphan, len(ids))
	counted := 0
	for _, id := range ids {
		o, seen := c.orphans[id]
		if !seen {
			o = orphan{since: now}
		}
		if now.Sub(o.since) >= orphanGrace {
			counted++
			if !o.reported {
				c.logger.Warn("backend holds objects of a workspace the database does not know; remove them by hand once sure they hold nothing needed",
					"workspace_id", id, "since", o.since)
				o.reported = true
			}
		}
		current[id] = o
	}
	c.orphans = current
	c.cfg.Metrics.setOrphans(counted)
}

// loadAll returns every unfinished workspace, reading from the database
// the versions of all and only the rows that are new or changed since the
// last pass.
func (c *WorkspaceController) loadAll(ctx context.Context) ([]*workspace.Workspace, error) {
	// Before listing: a change notified from here on is read again by the
	// next pass, one notified before is in the listing.
	c.notes.take()
	clear(c.reread)
	versions, err := store.ListUnfinishedVersions(ctx, c.pool)
	if err != nil {
		return nil, err
	}
	var stale []string
	live := make(map[string]bool, len(versions))
	for _, v := range versions {
		live[v.ID] = true
		if cached, ok := c.rows[v.ID]; !ok || cached.Version != v.Version {
			stale = append(stale, v.ID)
		}
	}
	for id := range c.rows {
		if !live[id] {
			delete(c.rows, id)
			delete(c.settled, id)
		}
	}
	if len(stale) > 0 {
		fresh, err := store.GetWorkspaces[workspace.Workspace](ctx, c.pool, stale)
		if err != nil {
			return nil, err
		}
		for i := range fresh {
			c.rows[fresh[i].ID] = &fresh[i]
		}
	}
	ws := make([]*workspace.Workspace, 0, len(versions))
	for _, v := range versions {
		if w, ok := c.rows[v.ID]; ok {
			ws = append(ws, w)
		}
	}
	return ws, nil
}

// loadNamed returns every unfinished workspace from the cache, reading
// from the database only the rows notifications named since the last pass
// and those the pass wrote: between full passes the leader session's
// notifications name every change (rowNotes).
func (c *WorkspaceController) loadNamed(ctx context.Context) ([]*workspace.Workspace, error) {
	named := c.notes.take()
	for id := range c.reread {
		if named == nil {
			named = make(map[string]bool, len(c.reread))
		}
		named[id] = true
	}
	clear(c.reread)
	if len(named) > 0 {
		fresh, err := store.GetWorkspaces[workspace.Workspace](ctx, c.pool, slices.Collect(maps.Keys(named)))
		if err != nil {
			return nil, err
		}
		for i := range fresh {
			if fresh[i].Phase != workspace.PhaseDeleted {
				c.rows[fresh[i].ID] = &fresh[i]
				delete(named, fresh[i].ID)
			}
		}
		// What is left was deleted or is gone.
		for id := range named {
			delete(c.rows, id)
			delete(c.settled, id)
		}
	}
	ws := make([]*workspace.Workspace, 0, len(c.rows))
	for _, w := range c.rows {
		ws = append(ws, w)
	}
	return ws, nil
}

// rowNotes collects the ids of the workspace rows that changed, as the
// notifications on the leader session name them. While a term's session
// listens, every committed change after its LISTEN is named; the term's
// first pass is full and lists every row, so together they miss nothing.
// The coordinator feeds it; a controller ticked by anything else lists
// every row's version each pass.
type rowNotes struct {
	mu sync.Mutex
	// epoch is the term whose session notifies (0: none).
	epoch int64
	ids   map[string]bool
}

// follow says the notifications of term epoch's session arrive from now
// on (0: they stop).
func (n *rowNotes) follow(epoch int64) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.epoch, n.ids = epoch, nil
}

func (n *rowNotes) following(epoch int64) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.epoch != 0 && n.epoch == epoch
}

// changed notes a row's change.
func (n *rowNotes) changed(id string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.ids == nil {
		n.ids = make(map[string]bool)
	}
	n.ids[id] = true
}

// take returns the ids noted since the last take (nil if none) and
// forgets them.
func (n *rowNotes) take() map[string]bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	ids := n.ids
	n.ids = nil
	return ids
}

func (c *WorkspaceController) checkArchive(ctx context.Context, w workspace.Workspace, obs Observed) ArchiveCheck {
	key := needsArchiveCheck(w, obs)
	if key == "" {
		return ArchiveCheck{}
	}
	if workspace.Building(w) && w.Operation == workspace.OpArchiving {
		// The job named the key after the commit it built: find it.
		found, err := c.prebuiltKey(ctx, w.ID, key)
		if err != nil {
			return ArchiveCheck{Key: key, Err: err}
		}
		key = found
	}
	meta, err := c.archives.Stat(ctx, key)
	return ArchiveCheck{Key: key, Meta: meta, Err: err}
}

// prebuiltKey finds the complete archive a prebuild wrote under prefix
// (archive.PrebuildPrefix); archive.ErrArchiveNotFound when there is none.
func (c *WorkspaceController) prebuiltKey(ctx context.Context, wsID, prefix string) (string, error) {
	l, err := c.archives.List(ctx, wsID)
	if err != nil {
		return "", err
	}
	for _, key := range l.Complete {
		if archive.PrebuiltUnder(key, prefix) {
			return key, nil
		}
	}
	return "", fmt.Errorf("prebuild under %s: %w", prefix, archive.ErrArchiveNotFound)
}

// fence is checked right before every backend call. The database fences
// the controller's writes by epoch, but Nomad and the local backend know
// nothing of epochs: a leader paused after observing (a suspended VM, a long
// GC) could resume after a newer leader acted, and delete a home it
// restored. So each call first confirms that this leader's epoch is still
// the current one and that the observation it acts on is recent.
//
// Recent counts from when the observation was complete. The time observing
// took is not held against the pass: a backend under load answers slowly,
// the next observation would be no fresher, and counting from its start
// stopped every pass of a wave before it acted, so nothing was submitted
// until the load fell.
func (c *WorkspaceController) fence(ctx context.Context, epoch int64, observed time.Time) error {
	if age := c.now().Sub(observed); age > c.cfg.MaxSnapshotAge {
		return fmt.Errorf("%w: observed %s ago", errStaleSnapshot, age)
	}
	current, err := store.CurrentEpoch(ctx, c.pool)
	if err != nil {
		return fmt.Errorf("check leader epoch: %w", err)
	}
	if current != epoch {
		return fmt.Errorf("%w: epoch %d, current %d", ErrDeposed, epoch, current)
	}
	return nil
}

// act carries out a plan and returns the workspace as the pass leaves it.
// fence runs before each backend call; its error ends the plan untouched.
func (c *WorkspaceController) act(ctx context.Context, epoch int64, fence func(context.Context) error, w workspace.Workspace, a Action, avoid []string, stats *TickStats) (workspace.Workspace, error) {
	if !a.Write && len(a.Steps) == 0 {
		return w, nil
	}
	log := c.logger.With("workspace_id", w.ID)
	if a.Write && !a.WriteLast {
		v, err := c.write(ctx, epoch, w, a.Next, stats)
		if err != nil {
			return w, err
		}
		a.Next.Version = v
		logTransition(log, w, a.Next)
		if f := a.BackupFailure; f != nil {
			log.Warn("backup failed, the home stays in its volume", "reason", f.Reason, "message", f.Message, "retry_at", a.Next.NextAttemptAt)
			c.cfg.Metrics.backupFailed()
		}
	}
	for _, step := range a.Steps {
		if err := fence(ctx); err != nil {
			return w, err
		}
		stats.Steps++
		err := c.run(ctx, step, a.Next, a.VolumeID, avoid)
		if err == nil {
			continue
		}
		if errors.Is(err, ErrVolumeInUse) || ctx.Err() != nil {
			return a.Next, ctx.Err()
		}
		if !step.submits() {
			log.Warn("step failed, retrying next pass", "step", step, "error", err)
			return a.Next, nil
		}
		return c.recordFailure(ctx, epoch, log, a.Next, step, err, stats)
	}
	if a.Write && a.WriteLast {
		if _, err := c.write(ctx, epoch, w, a.Next, stats); err != nil {
			return w, err
		}
		logTransition(log, w, a.Next)
	}
	return a.Next, nil
}

// recordFailure stores a failed submission as a failed attempt.
func (c *WorkspaceController) recordFailure(ctx context.Context, epoch int64, log hclog.Logger, w workspace.Workspace, step Step, stepErr error, stats *TickStats) (workspace.Workspace, error) {
	reason, terminal := stepFailureReason(step), false
	var f *Failure
	if errors.As(stepErr, &f) {
		reason, terminal = f.Reason, f.Terminal
	}
	now := c.now()
	next := failed(w, reason, stepErr.Error(), terminal || workspace.TerminalReason(reason), now, c.cfg)
	if workspace.BackingUp(w) {
		next = backupFailed(w, now, c.cfg)
	}
	next.Conditions = maps.Clone(w.Conditions)
	derive(w.Conditions, &next, now)
	log.Warn("operation attempt failed", "operation", w.Operation, "step", step, "reason", reason, "error_count", next.ErrorCount, "backup", workspace.BackingUp(w), "error", stepErr)
	if _, err := c.write(ctx, epoch, w, next, stats); err != nil {
		return w, err
	}
	return next, nil
}

func stepFailureReason(step Step) string {
	switch step {
	case StepStartWorkspace:
		return workspace.ReasonStartFailed
	case StepSubmitArchive, StepCreateEmptyArchive:
		return workspace.ReasonArchiveFailed
	case StepSubmitRestore:
		return workspace.ReasonRestoreFailed
	}
	return workspace.ReasonBackendError
}

func logTransition(log hclog.Logger, from, to workspace.Workspace) {
	if from.Phase == to.Phase && from.Operation == to.Operation {
		return
	}
	log.Info("workspace transition", "phase", to.Phase, "operation", to.Operation,
		"previous_phase", from.Phase, "previous_operation", from.Operation, "desired", to.DesiredState)
}

// write stores the controller's columns of next over the row read as prev.
func (c *WorkspaceController) write(ctx context.Context, epoch int64, prev, next workspace.Workspace, stats *TickStats) (int64, error) {
	conds, err := json.Marshal(next.Conditions)
	if err != nil {
		return 0, fmt.Errorf("encode conditions: %w", err)
	}
	v, err := store.WriteControllerState(ctx, c.pool, prev.ID, prev.Version, epoch, store.ControllerState{
		Conditions:      conds,
		Phase:           string(next.Phase),
		Operation:       string(next.Operation),
		OpID:            next.OpID,
		OpStartedAt:     next.OpStartedAt,
		OpAttempt:       next.OpAttempt,
		OpBackup:        next.OpBackup,
		ArchiveKey:      next.ArchiveKey,
		ArchivedAt:      next.ArchivedAt,
		RestoreMarker:   next.RestoreMarker,
		RunID:           next.RunID,
		ArchiveRunID:    next.ArchiveRunID,
		PreviousRunID:   next.PreviousRunID,
		ErrorReason:     next.ErrorReason,
		ErrorMessage:    next.ErrorMessage,
		ErrorCount:      next.ErrorCount,
		NextAttemptAt:   next.NextAttemptAt,
		TemplateVersion: next.TemplateVersion,
	})
	if errors.Is(err, store.ErrConflict) {
		return 0, c.conflict(ctx, epoch)
	}
	if err != nil {
		return 0, fmt.Errorf("write workspace %s: %w", prev.ID, err)
	}
	stats.Writes++
	c.cfg.Metrics.committed(prev, next, c.now())
	return v, nil
}

// conflict tells a lost race on the row (the API changed it; the next pass
// sees the new row) from a lost leadership.
func (c *WorkspaceController) conflict(ctx context.Context, epoch int64) error {
	current, err := store.CurrentEpoch(ctx, c.pool)
	if err != nil {
		return err
	}
	if current != epoch {
		return fmt.Errorf("%w: epoch %d, current %d", ErrDeposed, epoch, current)
	}
	return errRowChanged
}

var errRowChanged = errors.New("workspace changed during the pass")

// parentArchive is the archive of w that a new archive at key builds on:
// its current one when w made it, unless that is the one being made.
func parentArchive(w workspace.Workspace, key string) string {
	if own := ownArchive(w); own != key {
		return own
	}
	return ""
}

// run calls the actuator of step for w.
// A new volume goes to none of the nodes in avoid.
func (c *WorkspaceController) run(ctx context.Context, step Step, w workspace.Workspace, volumeID string, avoid []string) error {
	switch step {
	case StepProvisionVolume:
		return c.backend.ProvisionVolume(ctx, VolumeSpec{WorkspaceID: w.ID, UID: c.cfg.VolumeUID, GID: c.cfg.VolumeGID, AvoidNodes: avoid})
	case StepStartWorkspace:
		spec, err := c.workspaceSpec(ctx, w)
		if err != nil {
			return err
		}
		return c.backend.StartWorkspace(ctx, spec)
	case StepStopWorkspace:
		return c.backend.StopWorkspace(ctx, w.ID, StopSave)
	case StepDiscardWorkspace:
		return c.backend.StopWorkspace(ctx, w.ID, StopDiscard)
	case StepGiveUpStopArchive:
		return c.backend.GiveUpStopArchive(ctx, w.ID)
	case StepStopArchiveJob:
		return c.backend.StopJob(ctx, w.ID, JobArchive)
	case StepStopRestoreJob:
		return c.backend.StopJob(ctx, w.ID, JobRestore)
	case StepSubmitArchive:
		key := opArchive(w)
		job := JobSpec{WorkspaceID: w.ID, OpID: deref(w.OpID), ArchiveKey: key, Attempt: w.OpAttempt, Backup: w.OpBackup}
		if workspace.Building(w) {
			build, err := c.buildSpec(w)
			if err != nil {
				return err
			}
			job.Build = build
		} else {
			job.Parent = parentArchive(w, key)
		}
		return c.backend.SubmitArchive(ctx, job)
	case StepSubmitRestore:
		return c.backend.SubmitRestore(ctx, JobSpec{WorkspaceID: w.ID, OpID: archive.OpID(deref(w.ArchiveKey)),
			ArchiveKey: deref(w.ArchiveKey), Attempt: w.OpAttempt})
	case StepCreateEmptyArchive:
		return c.archives.CreateEmpty(ctx, archive.Key(w.ID, deref(w.OpID)))
	case StepDeleteVolume:
		return c.backend.DeleteVolume(ctx, w.ID, volumeID)
	case StepPurgeArchiveJob:
		return c.backend.PurgeJob(ctx, w.ID, JobArchive)
	case StepPurgeRestoreJob:
		return c.backend.PurgeJob(ctx, w.ID, JobRestore)
	case StepPurgeWorkspaceJob:
		return c.backend.PurgeJob(ctx, w.ID, JobWorkspace)
	}
	return fmt.Errorf("unknown step %q", step)
}
