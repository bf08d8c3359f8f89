package workspace

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/codehub-io/codehub/config"
	"github.com/codehub-io/codehub/store"
)

// Templates are the kinds of workspace the operator configured;
// *config.Config is one.
type Templates interface {
	TemplateNames() []string
	Template(name string) (*config.Template, bool)
}

// template returns template name as configured now ("" is the default).
// Without configured templates there is only the default, running
// Options.DefaultImage.
func (s *Service) template(name string) (*config.Template, bool) {
	if name == "" {
		name = config.DefaultTemplate
	}
	if s.opts.Templates == nil {
		return &config.Template{Name: config.DefaultTemplate, Image: s.opts.DefaultImage,
			StandbyTTL: s.opts.Policy.StandbyTTL, ArchiveTTL: s.opts.Policy.ArchiveTTL}, name == config.DefaultTemplate
	}
	return s.opts.Templates.Template(name)
}

// Templates lists the templates a user may create workspaces of, default
// first.
func (s *Service) Templates(c Creator) []*config.Template {
	names := []string{config.DefaultTemplate}
	if s.opts.Templates != nil {
		names = s.opts.Templates.TemplateNames()
	}
	var out []*config.Template
	for _, name := range names {
		if t, ok := s.template(name); ok && t.Allows(c.Username, c.Admin, c.Groups) {
			out = append(out, t)
		}
	}
	return out
}

// TemplateVersion is the current version of template name; false when it
// is not configured any more.
func (s *Service) TemplateVersion(name string) (string, bool) {
	t, ok := s.template(name)
	if !ok {
		return "", false
	}
	return t.Version(), true
}

// Image is the image w runs at its next start: the one its owner chose,
// or else its template's.
func (s *Service) Image(w Workspace) string {
	if w.Image != "" {
		return w.Image
	}
	if t, ok := s.template(w.Template); ok {
		return t.Image
	}
	return ""
}

// Creator says who creates a workspace, for the templates' access rules.
type Creator struct {
	Username string
	Admin    bool
	// Groups are the user's groups from single sign-on.
	Groups []string
}

// newFromTemplate judges the template part of a create request and
// returns the row's template fields: the template, its version, the
// parameter values with defaults filled in, and the template's own idle
// timers where they differ from the operator's defaults.
func (s *Service) newFromTemplate(req CreateRequest) (store.NewWorkspace, error) {
	t, ok := s.template(req.Template)
	if !ok || !t.Allows(req.Creator.Username, req.Creator.Admin, req.Creator.Groups) {
		return store.NewWorkspace{}, &InputError{Field: "template", Message: fmt.Sprintf("no template %q you may use", req.Template)}
	}
	values, err := t.ParameterValues(req.Parameters)
	if perr, isParam := errors.AsType[*config.ParameterError](err); isParam {
		return store.NewWorkspace{}, &InputError{Field: "parameters." + perr.Name, Message: perr.Message}
	} else if err != nil {
		return store.NewWorkspace{}, err
	}
	row := store.NewWorkspace{Template: t.Name, TemplateVersion: t.Version(), Parameters: values}
	if t.StandbyTTL != s.opts.Policy.StandbyTTL {
		row.StandbyTTL = durationPtr(t.StandbyTTL)
	}
	if t.ArchiveTTL != s.opts.Policy.ArchiveTTL {
		row.ArchiveTTL = durationPtr(t.ArchiveTTL)
	}
	return row, nil
}

func durationPtr(d time.Duration) *time.Duration { return &d }

// TemplateCount is how many live workspaces were last started from (or
// created for) one version of a template.
type TemplateCount = store.TemplateCount

// TemplateUsage counts live workspaces per template and version.
func (s *Service) TemplateUsage(ctx context.Context) ([]TemplateCount, error) {
	counts, err := store.CountTemplates(ctx, s.pool)
	if err != nil {
		return nil, fmt.Errorf("count workspaces per template: %w", err)
	}
	return counts, nil
}
