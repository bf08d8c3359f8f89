package controller

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/codehub-io/codehub/archive"
	"github.com/codehub-io/codehub/config"
	"github.com/codehub-io/codehub/store"
	"github.com/codehub-io/codehub/workspace"
)

// PrebuildConfig configures the prebuild runner.
type PrebuildConfig struct {
	// Interval is how often it looks at the prebuilds.
	Interval time.Duration
	// MaxBuilding bounds the prebuilds building at once, all templates
	// together; a template builds one at a time.
	MaxBuilding int
	// BuildTimeout fails a build that has not made its home by then.
	BuildTimeout time.Duration
	// KeepFailed is how many failed prebuilds of a template stay listed.
	KeepFailed int
	// MaxFilling bounds the warm homes being made at once, all templates
	// together.
	MaxFilling int
	// Metrics records each pass (nil: none).
	Metrics *Metrics
}

// Prebuild runner defaults.
const (
	DefaultPrebuildMaxBuilding  = 2
	DefaultPrebuildBuildTimeout = time.Hour
	DefaultPrebuildKeepFailed   = 3
	DefaultPoolMaxFilling       = 2
)

// PrebuildTemplates are the configured templates; *config.Config is one.
type PrebuildTemplates interface {
	TemplateNames() []string
	Template(name string) (*config.Template, bool)
}

// PrebuildWorkspaces is what the prebuild runner needs of the workspace
// service: it builds each prebuilt home in a workspace of its own.
type PrebuildWorkspaces interface {
	CreateBuilder(ctx context.Context, template, id string) (workspace.Workspace, error)
	CreatePoolHome(ctx context.Context, template string) (workspace.Workspace, error)
	PoolHomes(ctx context.Context) ([]workspace.Workspace, error)
	Reread(ctx context.Context, id string) (workspace.Workspace, error)
	Delete(ctx context.Context, id string) error
}

// PrebuildRunner keeps each template's prebuilt homes and warm pool
// (docs/templates.md): it starts a build when a template's version has
// none, when its schedule says, or when an admin asks; records the
// builder's archive (its prebuild) as the prebuilt home, with the commit
// it holds, or the failure; drops what the template's retention does not
// keep; and keeps `warm` homes standing by with the newest prebuilt home.
// A builder is a workspace asked to be archived from the start: the
// controller provisions its volume and archives it with a job that first
// builds the home (JobSpec.Build). Each pass reads everything, plans
// (planPrebuilds, pure), then acts. It runs on the leader only.
type PrebuildRunner struct {
	logger    hclog.Logger
	pool      store.Querier
	svc       PrebuildWorkspaces
	templates PrebuildTemplates
	cfg       PrebuildConfig
	now       func() time.Time
	wake      chan struct{}
}

// NewPrebuildRunner returns a prebuild runner.
func NewPrebuildRunner(logger hclog.Logger, pool store.Querier, svc PrebuildWorkspaces, templates PrebuildTemplates, cfg PrebuildConfig) *PrebuildRunner {
	if cfg.MaxBuilding <= 0 {
		cfg.MaxBuilding = DefaultPrebuildMaxBuilding
	}
	if cfg.BuildTimeout <= 0 {
		cfg.BuildTimeout = DefaultPrebuildBuildTimeout
	}
	if cfg.KeepFailed <= 0 {
		cfg.KeepFailed = DefaultPrebuildKeepFailed
	}
	if cfg.MaxFilling <= 0 {
		cfg.MaxFilling = DefaultPoolMaxFilling
	}
	return &PrebuildRunner{logger: logger, pool: pool, svc: svc, templates: templates, cfg: cfg, now: time.Now,
		wake: make(chan struct{}, 1)}
}

// prebuildWakeGap is the least time between two passes a wake starts: a
// wave of workspace changes makes one pass a second, not one each.
const prebuildWakeGap = time.Second

// Wake asks for a pass soon: a workspace changed, maybe a builder that
// finished or a warm home that is ready. Bursts coalesce; it never blocks.
func (r *PrebuildRunner) Wake() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// Run runs a pass every interval, and soon after a wake, until ctx ends;
// a failed pass is logged and retried at the next.
func (r *PrebuildRunner) Run(ctx context.Context) error {
	ticker := time.NewTicker(r.cfg.Interval)
	defer ticker.Stop()
	for {
		if _, err := r.RunOnce(ctx); err != nil && ctx.Err() == nil {
			r.logger.Warn("prebuild pass failed", "error", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-ticker.C:
		case <-r.wake:
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(prebuildWakeGap):
			}
			// The pass about to run sees what the wakes of the gap saw.
			select {
			case <-r.wake:
			default:
			}
		}
	}
}

