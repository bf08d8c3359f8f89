package api

import (
	"context"
	"net/http"

	"github.com/codehub-io/codehub/audit"
	"github.com/codehub-io/codehub/store"
	"github.com/codehub-io/codehub/workspace"
)

// templateView is a template as a user may choose it (docs/api.md):
// its parameters as a JSON Schema object.
type templateView struct {
	Name        string         `json:"name"`
	Description string         `json:"description"`
	Version     string         `json:"version"`
	Image       string         `json:"image"`
	CPU         int            `json:"cpu"`
	Memory      int            `json:"memory"`
	MemoryMax   int            `json:"memory_max"`
	Parameters  map[string]any `json:"parameters"`
}

type templateList struct {
	Templates []templateView `json:"templates"`
}

// listTemplates answers which templates the user may create workspaces
// of, default first.
func (s *Server) listTemplates(w http.ResponseWriter, r *http.Request) {
	sess, ok := s.requireUser(w, r)
	if !ok {
		return
	}
	creator, err := s.creator(r.Context(), sess)
	if err != nil {
		s.fail(w, "read the user's groups", err)
		return
	}
	list := templateList{Templates: []templateView{}}
	for _, t := range s.workspaces.Templates(creator) {
		list.Templates = append(list.Templates, templateView{
			Name: t.Name, Description: t.Description, Version: t.Version(), Image: t.Image,
			CPU: t.CPU, Memory: t.Memory, MemoryMax: t.MemoryMax, Parameters: t.Schema(),
		})
	}
	writeJSON(w, http.StatusOK, list)
}

type templateUsage struct {
	Templates []templateCountView `json:"templates"`
	// Prebuilds are every template's prebuilt homes, newest first.
	Prebuilds []store.Prebuild `json:"prebuilds"`
	// Pools say how full each template's warm pool is.
	Pools []workspace.PoolLevel `json:"pools"`
}

// templateCountView counts the live workspaces of one template version;
// Current tells whether that is the version a start runs now.
type templateCountView struct {
	workspace.TemplateCount
	Current bool `json:"current"`
}

// adminTemplateUsage counts workspaces per template and version.
func (s *Server) adminTemplateUsage(w http.ResponseWriter, r *http.Request) {
	if _, ok := s.requireAdmin(w, r); !ok {
		return
	}
	counts, err := s.workspaces.TemplateUsage(r.Context())
	if err != nil {
		WriteError(w, serviceError(s.logger, err))
		return
	}
	out := templateUsage{Templates: make([]templateCountView, 0, len(counts))}
	for _, c := range counts {
		current, ok := s.workspaces.TemplateVersion(c.Template)
		out.Templates = append(out.Templates, templateCountView{TemplateCount: c, Current: ok && current == c.Version})
	}
	if out.Prebuilds, err = store.ListPrebuilds(r.Context(), s.pool); err != nil {
		s.fail(w, "list prebuilds", err)
		return
	}
	if out.Pools, err = s.workspaces.PoolLevels(r.Context()); err != nil {
		s.fail(w, "read the warm pools", err)
		return
	}
	for i := range out.Prebuilds {
		out.Prebuilds[i].CreatedAt = out.Prebuilds[i].CreatedAt.UTC()
		out.Prebuilds[i].StartedAt = utc(out.Prebuilds[i].StartedAt)
		out.Prebuilds[i].FinishedAt = utc(out.Prebuilds[i].FinishedAt)
	}
	writeJSON(w, http.StatusOK, out)
}

// requestPrebuild asks for a prebuild of a template now; one already
// asked for and not begun is answered instead of a second.
func (s *Server) requestPrebuild(w http.ResponseWriter, r *http.Request) {
	sess, ok := s.requireAdmin(w, r)
	if !ok {
		return
	}
	name := r.PathValue("name")
	target := audit.Target{Type: audit.TargetTemplate, Name: name}
	p, err := s.workspaces.RequestPrebuild(r.Context(), name, sess.Username)
	if err != nil {
		e := serviceError(s.logger, err)
		s.record(r, s.actor(r, sess), audit.ActionTemplatePrebuild, target, e)
		WriteError(w, e)
		return
	}
	e := audit.Event{Actor: s.actor(r, sess), Action: audit.ActionTemplatePrebuild, Target: target, Outcome: audit.Success, Detail: "prebuild " + p.ID}
	s.audit.Record(r.Context(), e)
	p.CreatedAt = p.CreatedAt.UTC()
	writeJSON(w, http.StatusAccepted, p)
}

// templateOutdated reports a workspace whose last start ran another
// version of its template than a start would run now.
func (s *Server) templateOutdated(w workspace.Workspace) bool {
	current, ok := s.workspaces.TemplateVersion(w.Template)
	return w.TemplateVersion != "" && (!ok || current != w.TemplateVersion)
}

// creator is the session's user as the templates' access rules see them:
// name, admin flag and the groups of their last single sign-on.
func (s *Server) creator(ctx context.Context, sess store.Session) (workspace.Creator, error) {
	groups, err := store.Groups(ctx, s.pool, sess.UserID)
	if err != nil {
		return workspace.Creator{}, err
	}
	return workspace.Creator{Username: sess.Username, Admin: sess.IsAdmin, Groups: groups}, nil
}
