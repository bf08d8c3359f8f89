package api

import (
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/codehub-io/codehub/audit"
	"github.com/codehub-io/codehub/proxy"
	"github.com/codehub-io/codehub/store"
	"github.com/codehub-io/codehub/workspace"
)

// DefaultAuditRetention is how long audit events are kept when Options
// says nothing.
const DefaultAuditRetention = 90 * 24 * time.Hour

// actor is who a request acts as: the session's user (through a token,
// when one authenticated it), from the client's address.
func (s *Server) actor(r *http.Request, sess store.Session) audit.Actor {
	return audit.Actor{UserID: sess.UserID, Username: sess.Username, TokenID: sess.TokenID, Address: clientAddress(r, s.opts.TrustedProxies)}
}

// record appends an event whose outcome follows err: success when nil,
// failure with err's message for the client (never an internal error's
// text) otherwise.
func (s *Server) record(r *http.Request, actor audit.Actor, action string, target audit.Target, err error) {
	e := audit.Event{Actor: actor, Action: action, Target: target, Outcome: audit.Success}
	if err != nil {
		e.Outcome = audit.Failure
		e.Detail = failureDetail(err)
	}
	s.audit.Record(r.Context(), e)
}

// failureDetail says why an action failed in the words the client got;
// anything but an API error is an internal one, whose text stays in the
// server's log.
func failureDetail(err error) string {
	var apiErr *Error
	if errors.As(err, &apiErr) {
		return apiErr.Message
	}
	return "internal error"
}

// recordWorkspace records an action of the session's user on a workspace;
// e is the error the client gets, nil on success.
func (s *Server) recordWorkspace(r *http.Request, sess store.Session, action string, ws workspace.Workspace, e *Error) {
	var err error
	if e != nil {
		err = e
	}
	s.record(r, s.actor(r, sess), action, workspaceTarget(ws), err)
}

// desiredAction names what setting desired on ws does: RUNNING brings an
// archived (or archiving) workspace back from its archive, a restore, and
// starts any other.
func desiredAction(ws workspace.Workspace, desired workspace.DesiredState) string {
	switch desired {
	case workspace.DesiredStandby:
		return audit.ActionWorkspaceStop
	case workspace.DesiredArchived:
		return audit.ActionWorkspaceArchive
	}
	if ws.Phase == workspace.PhaseArchived || ws.DesiredState == workspace.DesiredArchived {
		return audit.ActionWorkspaceRestore
	}
	return audit.ActionWorkspaceStart
}

func workspaceTarget(w workspace.Workspace) audit.Target {
	return audit.Target{Type: audit.TargetWorkspace, ID: w.ID, Name: w.Name}
}

func userTarget(u store.User) audit.Target {
	return audit.Target{Type: audit.TargetUser, ID: u.ID, Name: u.Username}
}

// auditEventView is one audit event as the API shows it (docs/api.md).
type auditEventView struct {
	ID      int64       `json:"id"`
	At      time.Time   `json:"at"`
	Actor   actorView   `json:"actor"`
	Action  string      `json:"action"`
	Target  *targetView `json:"target"`
	Outcome string      `json:"outcome"`
	Detail  string      `json:"detail"`
}

type actorView struct {
	UserID   string `json:"user_id"`
	Username string `json:"username"`
	TokenID  string `json:"token_id"`
	Address  string `json:"address"`
}

type targetView struct {
	Type string `json:"type"`
	ID   string `json:"id"`
	Name string `json:"name"`
}

type auditPage struct {
	Events []auditEventView `json:"events"`
	Next   *string          `json:"next"`
}

func (s *Server) listAudit(w http.ResponseWriter, r *http.Request) {
	if _, ok := s.requireAdmin(w, r); !ok {
		return
	}
	f, e := auditFilter(r)
	if e != nil {
		WriteError(w, e)
		return
	}
	limit := f.Limit
	f.Limit++
	events, err := s.audit.List(r.Context(), f)
	if err != nil {
		s.fail(w, "list audit events", err)
		return
	}
	page := auditPage{Events: make([]auditEventView, 0, len(events))}
	if len(events) > limit {
		events = events[:limit]
		next := strconv.FormatInt(events[limit-1].ID, 10)
		page.Next = &next
	}
	for _, ev := range events {
		v := auditEventView{
			ID: ev.ID, At: ev.At.UTC(), Action: ev.Action, Outcome: string(ev.Outcome), Detail: ev.Detail,
			Actor: actorView{ev.Actor.UserID, ev.Actor.Username, ev.Actor.TokenID, ev.Actor.Address},
		}
		if ev.Target.Type != "" {
			v.Target = &targetView{ev.Target.Type, ev.Target.ID, ev.Target.Name}
		}
		page.Events = append(page.Events, v)
	}
	writeJSON(w, http.StatusOK, page)
}

// auditFilter reads ?user_id=, ?workspace_id=, ?since=, ?until=, ?limit=
// and ?before=.
func auditFilter(r *http.Request) (audit.Filter, *Error) {
	q := r.URL.Query()
	f := audit.Filter{UserID: q.Get("user_id"), WorkspaceID: q.Get("workspace_id"), Limit: defaultPageSize}
	invalid := func(field, message string) *Error {
		return &Error{Status: http.StatusBadRequest, Code: CodeInvalidInput, Field: field, Message: field + ": " + message}
	}
	if f.UserID != "" && !proxy.ValidID(f.UserID) {
		return f, invalid("user_id", "must be a user id")
	}
	if f.WorkspaceID != "" && !proxy.ValidID(f.WorkspaceID) {
		return f, invalid("workspace_id", "must be a workspace id")
	}
	for _, p := range []struct {
		name string
		dst  *time.Time
	}{{"since", &f.Since}, {"until", &f.Until}} {
		v := q.Get(p.name)
		if v == "" {
			continue
		}
		t, err := time.Parse(time.RFC3339, v)
		if err != nil {
			return f, invalid(p.name, "must be an RFC 3339 time like 2026-01-02T15:04:05Z")
		}
		*p.dst = t
	}
	if !f.Since.IsZero() && !f.Until.IsZero() && !f.Until.After(f.Since) {
		return f, invalid("until", "must be after since")
	}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > maxPageSize {
			return f, invalid("limit", "must be an integer from 1 to "+strconv.Itoa(maxPageSize))
		}
		f.Limit = n
	}
	if v := q.Get("before"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 1 {
			return f, invalid("before", "must be an event id")
		}
		f.BeforeID = n
	}
	return f, nil
}