// prebuildKind is what the runner does to one prebuild.
type prebuildKind string

const (
	// prebuildBuild starts a build (of a request, or a new one).
	prebuildBuild prebuildKind = "build"
	// prebuildReady records the builder's archive as the prebuilt home.
	prebuildReady prebuildKind = "ready"
	// prebuildFail records why a build failed and deletes its builder.
	prebuildFail prebuildKind = "fail"
	// prebuildDrop forgets a prebuild retention does not keep, and
	// deletes its builder (GC collects its archive once no workspace
	// points to it).
	prebuildDrop prebuildKind = "drop"
	// poolFill adds a home to a template's warm pool.
	poolFill prebuildKind = "fill"
	// poolDrop deletes a warm home the pool no longer wants.
	poolDrop prebuildKind = "unfill"
)

// prebuildAction is one step of a plan.
type prebuildAction struct {
	Kind        prebuildKind
	PrebuildID  string
	Template    string
	WorkspaceID string
	ArchiveKey  string
	Commit      string
	Message     string
}

// prebuildTemplate is a configured template with prebuilds.
type prebuildTemplate struct {
	Name, Version string
	Every         time.Duration
	Keep          int
	// Prebuilds: the template has a prebuild block. Warm is its pool's
	// size.
	Prebuilds bool
	Warm      int
}

// prebuildRow is a prebuild with its builder as read this pass (nil when
// none, or deleted).
type prebuildRow struct {
	store.Prebuild
	Builder *workspace.Workspace
}

// planPrebuilds decides a pass. rows are every prebuild, each template's
// newest first; pool every warm home, oldest first.
func planPrebuilds(templates []prebuildTemplate, rows []prebuildRow, pool []workspace.Workspace, now time.Time, cfg PrebuildConfig) []prebuildAction {
	var out []prebuildAction
	byTemplate := map[string][]prebuildRow{}
	for _, r := range rows {
		byTemplate[r.Template] = append(byTemplate[r.Template], r)
	}
	homes := map[string][]workspace.Workspace{}
	for _, w := range pool {
		homes[deref(w.PoolOf)] = append(homes[deref(w.PoolOf)], w)
	}
	prebuilds, warm := map[string]bool{}, map[string]bool{}
	building, filling := 0, 0
	for _, r := range rows {
		if r.Status == store.PrebuildBuilding {
			building++
		}
	}
	for _, w := range pool {
		if !workspace.PoolReady(w) {
			filling++
		}
	}
	for _, t := range templates {
		if t.Prebuilds {
			prebuilds[t.Name] = true
			acts, starts := planTemplate(t, byTemplate[t.Name], now, cfg, building < cfg.MaxBuilding)
			building += starts
			out = append(out, acts...)
		}
		if t.Warm > 0 {
			warm[t.Name] = true
			acts, fills := planPool(t, homes[t.Name], newestReady(t, byTemplate[t.Name]), max(cfg.MaxFilling-filling, 0))
			filling += fills
			out = append(out, acts...)
		}
	}
	for _, r := range rows {
		if !prebuilds[r.Template] {
			out = append(out, drop(r, "its template has no prebuilds any more"))
		}
	}
	for _, w := range pool {
		if !warm[deref(w.PoolOf)] {
			out = append(out, prebuildAction{Kind: poolDrop, Template: deref(w.PoolOf), WorkspaceID: w.ID, Message: "its template keeps no warm homes any more"})
		}
	}
	return out
}

// newestReady is the id of the newest READY prebuild of t's current
// version: what new warm homes hold. Nil when there is none.
func newestReady(t prebuildTemplate, rows []prebuildRow) *string {
	for _, r := range rows {
		if r.Status == store.PrebuildReady && r.Version == t.Version {
			return &r.ID
		}
	}
	return nil
}

