package controller

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/codehub-io/codehub/archive"
	"github.com/codehub-io/codehub/workspace"
)

// GCConfig configures the archive GC.
type GCConfig struct {
	Interval time.Duration
	// KeepArchives is how many of its newest archives a live workspace keeps.
	KeepArchives int
	// DeletedGrace is how long the archives of a deleted workspace stay.
	DeletedGrace time.Duration
	// DryRun logs what would be deleted and deletes nothing.
	DryRun bool
	// Metrics counts deleted archives (nil: none).
	Metrics *Metrics
}

// GCRunner deletes archives nobody needs: all archives of workspaces
// deleted longer than the grace ago, and all but the newest KeepArchives of
// a live workspace, except those a kept incremental archive builds on. It
// never deletes a workspace's current archive_key, nor
// the archive of its op id (an archive being made, or the one an ERROR
// workspace may need when recovered). It also removes what killed attempts
// and deletions left behind: multipart uploads, whose parts S3 keeps until
// someone aborts them, and archives missing their meta or their object,
// which nothing reads. Each removal re-reads the workspace first, so an
// operation claimed after the pass began keeps what it works on. A deleted
// workspace whose archives are all gone is recorded and never listed again.
type GCRunner struct {
	logger   hclog.Logger
	svc      GCWorkspaces
	archives ArchiveStore
	cfg      GCConfig
	now      func() time.Time
}

// GCWorkspaces is what the GC needs of the workspace service.
type GCWorkspaces interface {
	ArchiveOwners(ctx context.Context, deletedBefore time.Time) ([]workspace.Workspace, error)
	// Reread returns the current row of a workspace, deleted or not.
	Reread(ctx context.Context, id string) (workspace.Workspace, error)
	// ArchivesCollected records that a deleted workspace has no archive
	// left, so ArchiveOwners leaves it out from then on.
	ArchivesCollected(ctx context.Context, id string) error
	// ReferencedArchives lists the archives of a workspace that other live
	// workspaces point to: prebuilt homes they start from.
	ReferencedArchives(ctx context.Context, owner string) ([]string, error)
}

// NewGCRunner returns an archive GC.
func NewGCRunner(logger hclog.Logger, svc GCWorkspaces, archives ArchiveStore, cfg GCConfig) *GCRunner {
	return &GCRunner{logger: logger, svc: svc, archives: archives, cfg: cfg, now: time.Now}
}

