package api

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/codehub-io/codehub/archive"
	"github.com/codehub-io/codehub/audit"
	"github.com/codehub-io/codehub/config"
	"github.com/codehub-io/codehub/proxy"
	"github.com/codehub-io/codehub/store"
	"github.com/codehub-io/codehub/workspace"
)

// WorkspaceService is the part of the workspace service layer the API uses.
type WorkspaceService interface {
	Create(ctx context.Context, req workspace.CreateRequest) (workspace.Created, error)
	Get(ctx context.Context, id string) (workspace.Workspace, error)
	List(ctx context.Context, f workspace.ListFilter) ([]workspace.Workspace, error)
	Update(ctx context.Context, id string, req workspace.UpdateRequest) (workspace.Workspace, error)
	SetDesired(ctx context.Context, id string, desired workspace.DesiredState, by workspace.Cause) (workspace.Workspace, error)
	Delete(ctx context.Context, id string) error
	Recover(ctx context.Context, id string) (workspace.Workspace, error)
	RestoreElsewhere(ctx context.Context, id, confirm string) (workspace.Workspace, error)
	Running(ctx context.Context, ownerID string) ([]workspace.Workspace, error)
	KeepRunning(ctx context.Context, id string, d time.Duration) (workspace.Workspace, error)
	SetAutostart(ctx context.Context, id string, sched *workspace.Schedule) (workspace.Workspace, error)
	Timers(w workspace.Workspace) workspace.Timers
	Archives(ctx context.Context, id string) ([]workspace.Archive, error)
	OpenArchive(ctx context.Context, id, archiveID string) (io.ReadCloser, workspace.Archive, error)
	Images() []string
	Templates(c workspace.Creator) []*config.Template
	TemplateVersion(name string) (string, bool)
	TemplateUsage(ctx context.Context) ([]workspace.TemplateCount, error)
	RequestPrebuild(ctx context.Context, template, by string) (store.Prebuild, error)
	PoolLevels(ctx context.Context) ([]workspace.PoolLevel, error)
	Image(w workspace.Workspace) string
}

// Page sizes of the list endpoints.
const (
	defaultPageSize = 50
	maxPageSize     = 200
)

// workspaceView is a workspace as the API shows it (docs/api.md).
type workspaceView struct {
	ID           string                 `json:"id"`
	OwnerID      string                 `json:"owner_id"`
	Name         string                 `json:"name"`
	Description  string                 `json:"description"`
	Image        string                 `json:"image"`
	Phase        string                 `json:"phase"`
	DesiredState workspace.DesiredState `json:"desired_state"`
	Operation    workspace.Operation    `json:"operation"`
	// Backup: the ARCHIVING under way is a backup, which keeps the home in
	// its volume.
	Backup       bool                 `json:"backup,omitempty"`
	Conditions   workspace.Conditions `json:"conditions"`
	ErrorReason  *string              `json:"error_reason"`
	ErrorMessage *string              `json:"error_message"`
	// ErrorStep names the step the failure happened in (workspace.FailedStep).
	ErrorStep string `json:"error_step,omitempty"`
	// ErrorCount is the failed attempts in a row; NextAttemptAt when the
	// engine tries again after the last one.
	ErrorCount    int        `json:"error_count"`
	NextAttemptAt *time.Time `json:"next_attempt_at"`
	LastAccessAt  time.Time  `json:"last_access_at"`
	// The idle timers: when the workspace stops and is archived if left
	// alone, the timers it uses, and who last set its desired state.
	Autostart         *autostartView  `json:"autostart"`
	NextAutostartAt   *time.Time      `json:"next_autostart_at"`
	StopsAt           *time.Time      `json:"stops_at"`
	ArchivesAt        *time.Time      `json:"archives_at"`
	KeepUntil         *time.Time      `json:"keep_until"`
	StandbyTTLSeconds int64           `json:"standby_ttl_seconds"`
	ArchiveTTLSeconds int64           `json:"archive_ttl_seconds"`
	DesiredBy         workspace.Cause `json:"desired_by"`
	DesiredAt         *time.Time      `json:"desired_at"`
	URL               string          `json:"url"`
	CreatedAt         time.Time       `json:"created_at"`
	UpdatedAt         time.Time       `json:"updated_at"`
	Version           int64           `json:"version"`
	// What the workspace is made of; TemplateOutdated: it last started
	// from an older version of its template than it would start from now.
	Template         string         `json:"template"`
	TemplateVersion  string         `json:"template_version"`
	TemplateOutdated bool           `json:"template_outdated"`
	Parameters       map[string]any `json:"parameters"`
	// FromPrebuild is the prebuild whose home the workspace started from.
	FromPrebuild *string `json:"from_prebuild"`
	// RecoveryPoint says what losing the home's node would cost: what the
	// home gained since recovery_point.archived_at, unless current.
	RecoveryPoint workspace.Recovery `json:"recovery_point"`
}

