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
// a live workspace. It never deletes a workspace's current archive_key, nor
// the archive of its op id (an archive being made, or the one an ERROR
// workspace may need when recovered). It also aborts the multipart uploads
// that archive attempts killed mid-way left behind, whose parts S3 keeps
// until someone does.
type GCRunner struct {
	logger   hclog.Logger
	svc      *workspace.Service
	archives ArchiveStore
	cfg      GCConfig
	now      func() time.Time
}

// NewGCRunner returns an archive GC.
func NewGCRunner(logger hclog.Logger, svc *workspace.Service, archives ArchiveStore, cfg GCConfig) *GCRunner {
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
// the garbage. It returns the keys deleted or, dry, that would be.
func (g *GCRunner) RunOnce(ctx context.Context) ([]string, error) {
	ws, err := g.svc.ArchiveOwners(ctx, g.now().Add(-g.cfg.DeletedGrace))
	if err != nil {
		return nil, err
	}
	var garbage []string
	for _, w := range ws {
		keys, err := g.archives.List(ctx, w.ID)
		if err != nil {
			return garbage, fmt.Errorf("list archives of %s: %w", w.ID, err)
		}
		if err := g.abortStaleUploads(ctx, w); err != nil {
			return garbage, err
		}
		for _, key := range Garbage(w, keys, g.cfg.KeepArchives) {
			if g.cfg.DryRun {
				g.logger.Info("gc would delete archive", "workspace_id", w.ID, "key", key)
				garbage = append(garbage, key)
				continue
			}
			if err := g.archives.Delete(ctx, key); err != nil {
				return garbage, fmt.Errorf("delete archive %s: %w", key, err)
			}
			g.logger.Info("gc deleted archive", "workspace_id", w.ID, "key", key)
			g.cfg.Metrics.gcDeletedArchive()
			garbage = append(garbage, key)
		}
	}
	return garbage, nil
}

func (g *GCRunner) abortStaleUploads(ctx context.Context, w workspace.Workspace) error {
	uploads, err := g.archives.Unfinished(ctx, w.ID)
	if err != nil {
		return fmt.Errorf("list unfinished uploads of %s: %w", w.ID, err)
	}
	for _, u := range StaleUploads(w, uploads, g.now(), abandonedUploadAge) {
		if g.cfg.DryRun {
			g.logger.Info("gc would abort unfinished upload", "workspace_id", w.ID, "key", u.Key, "upload_id", u.ID, "initiated", u.Initiated)
			continue
		}
		if err := g.archives.AbortUpload(ctx, u); err != nil {
			return fmt.Errorf("abort upload %s of %s: %w", u.ID, u.Key, err)
		}
		g.logger.Info("gc aborted unfinished upload", "workspace_id", w.ID, "key", u.Key, "upload_id", u.ID, "initiated", u.Initiated)
		g.cfg.Metrics.gcAbortedUpload()
	}
	return nil
}

// abandonedUploadAge is how old an unfinished upload must be before the GC
// aborts it: a younger one may belong to an attempt that has just begun and
// is not yet visible as the workspace's operation.
const abandonedUploadAge = time.Hour

// StaleUploads picks the unfinished uploads of w to abort: every one
// started at least minAge before now, except that of the archive w is
// making right now (a large home can take hours to upload).
func StaleUploads(w workspace.Workspace, uploads []archive.Upload, now time.Time, minAge time.Duration) []archive.Upload {
	inFlight := ""
	if w.Operation == workspace.OpArchiving && w.OpID != nil {
		inFlight = archive.Key(w.ID, *w.OpID)
	}
	var out []archive.Upload
	for _, u := range uploads {
		if u.Key == inFlight || now.Sub(u.Initiated) < minAge {
			continue
		}
		out = append(out, u)
	}
	return out
}

// Garbage picks the archives of w to delete among keys. w is live, or
// deleted longer than the grace ago (ArchiveOwners decides which).
func Garbage(w workspace.Workspace, keys []string, keep int) []string {
	protected := map[string]bool{}
	if w.ArchiveKey != nil {
		protected[*w.ArchiveKey] = true
	}
	if w.OpID != nil {
		protected[archive.Key(w.ID, *w.OpID)] = true
	}
	switch {
	case w.DeletedAt != nil && w.Phase == workspace.PhaseDeleted:
		protected, keep = nil, 0
	case w.DeletedAt != nil:
		// Deleted but stuck in ERROR: only what recovery would need stays.
		keep = 0
	}
	newest := slices.Clone(keys)
	slices.Sort(newest)
	slices.Reverse(newest)
	var out []string
	for i, key := range newest {
		if i < keep || protected[key] {
			continue
		}
		out = append(out, key)
	}
	return out
}