// planPool keeps t.Warm fresh homes in t's pool: made at the template's
// version from the newest prebuilt home. A home of another version, or in
// ERROR, goes at once; one holding an older prebuilt home (claims take
// fresh ones only) once enough fresh ones stand by. It makes at most room
// homes.
func planPool(t prebuildTemplate, homes []workspace.Workspace, newest *string, room int) ([]prebuildAction, int) {
	var out []prebuildAction
	unfill := func(w workspace.Workspace, why string) {
		out = append(out, prebuildAction{Kind: poolDrop, Template: t.Name, WorkspaceID: w.ID, Message: why})
	}
	var fresh, older []workspace.Workspace
	readyFresh := 0
	for _, w := range homes {
		switch {
		case w.Phase == workspace.PhaseError:
			unfill(w, "it failed")
		case w.TemplateVersion != t.Version:
			unfill(w, "made from another version of the template")
		case deref(w.FromPrebuild) != deref(newest):
			older = append(older, w)
		default:
			fresh = append(fresh, w)
			if workspace.PoolReady(w) {
				readyFresh++
			}
		}
	}
	if readyFresh >= t.Warm {
		for _, w := range older {
			unfill(w, "holds an older prebuilt home")
		}
	}
	// Too many (the pool shrank): the newest go first, unready before
	// ready.
	for i := len(fresh) - 1; i >= 0 && len(fresh) > t.Warm; i-- {
		if !workspace.PoolReady(fresh[i]) {
			unfill(fresh[i], "the pool is smaller now")
			fresh = append(fresh[:i], fresh[i+1:]...)
		}
	}
	for len(fresh) > t.Warm {
		unfill(fresh[len(fresh)-1], "the pool is smaller now")
		fresh = fresh[:len(fresh)-1]
	}
	fills := min(t.Warm-len(fresh), room)
	for range fills {
		out = append(out, prebuildAction{Kind: poolFill, Template: t.Name})
	}
	return out, max(fills, 0)
}

// planTemplate plans one template's prebuilds; mayStart says whether a
// build may begin (the bound on builds at once). It returns how many
// builds it starts.
func planTemplate(t prebuildTemplate, rows []prebuildRow, now time.Time, cfg PrebuildConfig, mayStart bool) ([]prebuildAction, int) {
	var out []prebuildAction
	var requested *prebuildRow
	var lastAttempt *prebuildRow // newest READY or FAILED of the current version
	buildingNow, readyKept, failedKept, haveReady := false, 0, 0, false
	for i := range rows {
		r := &rows[i]
		switch r.Status {
		case store.PrebuildBuilding:
			buildingNow = true
			out = append(out, planBuilding(*r, now, cfg)...)
		case store.PrebuildRequested:
			if requested == nil {
				requested = r
			}
		case store.PrebuildReady:
			if r.Version == t.Version {
				haveReady = true
			}
			if lastAttempt == nil && r.Version == t.Version {
				lastAttempt = r
			}
		case store.PrebuildFailed:
			if lastAttempt == nil && r.Version == t.Version {
				lastAttempt = r
			}
		}
	}
	// Retention: the newest Keep homes of the current version; those of
	// other versions only until the current one has one (a template
	// changed back finds its homes again meanwhile).
	for _, r := range rows {
		switch r.Status {
		case store.PrebuildReady:
			if r.Version == t.Version {
				readyKept++
				if readyKept > t.Keep {
					out = append(out, drop(r, "older than the template's newest kept"))
				}
			} else if haveReady {
				out = append(out, drop(r, "made from another version of the template"))
			}
		case store.PrebuildFailed:
			failedKept++
			if failedKept > cfg.KeepFailed {
				out = append(out, drop(r, "an old failure"))
			}
		}
	}
	if buildingNow || !mayStart {
		return out, 0
	}
	due := requested != nil || lastAttempt == nil ||
		(t.Every > 0 && lastAttempt.FinishedAt != nil && now.Sub(*lastAttempt.FinishedAt) >= t.Every)
	if !due {
		return out, 0
	}
	a := prebuildAction{Kind: prebuildBuild, Template: t.Name}
	if requested != nil {
		a.PrebuildID = requested.ID
	}
	return append(out, a), 1
}

// planBuilding follows one build through its builder workspace.
func planBuilding(r prebuildRow, now time.Time, cfg PrebuildConfig) []prebuildAction {
	w := r.Builder
	fail := func(msg string) []prebuildAction {
		a := prebuildAction{Kind: prebuildFail, PrebuildID: r.ID, Template: r.Template, Message: msg}
		if w != nil {
			a.WorkspaceID = w.ID
		}
		return []prebuildAction{a}
	}
	switch {
	case w == nil:
		return fail("its builder workspace was deleted")
	case w.Phase == workspace.PhaseError:
		// A failed clone or init (BuildFailed) ends it at once; other
		// failures (placement, S3) were retried as for any workspace.
		msg := "the build failed"
		if w.ErrorMessage != nil {
			msg = *w.ErrorMessage
		} else if w.ErrorReason != nil {
			msg = *w.ErrorReason
		}
		return fail(msg)
	case w.Phase == workspace.PhaseArchived && w.ArchiveKey != nil:
		commit, _ := archive.PrebuildCommit(*w.ArchiveKey)
		return []prebuildAction{{Kind: prebuildReady, PrebuildID: r.ID, Template: r.Template, WorkspaceID: w.ID, ArchiveKey: *w.ArchiveKey, Commit: commit}}
	case r.StartedAt != nil && now.Sub(*r.StartedAt) > cfg.BuildTimeout:
		return fail(fmt.Sprintf("no prebuilt home after %s", cfg.BuildTimeout))
	}
	return nil
}