func (s *Server) view(w workspace.Workspace) workspaceView {
	t := s.workspaces.Timers(w)
	v := workspaceView{
		ID: w.ID, OwnerID: w.OwnerID, Name: w.Name, Description: w.Description, Image: s.workspaces.Image(w),
		Phase: workspace.DisplayPhase(w), DesiredState: w.DesiredState, Operation: w.Operation,
		Backup:     workspace.BackingUp(w),
		Conditions: w.Conditions, ErrorReason: w.ErrorReason, ErrorMessage: w.ErrorMessage, ErrorStep: workspace.FailedStep(w),
		ErrorCount: w.ErrorCount, NextAttemptAt: utc(w.NextAttemptAt),
		LastAccessAt: w.LastAccessAt.UTC(), URL: s.sites.WorkspaceURL(w.ID),
		StopsAt: utc(t.StopsAt), ArchivesAt: utc(t.ArchivesAt), DesiredBy: w.DesiredBy, DesiredAt: utc(w.DesiredAt),
		StandbyTTLSeconds: int64(t.StandbyTTL / time.Second), ArchiveTTLSeconds: int64(t.ArchiveTTL / time.Second),
		CreatedAt: w.CreatedAt.UTC(), UpdatedAt: w.UpdatedAt.UTC(), Version: w.Version,
		Template: w.Template, TemplateVersion: w.TemplateVersion, TemplateOutdated: s.templateOutdated(w),
		Parameters: w.Parameters, FromPrebuild: w.FromPrebuild, RecoveryPoint: workspace.RecoveryOf(w),
	}
	if v.RecoveryPoint.ArchivedAt != nil {
		v.RecoveryPoint.ArchivedAt = utc(v.RecoveryPoint.ArchivedAt)
	}
	if v.Parameters == nil {
		v.Parameters = map[string]any{}
	}
	v.Autostart, v.NextAutostartAt = viewAutostart(w, time.Now())
	// A keep-running that has passed keeps nothing.
	if w.KeepUntil != nil && w.KeepUntil.After(time.Now()) {
		v.KeepUntil = utc(w.KeepUntil)
	}
	return v
}

func utc(t *time.Time) *time.Time {
	if t == nil {
		return nil
	}
	u := t.UTC()
	return &u
}

type workspacePage struct {
	Workspaces []workspaceView `json:"workspaces"`
	Next       *string         `json:"next"`
}

type createRequest struct {
	Name        string         `json:"name"`
	Description string         `json:"description"`
	Image       string         `json:"image"`
	Template    string         `json:"template"`
	Parameters  map[string]any `json:"parameters"`
}

type patchRequest struct {
	Name         *string `json:"name"`
	Description  *string `json:"description"`
	DesiredState *string `json:"desired_state"`
	// The workspace's own idle timers; 0 returns one to the default.
	StandbyTTLSeconds *int64         `json:"standby_ttl_seconds"`
	ArchiveTTLSeconds *int64         `json:"archive_ttl_seconds"`
	Autostart         autostartField `json:"autostart"`
}

// autostartView is an autostart schedule as the API shows and takes it.
type autostartView struct {
	Days     []string `json:"days"`
	Time     string   `json:"time"`
	TimeZone string   `json:"time_zone"`
}

// autostartField is PATCH's "autostart": absent (unchanged), null
// (removed) or a schedule.
type autostartField struct {
	set   bool
	value *autostartView
}