// Run runs a pass every interval until ctx ends; a failed pass is logged.
func (g *GCRunner) Run(ctx context.Context) error {
	ticker := time.NewTicker(g.cfg.Interval)
	defer ticker.Stop()
	for {
		if _, err := g.RunOnce(ctx); err != nil && ctx.Err() == nil {
			g.logger.Warn("gc pass failed", "error", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-ticker.C:
		}
	}
}

// RunOnce judges every workspace's archives and deletes (or, dry, names)
// the garbage. It returns the keys of the complete archives deleted or,
// dry, that would be.
func (g *GCRunner) RunOnce(ctx context.Context) ([]string, error) {
	ws, err := g.svc.ArchiveOwners(ctx, g.now().Add(-g.cfg.DeletedGrace))
	if err != nil {
		return nil, err
	}
	var garbage []string
	for _, w := range ws {
		deleted, err := g.collect(ctx, w)
		garbage = append(garbage, deleted...)
		if err != nil {
			return garbage, err
		}
	}
	return garbage, nil
}

// collect removes the garbage of one workspace.
func (g *GCRunner) collect(ctx context.Context, w workspace.Workspace) ([]string, error) {
	l, err := g.archives.List(ctx, w.ID)
	if err != nil {
		return nil, fmt.Errorf("list archives of %s: %w", w.ID, err)
	}
	uploads, err := g.archives.Unfinished(ctx, w.ID)
	if err != nil {
		return nil, fmt.Errorf("list unfinished uploads of %s: %w", w.ID, err)
	}
	now := g.now()
	stale := StaleUploads(w, uploads, now, abandonedUploadAge)
	abandoned := Abandoned(w, l.Incomplete, now, abandonedUploadAge)
	referenced, err := g.svc.ReferencedArchives(ctx, w.ID)
	if err != nil {
		return nil, err
	}
	garbage := slices.DeleteFunc(Garbage(w, l.Complete, g.cfg.KeepArchives), func(key string) bool { return slices.Contains(referenced, key) })
	if garbage, err = g.withoutAncestors(ctx, w, l.Complete, garbage); err != nil {
		return nil, err
	}
	log := g.logger.With("workspace_id", w.ID)
	if g.cfg.DryRun {
		for _, u := range stale {
			log.Info("gc would abort unfinished upload", "key", u.Key, "upload_id", u.ID, "initiated", u.Initiated)
		}
		for _, key := range abandoned {
			log.Info("gc would delete incomplete archive", "key", key)
		}
		for _, key := range garbage {
			log.Info("gc would delete archive", "key", key)
		}
		return garbage, nil
	}
	left := len(uploads) + len(l.Incomplete) + len(l.Complete)
	for _, u := range stale {
		done, err := g.remove(ctx, w.ID, u.Key, func() error { return g.archives.AbortUpload(ctx, u) })
		if err != nil {
			return nil, fmt.Errorf("abort upload %s of %s: %w", u.ID, u.Key, err)
		}
		if done {
			log.Info("gc aborted unfinished upload", "key", u.Key, "upload_id", u.ID, "initiated", u.Initiated)
			g.cfg.Metrics.gcAbortedUpload()
			left--
		}
	}
	for _, key := range abandoned {
		done, err := g.remove(ctx, w.ID, key, func() error { return g.archives.Delete(ctx, key) })
		if err != nil {
			return nil, fmt.Errorf("delete incomplete archive %s: %w", key, err)
		}
		if done {
			log.Info("gc deleted incomplete archive", "key", key)
			left--
		}
	}
	var deleted []string
	for _, key := range garbage {
		done, err := g.remove(ctx, w.ID, key, func() error { return g.archives.Delete(ctx, key) })
		if err != nil {
			return deleted, fmt.Errorf("delete archive %s: %w", key, err)
		}
		if done {
			log.Info("gc deleted archive", "key", key)
			g.cfg.Metrics.gcDeletedArchive()
			deleted = append(deleted, key)
			left--
		}
	}
	if left == 0 && w.Phase == workspace.PhaseDeleted {
		if err := g.svc.ArchivesCollected(ctx, w.ID); err != nil {
			return deleted, fmt.Errorf("record archives of %s collected: %w", w.ID, err)
		}
	}
	return deleted, nil
}

// withoutAncestors leaves out of garbage every archive that a kept one (or
// a protected one) builds on: an incremental archive cannot be restored
// without its chain.
func (g *GCRunner) withoutAncestors(ctx context.Context, w workspace.Workspace, complete, garbage []string) ([]string, error) {
	if len(garbage) == 0 {
		return garbage, nil
	}
	var kept []string
	for _, key := range complete {
		if !slices.Contains(garbage, key) {
			kept = append(kept, key)
		}
	}
	for key := range protected(w) {
		kept = append(kept, key)
	}
	needed, err := archive.Ancestors(ctx, kept, g.archives.Stat)
	if err != nil {
		return nil, fmt.Errorf("chains of the archives of %s: %w", w.ID, err)
	}
	return slices.DeleteFunc(garbage, func(key string) bool { return needed[key] }), nil
}

// remove runs del unless the workspace, read again right now, needs key:
// an operation claimed since the pass listed the bucket may be writing it,
// or it may have become the archive the workspace points to.
func (g *GCRunner) remove(ctx context.Context, wsID, key string, del func() error) (bool, error) {
	w, err := g.svc.Reread(ctx, wsID)
	if err != nil {
		return false, fmt.Errorf("reread workspace: %w", err)
	}
	if protects(w, key) {
		g.logger.Info("gc keeps what an operation claimed since the pass began", "workspace_id", wsID, "key", key)
		return false, nil
	}
	referenced, err := g.svc.ReferencedArchives(ctx, wsID)
	if err != nil {
		return false, err
	}
	if slices.Contains(referenced, key) {
		g.logger.Info("gc keeps a prebuilt home a workspace started from since the pass began", "workspace_id", wsID, "key", key)
		return false, nil
	}
	return true, del()
}

// protected are the keys of w no removal may touch: its current archive,
// the one its operation (or the failed one it may retry) writes, and the
// one a drain's stop of its current run makes (committed later).
func protected(w workspace.Workspace) map[string]bool {
	keys := map[string]bool{}
	if w.Phase == workspace.PhaseDeleted {
		return keys
	}
	if w.ArchiveKey != nil {
		keys[*w.ArchiveKey] = true
	}
	if w.OpID != nil {
		keys[archive.Key(w.ID, *w.OpID)] = true
	}
	if w.RunID != "" {
		keys[archive.Key(w.ID, w.RunID)] = true
	}
	return keys
}

// protects reports whether key is one of w's protected archives, or one
// its operation writes (a prebuild's key names the commit it built, which
// only its job knew).
func protects(w workspace.Workspace, key string) bool {
	if protected(w)[key] {
		return true
	}
	return w.Phase != workspace.PhaseDeleted && w.OpID != nil && archive.OwnedBy(key, w.ID) && archive.OpID(key) == *w.OpID
}

// abandonedUploadAge is how old an unfinished upload must be before the GC
// aborts it: a younger one may belong to an attempt that has just begun and
// is not yet visible as the workspace's operation.
const abandonedUploadAge = time.Hour

// StaleUploads picks the unfinished uploads of w to abort: every one
// started at least minAge before now, except that of the archive w is
// making right now (a large home can take hours to upload).
func StaleUploads(w workspace.Workspace, uploads []archive.Upload, now time.Time, minAge time.Duration) []archive.Upload {
	inFlight := func(key string) bool {
		return w.Operation == workspace.OpArchiving && w.OpID != nil && archive.OpID(key) == *w.OpID
	}
	var out []archive.Upload
	for _, u := range uploads {
		if inFlight(u.Key) || now.Sub(u.Initiated) < minAge {
			continue
		}
		out = append(out, u)
	}
	return out
}

// Abandoned picks the incomplete archives of w to delete: those last
// written at least minAge before now (a younger one may be an archive whose
// meta is being written) that are not protected. A deleted workspace's go
// whatever their age: nothing runs for it any more.
func Abandoned(w workspace.Workspace, incomplete []archive.Object, now time.Time, minAge time.Duration) []string {
	var out []string
	for _, o := range incomplete {
		if protects(w, o.Key) || (w.Phase != workspace.PhaseDeleted && now.Sub(o.Modified) < minAge) {
			continue
		}
		out = append(out, o.Key)
	}
	return out
}

// Garbage picks the archives of w to delete among keys. w is live, or
// deleted longer than the grace ago (ArchiveOwners decides which).
func Garbage(w workspace.Workspace, keys []string, keep int) []string {
	switch {
	case w.DeletedAt != nil && w.Phase == workspace.PhaseDeleted:
		keep = 0
	case w.DeletedAt != nil:
		// Deleted but stuck in ERROR: only what recovery would need stays.
		keep = 0
	}
	newest := slices.Clone(keys)
	slices.Sort(newest)
	slices.Reverse(newest)
	var out []string
	for i, key := range newest {
		if i < keep || protects(w, key) {
			continue
		}
		out = append(out, key)
	}
	return out
}