func drop(r prebuildRow, why string) prebuildAction {
	a := prebuildAction{Kind: prebuildDrop, PrebuildID: r.ID, Template: r.Template, Message: why}
	if r.Builder != nil {
		a.WorkspaceID = r.Builder.ID
	}
	return a
}

// PrebuildResult reports one pass: the actions taken.
type PrebuildResult struct {
	Actions []prebuildAction
}

// RunOnce reads the prebuilds and their builders, plans and acts. An
// action that fails is logged and left for the next pass; the others go
// on.
func (r *PrebuildRunner) RunOnce(ctx context.Context) (PrebuildResult, error) {
	var templates []prebuildTemplate
	for _, name := range r.templates.TemplateNames() {
		t, ok := r.templates.Template(name)
		if !ok || (t.Prebuild == nil && t.Warm == 0) {
			continue
		}
		pt := prebuildTemplate{Name: name, Version: t.Version(), Prebuilds: t.Prebuild != nil, Warm: t.Warm}
		if t.Prebuild != nil {
			pt.Every, pt.Keep = t.Prebuild.Every, t.Prebuild.Keep
		}
		templates = append(templates, pt)
	}
	list, err := store.ListPrebuilds(ctx, r.pool)
	if err != nil {
		return PrebuildResult{}, err
	}
	rows := make([]prebuildRow, 0, len(list))
	for _, p := range list {
		row := prebuildRow{Prebuild: p}
		if p.WorkspaceID != nil {
			w, err := r.svc.Reread(ctx, *p.WorkspaceID)
			switch {
			case errors.Is(err, workspace.ErrNotFound):
			case err != nil:
				return PrebuildResult{}, err
			case w.DeletedAt == nil:
				row.Builder = &w
			}
		}
		rows = append(rows, row)
	}
	pool, err := r.svc.PoolHomes(ctx)
	if err != nil {
		return PrebuildResult{}, err
	}
	r.cfg.Metrics.prebuildPass(templates, rows, pool)
	plan := planPrebuilds(templates, rows, pool, r.now(), r.cfg)
	var res PrebuildResult
	for _, a := range plan {
		if err := r.act(ctx, a); err != nil {
			if ctx.Err() != nil {
				return res, ctx.Err()
			}
			r.logger.Warn("prebuild action failed", "action", a.Kind, "prebuild_id", a.PrebuildID, "template", a.Template, "error", err)
			continue
		}
		res.Actions = append(res.Actions, a)
	}
	return res, nil
}

func (r *PrebuildRunner) act(ctx context.Context, a prebuildAction) error {
	log := r.logger.With("template", a.Template)
	if a.PrebuildID != "" {
		log = log.With("prebuild_id", a.PrebuildID)
	}
	switch a.Kind {
	case prebuildBuild:
		id := a.PrebuildID
		if id == "" {
			id = workspace.NewID()
		}
		_, err := r.svc.CreateBuilder(ctx, a.Template, id)
		return err
	case prebuildReady:
		key := a.ArchiveKey
		var commit *string
		if a.Commit != "" {
			commit = &a.Commit
		}
		if err := store.FinishPrebuild(ctx, r.pool, a.PrebuildID, &key, commit, ""); err != nil {
			return err
		}
		log.Info("prebuild ready", "archive_key", key, "commit", a.Commit)
	case prebuildFail:
		if err := store.FinishPrebuild(ctx, r.pool, a.PrebuildID, nil, nil, a.Message); err != nil {
			return err
		}
		log.Warn("prebuild failed", "why", a.Message, "workspace_id", a.WorkspaceID)
		return r.deleteWorkspace(ctx, a.WorkspaceID)
	case prebuildDrop:
		if err := r.deleteWorkspace(ctx, a.WorkspaceID); err != nil {
			return err
		}
		if err := store.DeletePrebuild(ctx, r.pool, a.PrebuildID); err != nil {
			return err
		}
		log.Info("prebuild dropped", "why", a.Message)
	case poolFill:
		_, err := r.svc.CreatePoolHome(ctx, a.Template)
		return err
	case poolDrop:
		if err := r.deleteWorkspace(ctx, a.WorkspaceID); err != nil {
			return err
		}
		log.Info("warm home dropped", "workspace_id", a.WorkspaceID, "why", a.Message)
	default:
		return fmt.Errorf("unknown prebuild action %q", a.Kind)
	}
	return nil
}

func (r *PrebuildRunner) deleteWorkspace(ctx context.Context, id string) error {
	if id == "" {
		return nil
	}
	if err := r.svc.Delete(ctx, id); err != nil && !errors.Is(err, workspace.ErrNotFound) {
		return err
	}
	return nil
}