func (f *autostartField) UnmarshalJSON(b []byte) error {
	f.set = true
	if string(b) == "null" {
		return nil
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var v autostartView
	if err := dec.Decode(&v); err != nil {
		return err
	}
	f.value = &v
	return nil
}

func viewAutostart(w workspace.Workspace, now time.Time) (*autostartView, *time.Time) {
	sched, ok := w.Autostart()
	if !ok {
		return nil, nil
	}
	v := &autostartView{Time: sched.Clock(), TimeZone: sched.Location.String()}
	for _, d := range sched.Days {
		v.Days = append(v.Days, workspace.DayName(d))
	}
	after := now
	if w.AutostartDone != nil && w.AutostartDone.After(after) {
		after = *w.AutostartDone
	}
	next := sched.Next(after).UTC()
	return v, &next
}

type extendRequest struct {
	Hours *float64 `json:"hours"`
}

func (s *Server) listWorkspaces(w http.ResponseWriter, r *http.Request) {
	sess, ok := s.requireUser(w, r)
	if !ok {
		return
	}
	s.writePage(w, r, sess.UserID, "")
}

func (s *Server) adminListWorkspaces(w http.ResponseWriter, r *http.Request) {
	if _, ok := s.requireAdmin(w, r); !ok {
		return
	}
	q := r.URL.Query()
	phase := workspace.Phase(q.Get("state"))
	if phase != "" && !slices.Contains(listablePhases, phase) {
		WriteError(w, &Error{Status: http.StatusBadRequest, Code: CodeInvalidInput, Field: "state",
			Message: "state: must be one of PENDING, ARCHIVED, STANDBY, RUNNING, ERROR, DELETING"})
		return
	}
	s.writePage(w, r, q.Get("owner_id"), phase)
}

// listablePhases are the phases a live workspace can be in.
var listablePhases = []workspace.Phase{
	workspace.PhasePending, workspace.PhaseArchived, workspace.PhaseStandby,
	workspace.PhaseRunning, workspace.PhaseError, workspace.PhaseDeleting,
}

// writePage answers a list request; ownerID empty lists every owner, phase
// empty every phase.
func (s *Server) writePage(w http.ResponseWriter, r *http.Request, ownerID string, phase workspace.Phase) {
	limit, after, e := pageParams(r)
	if e != nil {
		WriteError(w, e)
		return
	}
	if r.URL.Query().Has("owner_id") && !proxy.ValidID(ownerID) {
		// User ids have the form of workspace ids.
		WriteError(w, &Error{Status: http.StatusBadRequest, Code: CodeInvalidInput, Field: "owner_id", Message: "owner_id: must be a user id"})
		return
	}
	// One extra row tells whether another page follows.
	list, err := s.workspaces.List(r.Context(), workspace.ListFilter{OwnerID: ownerID, Phase: phase, Limit: limit + 1, After: after})
	if err != nil {
		WriteError(w, serviceError(s.logger, err))
		return
	}
	page := workspacePage{Workspaces: make([]workspaceView, 0, len(list))}
	if len(list) > limit {
		list = list[:limit]
		next := list[limit-1].ID
		page.Next = &next
	}
	for _, ws := range list {
		page.Workspaces = append(page.Workspaces, s.view(ws))
	}
	writeJSON(w, http.StatusOK, page)
}

// pageParams reads ?limit= and ?after=.
func pageParams(r *http.Request) (int, string, *Error) {
	q := r.URL.Query()
	limit := defaultPageSize
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > maxPageSize {
			return 0, "", &Error{Status: http.StatusBadRequest, Code: CodeInvalidInput, Field: "limit",
				Message: "limit: must be an integer from 1 to " + strconv.Itoa(maxPageSize)}
		}
		limit = n
	}
	after := q.Get("after")
	if after != "" && !proxy.ValidID(after) {
		return 0, "", &Error{Status: http.StatusBadRequest, Code: CodeInvalidInput, Field: "after", Message: "after: must be a workspace id"}
	}
	return limit, after, nil
}

