package controller

import (
	"context"
	"fmt"
	"maps"

	"github.com/codehub-io/codehub/archive"
	"github.com/codehub-io/codehub/config"
	"github.com/codehub-io/codehub/store"
	"github.com/codehub-io/codehub/workspace"
)

// Templates finds what a workspace is made of by its template's name;
// *config.Config is one.
type Templates interface {
	Template(name string) (*config.Template, bool)
}

// templateVersion is the version a start of a workspace of template name
// runs; empty when the template is not configured.
func (cfg Config) templateVersion(name string) string {
	if cfg.Templates == nil {
		return ""
	}
	t, ok := cfg.Templates.Template(name)
	if !ok {
		return ""
	}
	return t.Version()
}

// workspaceSpec is what a start of w runs: its template as configured now
// with its owner's parameter values. A template that is no longer
// configured fails the start for good; the operator restores it, or an
// admin recovers the workspace once it is back.
func (c *WorkspaceController) workspaceSpec(ctx context.Context, w workspace.Workspace) (WorkspaceSpec, error) {
	if c.cfg.Templates == nil {
		return WorkspaceSpec{WorkspaceID: w.ID, RunID: w.RunID, OwnerID: w.OwnerID, Image: w.Image, Name: w.Name,
			ParentArchive: ownArchive(w)}, nil
	}
	t, ok := c.cfg.Templates.Template(w.Template)
	if !ok {
		return WorkspaceSpec{}, &Failure{Reason: workspace.ReasonStartFailed, Terminal: true,
			Message: fmt.Sprintf("template %q is not configured any more", w.Template)}
	}
	spec := SpecFromTemplate(w, t, c.cfg.UpstreamAuth)
	spec.ParentArchive = ownArchive(w)
	owner, err := store.GetFirstStartSettings(ctx, c.pool, w.OwnerID)
	if err != nil {
		return WorkspaceSpec{}, fmt.Errorf("read first-start settings of %s: %w", w.OwnerID, err)
	}
	spec.Dotfiles, spec.GitToken = owner.DotfilesRepository, owner.GitCredential
	return spec, nil
}

// SpecFromTemplate is the spec of a start of w from template t;
// upstreamAuth is the workspace block's, which decides the arguments.
func SpecFromTemplate(w workspace.Workspace, t *config.Template, upstreamAuth string) WorkspaceSpec {
	spec := WorkspaceSpec{WorkspaceID: w.ID, RunID: w.RunID, OwnerID: w.OwnerID, Image: w.Image, Name: w.Name}
	if spec.Image == "" {
		spec.Image = t.Image
	}
	spec.Entrypoint = t.Entrypoint
	spec.Command = t.Command
	spec.Args = config.ProgramArgs(upstreamAuth, t.Args)
	spec.CPU, spec.Memory, spec.MemoryMax = t.CPU, t.Memory, t.MemoryMax
	spec.Env = maps.Clone(t.Env)
	if spec.Env == nil {
		spec.Env = map[string]string{}
	}
	spec.UserEnv = t.ParameterEnv(w.Parameters)
	spec.Repository = t.Repository(w.Parameters)
	if t.Prebuild != nil {
		spec.Init = t.Prebuild.Init
	}
	return spec
}

// buildSpec is what the prebuild of builder w builds: its template's
// repository and init, as configured now, owned by nobody's dotfiles or
// credential. A template changed since the build was asked for fails it
// for good: the prebuild runner asks for one of the new version.
func (c *WorkspaceController) buildSpec(w workspace.Workspace) (*WorkspaceSpec, error) {
	t, ok := c.cfg.Templates.Template(w.Template)
	switch {
	case !ok:
		return nil, &Failure{Reason: workspace.ReasonBuildFailed, Terminal: true,
			Message: fmt.Sprintf("template %q is not configured any more", w.Template)}
	case t.Version() != w.TemplateVersion:
		return nil, &Failure{Reason: workspace.ReasonBuildFailed, Terminal: true,
			Message: fmt.Sprintf("template %q changed since its prebuild was asked for", w.Template)}
	}
	spec := SpecFromTemplate(w, t, c.cfg.UpstreamAuth)
	return &spec, nil
}

// ownArchive is the archive a stop archive of w may build on: its
// archive_key when w made it. A home restored from a prebuild builds on
// nothing, so no archive of w ever needs one of the prebuild's objects and
// the prebuild can go whenever its template's retention says.
func ownArchive(w workspace.Workspace) string {
	key := deref(w.ArchiveKey)
	if !archive.OwnedBy(key, w.ID) {
		return ""
	}
	return key
}
