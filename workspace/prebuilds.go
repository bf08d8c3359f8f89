package workspace

import (
	"context"
	"errors"
	"fmt"
	"maps"

	"github.com/jackc/pgx/v5"

	"github.com/codehub-io/codehub/config"
	"github.com/codehub-io/codehub/store"
)

// prebuiltHome finds the prebuilt home a new workspace of t with values
// starts from: the newest READY prebuild of t's current version, when t
// has prebuilds and values are the defaults a prebuild is made with. Nil
// when there is none: the workspace's first start clones.
func prebuiltHome(ctx context.Context, q store.Querier, t *config.Template, values map[string]any) (*store.Prebuild, error) {
	if t.Prebuild == nil {
		return nil, nil
	}
	defaults, err := t.ParameterValues(nil)
	if err != nil || !maps.Equal(defaults, values) {
		return nil, nil
	}
	p, err := store.NewestReadyPrebuild(ctx, q, t.Name, t.Version())
	if errors.Is(err, store.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return &p, nil
}

// BuilderName is the name of the workspace building prebuild id of
// template: what the Nomad UI and the admin pages show of it.
func BuilderName(template, id string) string {
	return "prebuild-" + template + "-" + id[len(id)-8:]
}

// CreateBuilder creates the workspace that builds prebuild id of template
// at its current version: owned by store.PrebuildOwnerID, with the
// template's default parameters, asked to run (its first start clones and
// runs init), and not held by the running limits. The prebuild becomes
// BUILDING in the same transaction.
func (s *Service) CreateBuilder(ctx context.Context, template, id string) (Workspace, error) {
	row, err := s.newFromTemplate(CreateRequest{Template: template, Creator: Creator{Admin: true, Groups: []string{config.GroupAdmins}}})
	if err != nil {
		return Workspace{}, fmt.Errorf("builder of prebuild %s: %w", id, err)
	}
	t, _ := s.template(template)
	if t.Prebuild == nil {
		return Workspace{}, fmt.Errorf("%w: template %q has no prebuild", ErrInvalidState, template)
	}
	row.ID, row.OwnerID, row.Name = NewID(), store.PrebuildOwnerID, BuilderName(template, id)
	row.Description = fmt.Sprintf("Builds a prebuilt home of template %s (prebuild %s).", template, id)
	row.DesiredState, row.PrebuildOf = string(DesiredRunning), &id
	var w Workspace
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var err error
		if w, err = store.InsertWorkspace[Workspace](ctx, tx, row); err != nil {
			return err
		}
		return store.StartPrebuild(ctx, tx, id, template, row.TemplateVersion, w.ID)
	})
	if err != nil {
		return Workspace{}, fmt.Errorf("create the builder of prebuild %s: %w", id, err)
	}
	s.logger.Info("prebuild started", "prebuild_id", id, "template", template, "version", row.TemplateVersion, "workspace_id", w.ID)
	return w, nil
}

// RequestPrebuild asks for a prebuild of template now (an admin's
// request): the prebuild runner starts it at its next pass, once the
// template's current build, if any, is done. A request already waiting is
// returned instead of a second. A template without prebuilds is
// ErrInvalidState; an unknown one an InputError.
func (s *Service) RequestPrebuild(ctx context.Context, template, by string) (store.Prebuild, error) {
	t, ok := s.template(template)
	if !ok {
		return store.Prebuild{}, fmt.Errorf("%w: template %q", ErrNotFound, template)
	}
	if t.Prebuild == nil {
		return store.Prebuild{}, fmt.Errorf("%w: template %q has no prebuild block", ErrInvalidState, template)
	}
	p, err := store.RequestPrebuild(ctx, s.pool, NewID(), template, t.Version(), by)
	if err != nil {
		return store.Prebuild{}, err
	}
	s.logger.Info("prebuild requested", "template", template, "prebuild_id", p.ID, "by", by)
	return p, nil
}