func (s *Server) createWorkspace(w http.ResponseWriter, r *http.Request) {
	sess, ok := s.requireUser(w, r)
	if !ok {
		return
	}
	var req createRequest
	if e := decodeJSON(w, r, &req, s.opts.BodyReadTimeout); e != nil {
		WriteError(w, e)
		return
	}
	creator, err := s.creator(r.Context(), sess)
	if err != nil {
		s.fail(w, "read the user's groups", err)
		return
	}
	c, err := s.workspaces.Create(r.Context(), workspace.CreateRequest{
		OwnerID: sess.UserID, Name: req.Name, Description: req.Description, Image: req.Image,
		Template: req.Template, Parameters: req.Parameters,
		Creator: creator,
	})
	if err != nil {
		e := serviceError(s.logger, err)
		s.recordWorkspace(r, sess, audit.ActionWorkspaceCreate, workspace.Workspace{Name: req.Name}, e)
		WriteError(w, e)
		return
	}
	s.recordWorkspace(r, sess, audit.ActionWorkspaceCreate, c.Workspace, nil)
	w.Header().Set("Location", "/api/v1/workspaces/"+c.ID)
	if c.HeldBy != nil {
		w.Header().Set(NoticeHeader, heldNotice(c.HeldBy))
	}
	writeJSON(w, http.StatusCreated, s.view(c.Workspace))
}

// NoticeHeader carries a sentence for the user about a request that
// succeeded otherwise than asked: a workspace created stopped.
const NoticeHeader = "CodeHub-Notice"

func heldNotice(le *workspace.LimitError) string {
	n := fmt.Sprintf("%d workspaces", le.Limit)
	if le.Limit == 1 {
		n = "1 workspace"
	}
	if le.Scope == workspace.LimitScopeGlobal {
		return "Created stopped: this server runs at most " + n + " at once. Start it once others have stopped."
	}
	return "Created stopped: you may run " + n + " at once. Stop one to start this one."
}

// archiveView is one archive of a workspace's home (docs/api.md).
type archiveView struct {
	ID        string    `json:"id"`
	CreatedAt time.Time `json:"created_at"`
	SizeBytes int64     `json:"size_bytes"`
	Current   bool      `json:"current"`
	// BuildsOn is the id of the archive an incremental archive stores its
	// changes on: the GC keeps that one as long as this one.
	BuildsOn string `json:"builds_on,omitempty"`
}

type archiveList struct {
	Archives []archiveView `json:"archives"`
}

func (s *Server) listArchives(w http.ResponseWriter, r *http.Request) {
	ws, ok := s.userWorkspace(w, r)
	if !ok {
		return
	}
	archives, err := s.workspaces.Archives(r.Context(), ws.ID)
	if err != nil {
		WriteError(w, serviceError(s.logger, err))
		return
	}
	list := archiveList{Archives: make([]archiveView, 0, len(archives))}
	for _, a := range archives {
		v := archiveView{ID: a.ID, CreatedAt: a.CreatedAt.UTC(), SizeBytes: a.Size, Current: a.Current}
		if a.Parent != "" {
			v.BuildsOn = archive.OpID(a.Parent)
		}
		list.Archives = append(list.Archives, v)
	}
	writeJSON(w, http.StatusOK, list)
}

type imageList struct {
	Default string   `json:"default"`
	Images  []string `json:"images"`
}

// listImages answers which images a new workspace may run, so a client
// offers a choice only where there is one.
func (s *Server) listImages(w http.ResponseWriter, r *http.Request) {
	if _, ok := s.requireUser(w, r); !ok {
		return
	}
	images := s.workspaces.Images()
	list := imageList{Images: images}
	if len(images) > 0 {
		list.Default = images[0]
	}
	writeJSON(w, http.StatusOK, list)
}

// ownedWorkspace loads the workspace named by the path for its owner; it
// answers 404 for malformed, unknown and deleted ids and 403 for another
// user's workspace.
// pathID is the {id} of the request's path, or false after a 404 naming
// what: an id that is no ULID names nothing.
func pathID(w http.ResponseWriter, r *http.Request, what string) (string, bool) {
	id := r.PathValue("id")
	if !proxy.ValidID(id) {
		WriteError(w, newError(http.StatusNotFound, CodeNotFound, what+" not found"))
		return "", false
	}
	return id, true
}

func (s *Server) ownedWorkspace(w http.ResponseWriter, r *http.Request, sess store.Session) (workspace.Workspace, bool) {
	id, ok := pathID(w, r, "workspace")
	if !ok {
		return workspace.Workspace{}, false
	}
	ws, err := s.workspaces.Get(r.Context(), id)
	if err != nil {
		WriteError(w, serviceError(s.logger, err))
		return workspace.Workspace{}, false
	}
	if ws.OwnerID != sess.UserID {
		WriteError(w, newError(http.StatusForbidden, CodeForbidden, "this workspace belongs to another user"))
		return workspace.Workspace{}, false
	}
	return ws, true
}

