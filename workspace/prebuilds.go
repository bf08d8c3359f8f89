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
	if t.Prebuild == nil || !defaultValues(t, values) {
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

// defaultValues reports whether values are every parameter's default:
// what prebuilt and warm homes are made with.
func defaultValues(t *config.Template, values map[string]any) bool {
	defaults, err := t.ParameterValues(nil)
	return err == nil && maps.Equal(defaults, values)
}

// BuilderName is the name of the workspace building prebuild id of
// template: what the Nomad UI and the admin pages show of it.
func BuilderName(template, id string) string {
	return "prebuild-" + template + "-" + id[len(id)-8:]
}

// systemRow is a new workspace of template owned by store.PrebuildOwnerID,
// with every parameter's default: a builder or a warm home.
func (s *Service) systemRow(template string) (store.NewWorkspace, *config.Template, error) {
	row, err := s.newFromTemplate(CreateRequest{Template: template, Creator: Creator{Admin: true, Groups: []string{config.GroupAdmins}}})
	if err != nil {
		return store.NewWorkspace{}, nil, err
	}
	t, _ := s.template(template)
	row.ID, row.OwnerID = NewID(), store.PrebuildOwnerID
	return row, t, nil
}

// CreateBuilder creates the workspace that builds prebuild id of template
// at its current version: owned by store.PrebuildOwnerID, with the
// template's default parameters, and asked to be archived: it never runs,
// its volume is made and archived by one job that first clones and runs
// init (controller.JobSpec.Build). The prebuild becomes BUILDING in the
// same transaction.
func (s *Service) CreateBuilder(ctx context.Context, template, id string) (Workspace, error) {
	row, t, err := s.systemRow(template)
	if err != nil {
		return Workspace{}, fmt.Errorf("builder of prebuild %s: %w", id, err)
	}
	if t.Prebuild == nil {
		return Workspace{}, fmt.Errorf("%w: template %q has no prebuild", ErrInvalidState, template)
	}
	row.Name = BuilderName(template, id)
	row.Description = fmt.Sprintf("Builds a prebuilt home of template %s (prebuild %s).", template, id)
	row.DesiredState, row.PrebuildOf = string(DesiredArchived), &id
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

// PoolName is the name of a home of template's warm pool.
func PoolName(template, id string) string {
	return "warm-" + template + "-" + id[len(id)-8:]
}

// CreatePoolHome adds a home to template's warm pool: a workspace owned by
// store.PrebuildOwnerID with the default parameters, asked to stand by, so
// its volume is provisioned and filled from the newest prebuilt home of
// the template's version (left empty without one), and its program never
// runs. A creation claims it (store.ClaimPoolWorkspace); until then it is
// nobody's home.
func (s *Service) CreatePoolHome(ctx context.Context, template string) (Workspace, error) {
	row, t, err := s.systemRow(template)
	if err != nil {
		return Workspace{}, fmt.Errorf("warm home of %s: %w", template, err)
	}
	values, _ := row.Parameters.(map[string]any)
	pb, err := prebuiltHome(ctx, s.pool, t, values)
	if err != nil {
		return Workspace{}, err
	}
	if pb != nil {
		row.ArchiveKey, row.FromPrebuild = pb.ArchiveKey, &pb.ID
	}
	row.Name = PoolName(template, row.ID)
	row.Description = fmt.Sprintf("A warm home of template %s, ready for the next workspace created.", template)
	row.DesiredState, row.PoolOf = string(DesiredStandby), &template
	w, err := store.InsertWorkspace[Workspace](ctx, s.pool, row)
	if err != nil {
		return Workspace{}, fmt.Errorf("create a warm home of %s: %w", template, err)
	}
	s.logger.Info("warm home added", "template", template, "workspace_id", w.ID, "prebuild", deref(w.FromPrebuild))
	return w, nil
}

// PoolHomes lists every live home of the warm pools.
func (s *Service) PoolHomes(ctx context.Context) ([]Workspace, error) {
	ws, err := store.ListPoolWorkspaces[Workspace](ctx, s.pool)
	if err != nil {
		return nil, fmt.Errorf("list warm homes: %w", err)
	}
	return ws, nil
}

// PoolReady reports a warm home a creation may claim: standing by on its
// volume, nothing under way, no failure (store.ClaimPoolWorkspace asks
// the same of the row).
func PoolReady(w Workspace) bool {
	return w.Phase == PhaseStandby && w.Operation == OpNone && w.ErrorCount == 0
}

// PoolLevel is how full one template's warm pool is.
type PoolLevel struct {
	Template string `json:"template"`
	// Warm is the pool's size; Ready the homes a creation may claim now;
	// Filling those being made (provisioned, restored).
	Warm    int `json:"warm"`
	Ready   int `json:"ready"`
	Filling int `json:"filling"`
}

// PoolLevels says how full each template's warm pool is.
func (s *Service) PoolLevels(ctx context.Context) ([]PoolLevel, error) {
	homes, err := s.PoolHomes(ctx)
	if err != nil {
		return nil, err
	}
	out := []PoolLevel{}
	if s.opts.Templates == nil {
		return out, nil
	}
	for _, name := range s.opts.Templates.TemplateNames() {
		t, ok := s.template(name)
		if !ok || t.Warm == 0 {
			continue
		}
		l := PoolLevel{Template: name, Warm: t.Warm}
		for _, w := range homes {
			switch {
			case deref(w.PoolOf) != name:
			case PoolReady(w):
				l.Ready++
			default:
				l.Filling++
			}
		}
		out = append(out, l)
	}
	return out, nil
}