// userWorkspace authenticates the request and loads the workspace of its
// path for that user, answering 401, 403 or 404 itself.
func (s *Server) userWorkspace(w http.ResponseWriter, r *http.Request) (workspace.Workspace, bool) {
	sess, ok := s.requireUser(w, r)
	if !ok {
		return workspace.Workspace{}, false
	}
	return s.ownedWorkspace(w, r, sess)
}

func (s *Server) getWorkspace(w http.ResponseWriter, r *http.Request) {
	ws, ok := s.userWorkspace(w, r)
	if !ok {
		return
	}
	writeJSON(w, http.StatusOK, s.view(ws))
}

// patchWorkspace applies name and description first, then the desired
// state: a refused desired state (409, 429) is reported while a valid
// rename in the same request stands.
func (s *Server) patchWorkspace(w http.ResponseWriter, r *http.Request) {
	sess, ok := s.requireUser(w, r)
	if !ok {
		return
	}
	var req patchRequest
	if e := decodeJSON(w, r, &req, s.opts.BodyReadTimeout); e != nil {
		WriteError(w, e)
		return
	}
	var desired workspace.DesiredState
	if req.DesiredState != nil {
		switch d := workspace.DesiredState(*req.DesiredState); d {
		case workspace.DesiredRunning, workspace.DesiredStandby, workspace.DesiredArchived:
			desired = d
		default:
			WriteError(w, &Error{Status: http.StatusBadRequest, Code: CodeInvalidInput, Field: "desired_state",
				Message: "desired_state: must be RUNNING, STANDBY or ARCHIVED"})
			return
		}
	}
	standby, e := seconds("standby_ttl_seconds", req.StandbyTTLSeconds)
	if e != nil {
		WriteError(w, e)
		return
	}
	archive, e := seconds("archive_ttl_seconds", req.ArchiveTTLSeconds)
	if e != nil {
		WriteError(w, e)
		return
	}
	var sched *workspace.Schedule
	if a := req.Autostart.value; a != nil {
		parsed, err := workspace.ParseSchedule(a.Days, a.Time, a.TimeZone)
		if err != nil {
			WriteError(w, serviceError(s.logger, err))
			return
		}
		sched = &parsed
	}
	ws, ok := s.ownedWorkspace(w, r, sess)
	if !ok {
		return
	}
	var err error
	if req.Name != nil || req.Description != nil || standby != nil || archive != nil {
		ws, err = s.workspaces.Update(r.Context(), ws.ID, workspace.UpdateRequest{
			Name: req.Name, Description: req.Description, StandbyTTL: standby, ArchiveTTL: archive})
		if err != nil {
			WriteError(w, serviceError(s.logger, err))
			return
		}
	}
	if req.Autostart.set {
		ws, err = s.workspaces.SetAutostart(r.Context(), ws.ID, sched)
		if err != nil {
			WriteError(w, serviceError(s.logger, err))
			return
		}
	}
	if desired != "" {
		action := desiredAction(ws, desired)
		before := ws
		ws, err = s.workspaces.SetDesired(r.Context(), ws.ID, desired, workspace.CauseUser)
		if err != nil {
			e := serviceError(s.logger, err)
			s.recordWorkspace(r, sess, action, before, e)
			WriteError(w, e)
			return
		}
		s.recordWorkspace(r, sess, action, ws, nil)
	}
	writeJSON(w, http.StatusOK, s.view(ws))
}

// seconds reads an optional timer given in seconds.
func seconds(field string, n *int64) (*time.Duration, *Error) {
	if n == nil {
		return nil, nil
	}
	if *n < 0 || *n > int64(math.MaxInt64/time.Second) {
		return nil, &Error{Status: http.StatusBadRequest, Code: CodeInvalidInput, Field: field,
			Message: field + ": must be 0 (the default) or a number of seconds"}
	}
	d := time.Duration(*n) * time.Second
	return &d, nil
}

// extendWorkspace keeps a running workspace from its idle stop for the
// hours asked.
func (s *Server) extendWorkspace(w http.ResponseWriter, r *http.Request) {
	sess, ok := s.requireUser(w, r)
	if !ok {
		return
	}
	var req extendRequest
	if e := decodeJSON(w, r, &req, s.opts.BodyReadTimeout); e != nil {
		WriteError(w, e)
		return
	}
	// A Duration holds no more hours than this; the service's own bound
	// (workspace.max_extend) is far lower.
	if req.Hours == nil || *req.Hours <= 0 || *req.Hours > float64(math.MaxInt64/time.Hour) {
		WriteError(w, &Error{Status: http.StatusBadRequest, Code: CodeInvalidInput, Field: "hours",
			Message: "hours: must be a positive number"})
		return
	}
	ws, ok := s.ownedWorkspace(w, r, sess)
	if !ok {
		return
	}
	ws, err := s.workspaces.KeepRunning(r.Context(), ws.ID, time.Duration(*req.Hours*float64(time.Hour)))
	if err != nil {
		WriteError(w, serviceError(s.logger, err))
		return
	}
	writeJSON(w, http.StatusOK, s.view(ws))
}

func (s *Server) deleteWorkspace(w http.ResponseWriter, r *http.Request) {
	sess, ok := s.requireUser(w, r)
	if !ok {
		return
	}
	ws, ok := s.ownedWorkspace(w, r, sess)
	if !ok {
		return
	}
	if err := s.workspaces.Delete(r.Context(), ws.ID); err != nil {
		e := serviceError(s.logger, err)
		s.recordWorkspace(r, sess, audit.ActionWorkspaceDelete, ws, e)
		WriteError(w, e)
		return
	}
	s.recordWorkspace(r, sess, audit.ActionWorkspaceDelete, ws, nil)
	w.WriteHeader(http.StatusNoContent)
}

// adminSetDesired lets an administrator stop or archive any workspace
// (to free a node, or the resources of someone who left it running). It
// never starts one: that would spend the owner's running limit. The owner
// sees that an administrator did it (desired_by "admin").
func (s *Server) adminSetDesired(w http.ResponseWriter, r *http.Request) {
	sess, ok := s.requireAdmin(w, r)
	if !ok {
		return
	}
	var req struct {
		DesiredState *string `json:"desired_state"`
	}
	if e := decodeJSON(w, r, &req, s.opts.BodyReadTimeout); e != nil {
		WriteError(w, e)
		return
	}
	var desired workspace.DesiredState
	if req.DesiredState != nil {
		desired = workspace.DesiredState(*req.DesiredState)
	}
	if desired != workspace.DesiredStandby && desired != workspace.DesiredArchived {
		WriteError(w, &Error{Status: http.StatusBadRequest, Code: CodeInvalidInput, Field: "desired_state",
			Message: "desired_state: must be STANDBY or ARCHIVED"})
		return
	}
	id, ok := pathID(w, r, "workspace")
	if !ok {
		return
	}
	before, err := s.workspaces.Get(r.Context(), id)
	if err != nil {
		WriteError(w, serviceError(s.logger, err))
		return
	}
	action := desiredAction(before, desired)
	ws, err := s.workspaces.SetDesired(r.Context(), id, desired, workspace.CauseAdmin)
	if err != nil {
		e := serviceError(s.logger, err)
		s.recordWorkspace(r, sess, action, before, e)
		WriteError(w, e)
		return
	}
	s.recordWorkspace(r, sess, action, ws, nil)
	s.logger.Info("workspace desired state set by admin", "workspace_id", id, "desired", desired, "admin", sess.Username)
	writeJSON(w, http.StatusOK, s.view(ws))
}

func (s *Server) recoverWorkspace(w http.ResponseWriter, r *http.Request) {
	sess, ok := s.requireAdmin(w, r)
	if !ok {
		return
	}
	id, ok := pathID(w, r, "workspace")
	if !ok {
		return
	}
	ws, err := s.workspaces.Recover(r.Context(), id)
	if err != nil {
		e := serviceError(s.logger, err)
		s.recordWorkspace(r, sess, audit.ActionWorkspaceRecover, workspace.Workspace{ID: id}, e)
		WriteError(w, e)
		return
	}
	s.recordWorkspace(r, sess, audit.ActionWorkspaceRecover, ws, nil)
	s.logger.Info("workspace recovered by admin", "workspace_id", id, "admin", sess.Username)
	writeJSON(w, http.StatusOK, s.view(ws))
}
