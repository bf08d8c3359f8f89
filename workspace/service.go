package workspace

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/hashicorp/go-hclog"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/oklog/ulid/v2"

	"github.com/codehub-io/codehub/store"
)

// Errors of the service layer; the API maps them to HTTP statuses.
var (
	// ErrNotFound: no such workspace, or it is deleted (404).
	ErrNotFound = errors.New("workspace not found")
	// ErrInvalidState: an operation is in flight, the workspace is in
	// ERROR, or it changed meanwhile (409).
	ErrInvalidState = errors.New("invalid workspace state")
	// ErrLimitExceeded: too many workspaces would be running (429). The
	// error is a *LimitError naming the limit.
	ErrLimitExceeded = errors.New("running limit exceeded")
	// ErrNameTaken: the owner already has a live workspace of that name (409).
	ErrNameTaken = errors.New("workspace name taken")
	// ErrInvalidInput: a request field is invalid (400). The error is an
	// *InputError naming the field.
	ErrInvalidInput = errors.New("invalid input")
)

// InputError names the request field that is invalid.
type InputError struct {
	Field   string
	Message string
}

func (e *InputError) Error() string { return e.Field + ": " + e.Message }

// Is makes errors.Is(err, ErrInvalidInput) hold.
func (e *InputError) Is(target error) bool { return target == ErrInvalidInput }

// Limit scopes.
const (
	LimitScopeUser   = "user"
	LimitScopeGlobal = "global"
)

// LimitError says which running limit a request would exceed.
type LimitError struct {
	Scope string // LimitScopeUser or LimitScopeGlobal
	Limit int
}

func (e *LimitError) Error() string {
	return fmt.Sprintf("%s running limit of %d workspaces reached", e.Scope, e.Limit)
}

// Is makes errors.Is(err, ErrLimitExceeded) hold.
func (e *LimitError) Is(target error) bool { return target == ErrLimitExceeded }

// Options configure the service layer.
type Options struct {
	// MaxRunningPerUser and MaxRunningGlobal bound the workspaces whose
	// desired state is RUNNING; zero or less means no limit.
	MaxRunningPerUser int
	MaxRunningGlobal  int
	// DefaultImage is used when a create request names no image.
	DefaultImage string
	// AllowedImages are the images a request may name; DefaultImage is
	// always allowed.
	AllowedImages []string
	// Policy holds the idle timers and their bounds.
	Policy Policy
	// Archives is where the homes' archives are listed from.
	Archives ArchiveStore
	// Templates are what workspaces are made of; nil offers only the
	// default template, running DefaultImage.
	Templates Templates
}

// Service is the only writer of desired_state, deleted_at and
// last_access_at: the API, the proxy's auto-wake and the TTL runner all go
// through it, so its rules (409 while an operation runs, limits, waking)
// hold for everyone.
type Service struct {
	logger hclog.Logger
	pool   *pgxpool.Pool
	opts   Options
}

// NewService returns the workspace service over pool.
func NewService(logger hclog.Logger, pool *pgxpool.Pool, opts Options) *Service {
	return &Service{logger: logger, pool: pool, opts: opts}
}

// CreateRequest asks for a new workspace of OwnerID.
type CreateRequest struct {
	OwnerID     string
	Name        string
	Description string
	// Image empty: the template's.
	Image string
	// Template empty: the default template. Parameters are its values,
	// as decoded from JSON.
	Template   string
	Parameters map[string]any
	// Creator must be allowed the template.
	Creator Creator
}

// UpdateRequest changes the descriptive fields; nil leaves a field as is.
type UpdateRequest struct {
	Name        *string
	Description *string
	// StandbyTTL and ArchiveTTL set the workspace's own idle timers within
	// the operator's Policy; zero returns one to the default.
	StandbyTTL *time.Duration
	ArchiveTTL *time.Duration
}

// ListFilter selects and pages workspaces, ordered by id.
type ListFilter struct {
	// OwnerID empty lists every owner's workspaces (admin view).
	OwnerID string
	// Phase, when set, lists only the workspaces in that phase.
	Phase Phase
	// Limit 0 means DefaultListLimit; more than MaxListLimit is clamped.
	Limit int
	// After is the id of the last workspace of the previous page.
	After string
}

// Page sizes of List.
const (
	DefaultListLimit = 100
	MaxListLimit     = 1000
)

// MaxDescriptionLength bounds a workspace description, in characters.
const MaxDescriptionLength = 1024

var nameRE = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$`)

func validateName(name string) error {
	if !nameRE.MatchString(name) {
		return &InputError{Field: "name", Message: "1-63 characters of a-z, 0-9 and '-', starting and ending with a letter or digit"}
	}
	return nil
}

func validateDescription(d string) error {
	if !utf8.ValidString(d) || utf8.RuneCountInString(d) > MaxDescriptionLength {
		return &InputError{Field: "description", Message: fmt.Sprintf("at most %d characters of valid UTF-8", MaxDescriptionLength)}
	}
	// PostgreSQL's text refuses NUL, which JSON can carry as \u0000.
	if strings.ContainsRune(d, 0) {
		return &InputError{Field: "description", Message: "must not contain NUL characters"}
	}
	return nil
}

// image judges an image a request names: its template's, the default,
// or one the operator allows.
func (s *Service) image(requested, template string) (string, error) {
	if t, ok := s.template(template); ok && requested == t.Image {
		return requested, nil
	}
	if requested != s.opts.DefaultImage && !slices.Contains(s.opts.AllowedImages, requested) {
		return "", &InputError{Field: "image", Message: fmt.Sprintf("image %q is not allowed", requested)}
	}
	return requested, nil
}

// NewID returns a fresh lowercase ULID, the form of workspace and operation ids.
func NewID() string {
	return strings.ToLower(ulid.Make().String())
}

// Created is a new workspace and, when a running limit kept it from
// starting, that limit.
type Created struct {
	Workspace
	// HeldBy is the running limit the workspace would have exceeded: it
	// was created stopped (desired STANDBY). Nil when it starts.
	HeldBy *LimitError
	// Warm: the workspace is a home of its template's warm pool, claimed.
	Warm bool
}

// Create inserts a workspace with desired state RUNNING: a new workspace is
// started at once, so it counts toward the running limits from creation.
// At a running limit it is created all the same, with desired STANDBY, so
// the user can start it once another one stops. With the template's
// default parameters it starts from the newest prebuilt home, and is a
// warm home claimed from the template's pool when one is ready
// (docs/templates.md).
func (s *Service) Create(ctx context.Context, req CreateRequest) (Created, error) {
	if req.OwnerID == "" {
		return Created{}, &InputError{Field: "owner_id", Message: "required"}
	}
	if err := validateName(req.Name); err != nil {
		return Created{}, err
	}
	if err := validateDescription(req.Description); err != nil {
		return Created{}, err
	}
	row, err := s.newFromTemplate(req)
	if err != nil {
		return Created{}, err
	}
	if req.Image != "" {
		if row.Image, err = s.image(req.Image, row.Template); err != nil {
			return Created{}, err
		}
	}
	row.ID, row.OwnerID, row.Name, row.Description = NewID(), req.OwnerID, req.Name, req.Description
	var c Created
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		desired := DesiredRunning
		err := s.checkLimits(ctx, tx, req.OwnerID)
		if le, ok := errors.AsType[*LimitError](err); ok {
			desired, c.HeldBy = DesiredStandby, le
		} else if err != nil {
			return err
		}
		row.DesiredState = string(desired)
		t, _ := s.template(row.Template)
		values, _ := row.Parameters.(map[string]any)
		pb, err := prebuiltHome(ctx, tx, t, values)
		if err != nil {
			return err
		}
		if pb != nil {
			row.ArchiveKey, row.FromPrebuild = pb.ArchiveKey, &pb.ID
		}
		if req.Image == "" && defaultValues(t, values) && t.Warm > 0 {
			c.Workspace, err = store.ClaimPoolWorkspace[Workspace](ctx, tx, t.Name, row.TemplateVersion, row.FromPrebuild,
				row.OwnerID, row.Name, row.Description, row.DesiredState)
			if err == nil {
				c.Warm = true
				return nil
			}
			if !errors.Is(err, store.ErrNotFound) {
				return err
			}
		}
		c.Workspace, err = store.InsertWorkspace[Workspace](ctx, tx, row)
		return err
	})
	switch {
	case store.IsUniqueViolation(err, "workspaces_owner_name_idx"):
		return Created{}, fmt.Errorf("%w: %q", ErrNameTaken, req.Name)
	case isForeignKeyViolation(err):
		return Created{}, &InputError{Field: "owner_id", Message: "no such user"}
	case err != nil:
		return Created{}, fmt.Errorf("create workspace: %w", err)
	}
	s.logger.Info("workspace created", "workspace_id", c.ID, "owner_id", c.OwnerID, "template", c.Template, "image", s.Image(c.Workspace), "desired", c.DesiredState,
		"prebuild", deref(c.FromPrebuild), "warm", c.Warm)
	return c, nil
}

// Images are the images a new workspace may run: the default first, then
// the other allowed ones in the operator's order.
func (s *Service) Images() []string {
	images := []string{}
	if s.opts.DefaultImage != "" {
		images = append(images, s.opts.DefaultImage)
	}
	for _, img := range s.opts.AllowedImages {
		if !slices.Contains(images, img) {
			images = append(images, img)
		}
	}
	return images
}

func isForeignKeyViolation(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "23503"
}

// checkLimits takes the limit locks of ownerID for the rest of tx and fails
// if one more workspace with desired RUNNING would exceed a limit. Holding
// the locks until commit makes check-and-set one step for concurrent callers.
func (s *Service) checkLimits(ctx context.Context, tx pgx.Tx, ownerID string) error {
	if err := store.LockRunningLimits(ctx, tx, ownerID); err != nil {
		return err
	}
	user, global, err := store.CountDesiredRunning(ctx, tx, ownerID)
	if err != nil {
		return fmt.Errorf("count running workspaces: %w", err)
	}
	if s.opts.MaxRunningPerUser > 0 && user >= s.opts.MaxRunningPerUser {
		return &LimitError{Scope: LimitScopeUser, Limit: s.opts.MaxRunningPerUser}
	}
	if s.opts.MaxRunningGlobal > 0 && global >= s.opts.MaxRunningGlobal {
		return &LimitError{Scope: LimitScopeGlobal, Limit: s.opts.MaxRunningGlobal}
	}
	return nil
}

func notFound(id string, err error) error {
	if errors.Is(err, store.ErrNotFound) {
		return fmt.Errorf("%w: %s", ErrNotFound, id)
	}
	return err
}

// Get returns a live workspace; a deleted one is ErrNotFound.
func (s *Service) Get(ctx context.Context, id string) (Workspace, error) {
	w, err := store.GetLiveWorkspace[Workspace](ctx, s.pool, id)
	if err != nil {
		return Workspace{}, fmt.Errorf("get workspace: %w", notFound(id, err))
	}
	return w, nil
}

// List pages through live workspaces ordered by id.
func (s *Service) List(ctx context.Context, f ListFilter) ([]Workspace, error) {
	switch {
	case f.Limit < 0:
		return nil, &InputError{Field: "limit", Message: "must not be negative"}
	case f.Limit == 0:
		f.Limit = DefaultListLimit
	case f.Limit > MaxListLimit:
		f.Limit = MaxListLimit
	}
	ws, err := store.ListLiveWorkspaces[Workspace](ctx, s.pool, f.OwnerID, string(f.Phase), f.After, f.Limit)
	if err != nil {
		return nil, fmt.Errorf("list workspaces: %w", err)
	}
	return ws, nil
}

// Running returns the owner's workspaces that count toward the running
// limit (desired RUNNING), for the page shown when the limit is hit.
func (s *Service) Running(ctx context.Context, ownerID string) ([]Workspace, error) {
	ws, err := store.ListDesiredRunning[Workspace](ctx, s.pool, ownerID)
	if err != nil {
		return nil, fmt.Errorf("list running workspaces: %w", err)
	}
	return ws, nil
}

// Update changes name, description and the workspace's own idle timers;
// allowed in every state. Every field is checked before anything changes.
func (s *Service) Update(ctx context.Context, id string, req UpdateRequest) (Workspace, error) {
	if req.Name != nil {
		if err := validateName(*req.Name); err != nil {
			return Workspace{}, err
		}
	}
	if req.Description != nil {
		if err := validateDescription(*req.Description); err != nil {
			return Workspace{}, err
		}
	}
	standby, err := s.ttlChange("standby_ttl", req.StandbyTTL, s.opts.Policy.StandbyTTL, s.opts.Policy.MaxStandbyTTL)
	if err != nil {
		return Workspace{}, err
	}
	archive, err := s.ttlChange("archive_ttl", req.ArchiveTTL, s.opts.Policy.ArchiveTTL, s.opts.Policy.MaxArchiveTTL)
	if err != nil {
		return Workspace{}, err
	}
	var w Workspace
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var err error
		w, err = store.UpdateWorkspaceMeta[Workspace](ctx, tx, id, req.Name, req.Description)
		if err != nil || (!standby.Set && !archive.Set) {
			return err
		}
		w, err = store.SetWorkspaceTTLs[Workspace](ctx, tx, id, standby, archive)
		return err
	})
	switch {
	case store.IsUniqueViolation(err, "workspaces_owner_name_idx"):
		return Workspace{}, fmt.Errorf("%w: %q", ErrNameTaken, *req.Name)
	case err != nil:
		return Workspace{}, fmt.Errorf("update workspace: %w", notFound(id, err))
	}
	return w, nil
}

// ttlChange checks a requested timer against the operator's bounds. Zero
// returns the timer to the default, which is always allowed.
func (s *Service) ttlChange(field string, d *time.Duration, def, limit time.Duration) (store.TTLChange, error) {
	switch {
	case d == nil:
		return store.TTLChange{}, nil
	case *d == 0 || *d == def:
		return store.TTLChange{Set: true}, nil
	case *d < MinTTL || *d > limit:
		return store.TTLChange{}, &InputError{Field: field, Message: fmt.Sprintf("must be between %s and %s", MinTTL, limit)}
	}
	return store.TTLChange{Set: true, Value: d}, nil
}

// KeepRunning keeps a workspace its owner wants running from the idle
// stop for d from now (at most the operator's MaxExtend); stopping it
// ends that. A workspace not wanted running is ErrInvalidState.
func (s *Service) KeepRunning(ctx context.Context, id string, d time.Duration) (Workspace, error) {
	limit := s.opts.Policy.MaxExtend
	if limit <= 0 {
		return Workspace{}, &InputError{Field: "hours", Message: "keeping a workspace running is turned off on this server"}
	}
	if d <= 0 || d > limit {
		return Workspace{}, &InputError{Field: "hours", Message: fmt.Sprintf("must be more than 0 and at most %g", limit.Hours())}
	}
	w, err := store.KeepRunning[Workspace](ctx, s.pool, id, d)
	if errors.Is(err, store.ErrConflict) {
		if _, gerr := store.GetLiveWorkspace[Workspace](ctx, s.pool, id); gerr != nil {
			return Workspace{}, fmt.Errorf("keep workspace running: %w", notFound(id, gerr))
		}
		return Workspace{}, fmt.Errorf("%w: only a workspace that is running or starting can be kept running", ErrInvalidState)
	}
	if err != nil {
		return Workspace{}, fmt.Errorf("keep workspace running: %w", err)
	}
	s.logger.Debug("workspace kept running", "workspace_id", id, "until", w.KeepUntil)
	return w, nil
}

// SetAutostart sets w's autostart schedule, or removes it (nil). Only
// starts after now are acted on.
func (s *Service) SetAutostart(ctx context.Context, id string, sched *Schedule) (Workspace, error) {
	days, at, zone := 0, (*string)(nil), (*string)(nil)
	if sched != nil {
		clock, name := sched.Clock(), sched.Location.String()
		days, at, zone = sched.DayBits(), &clock, &name
	}
	w, err := store.SetAutostart[Workspace](ctx, s.pool, id, days, at, zone)
	if err != nil {
		return Workspace{}, fmt.Errorf("set autostart: %w", notFound(id, err))
	}
	return w, nil
}

// Autostarts returns the workspaces with a schedule that may need waking.
func (s *Service) Autostarts(ctx context.Context) ([]Workspace, error) {
	ws, err := store.ListAutostarts[Workspace](ctx, s.pool)
	if err != nil {
		return nil, fmt.Errorf("list autostarts: %w", err)
	}
	return ws, nil
}

// AutostartDue is the scheduled start w must be woken for at now, if any.
func (s *Service) AutostartDue(w Workspace, now time.Time) (time.Time, bool) {
	return AutostartDue(w, now, s.opts.Policy.AutostartLead)
}

// StartScheduled acts on the scheduled start at of workspace id, once: it
// asks for RUNNING (limits apply; an operation in flight is
// ErrInvalidState, to be tried again) unless that is already wanted, and
// keeps the workspace from its idle stop until its standby timer after at,
// so a workspace started ahead of its owner is still there when they come.
func (s *Service) StartScheduled(ctx context.Context, id string, at time.Time) (Workspace, error) {
	var w Workspace
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		cur, err := store.LockLiveWorkspace[Workspace](ctx, tx, id)
		if err != nil {
			return notFound(id, err)
		}
		w = cur
		if cur.AutostartDone != nil && !cur.AutostartDone.Before(at) {
			return nil
		}
		if cur.DesiredState != DesiredRunning {
			if err := settable(cur); err != nil {
				return err
			}
			if err := s.checkLimits(ctx, tx, cur.OwnerID); err != nil {
				return err
			}
			if _, err := store.SetDesiredState[Workspace](ctx, tx, id, string(DesiredRunning), cur.Version, string(CauseSchedule)); err != nil {
				if errors.Is(err, store.ErrConflict) {
					return fmt.Errorf("%w: workspace changed meanwhile", ErrInvalidState)
				}
				return err
			}
		}
		w, err = store.MarkAutostarted[Workspace](ctx, tx, id, at, at.Add(TimersOf(cur, s.opts.Policy).StandbyTTL))
		return err
	})
	if err != nil {
		return Workspace{}, fmt.Errorf("scheduled start of %s: %w", id, err)
	}
	return w, nil
}

// Timers is when the idle rules will act on w.
func (s *Service) Timers(w Workspace) Timers { return TimersOf(w, s.opts.Policy) }

// SetDesired asks for another steady state (RUNNING, STANDBY, ARCHIVED;
// deletion is Delete). Asking for the current desired state is a no-op and
// succeeds even while an operation runs, so a repeated wake is harmless.
// Otherwise: ERROR or an operation in flight is ErrInvalidState; RUNNING is
// checked against the limits and resets last_access_at.
// by is recorded as the reason of the change.
func (s *Service) SetDesired(ctx context.Context, id string, desired DesiredState, by Cause) (Workspace, error) {
	return s.setDesired(ctx, id, desired, 0, by)
}

// SetDesiredIfUnchanged is SetDesired that also fails with ErrInvalidState
// when the workspace is no longer at version: a policy (the TTL runner)
// decides on a row it read and must not act on a newer one.
func (s *Service) SetDesiredIfUnchanged(ctx context.Context, id string, version int64, desired DesiredState, by Cause) (Workspace, error) {
	if version <= 0 {
		return Workspace{}, &InputError{Field: "version", Message: "must be positive"}
	}
	return s.setDesired(ctx, id, desired, version, by)
}

func (s *Service) setDesired(ctx context.Context, id string, desired DesiredState, version int64, by Cause) (Workspace, error) {
	switch desired {
	case DesiredRunning, DesiredStandby, DesiredArchived:
	default:
		return Workspace{}, &InputError{Field: "desired_state", Message: "must be RUNNING, STANDBY or ARCHIVED"}
	}
	var w Workspace
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		// Row lock first, then the limit locks: every path takes them in
		// this order, so none waits in a cycle.
		cur, err := store.LockLiveWorkspace[Workspace](ctx, tx, id)
		if err != nil {
			return notFound(id, err)
		}
		if version > 0 && cur.Version != version {
			return fmt.Errorf("%w: workspace changed meanwhile", ErrInvalidState)
		}
		if cur.DesiredState == desired {
			w = cur
			return nil
		}
		if err := settable(cur); err != nil {
			return err
		}
		if desired == DesiredRunning {
			if err := s.checkLimits(ctx, tx, cur.OwnerID); err != nil {
				return err
			}
		}
		w, err = store.SetDesiredState[Workspace](ctx, tx, id, string(desired), cur.Version, string(by))
		if errors.Is(err, store.ErrConflict) {
			return fmt.Errorf("%w: workspace changed meanwhile", ErrInvalidState)
		}
		return err
	})
	if err != nil {
		return Workspace{}, fmt.Errorf("set desired state of %s: %w", id, err)
	}
	s.logger.Debug("desired state set", "workspace_id", id, "desired", w.DesiredState)
	return w, nil
}

// settable reports why desired state may not change now. A backup is no
// reason: it yields to a wake, and an archiving follows it.
func settable(w Workspace) error {
	if w.Phase == PhaseError {
		return fmt.Errorf("%w: workspace is in ERROR (%s); recover or delete it", ErrInvalidState, deref(w.ErrorReason))
	}
	if w.Operation != OpNone && !BackingUp(w) {
		return fmt.Errorf("%w: operation %s in flight", ErrInvalidState, w.Operation)
	}
	return nil
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// Delete soft-deletes a workspace: from now on it is ErrNotFound, and the
// controller removes its container and volume once no operation is in
// flight (an operation already running finishes or times out first). It is
// accepted in every state, ERROR included.
func (s *Service) Delete(ctx context.Context, id string) error {
	if err := store.SoftDeleteWorkspace(ctx, s.pool, id); err != nil {
		return fmt.Errorf("delete workspace: %w", notFound(id, err))
	}
	s.logger.Info("workspace deleted", "workspace_id", id)
	return nil
}

// Recover clears the error of an ERROR workspace (reason, count, backoff)
// and sets the phase its last observation implies, so the controller
// resumes driving it toward its desired state. Any other phase is
// ErrInvalidState.
func (s *Service) Recover(ctx context.Context, id string) (Workspace, error) {
	var w Workspace
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		cur, err := store.LockLiveWorkspace[Workspace](ctx, tx, id)
		if err != nil {
			return notFound(id, err)
		}
		if cur.Phase != PhaseError {
			return fmt.Errorf("%w: workspace is %s, not ERROR", ErrInvalidState, cur.Phase)
		}
		// If the last observation still breaks an invariant the phase stays
		// ERROR; the controller records the reason again on its next pass.
		cur.ErrorReason, cur.ErrorMessage, cur.ErrorCount = nil, nil, 0
		w, err = store.RecoverWorkspace[Workspace](ctx, tx, id, string(DerivePhase(cur)))
		if errors.Is(err, store.ErrConflict) {
			return fmt.Errorf("%w: workspace changed meanwhile", ErrInvalidState)
		}
		return err
	})
	if err != nil {
		return Workspace{}, fmt.Errorf("recover workspace %s: %w", id, err)
	}
	s.logger.Info("workspace recovered", "workspace_id", id, "phase", w.Phase)
	return w, nil
}

// Access is one activity timestamp of a workspace.
type Access struct {
	WorkspaceID string
	At          time.Time
}

// RecordAccess raises last_access_at to the given times in one statement;
// a timestamp older than the stored one is ignored.
func (s *Service) RecordAccess(ctx context.Context, accesses []Access) error {
	if len(accesses) == 0 {
		return nil
	}
	ids := make([]string, len(accesses))
	at := make([]time.Time, len(accesses))
	for i, a := range accesses {
		ids[i], at[i] = a.WorkspaceID, a.At
	}
	if _, err := store.TouchLastAccess(ctx, s.pool, ids, at); err != nil {
		return fmt.Errorf("record workspace access: %w", err)
	}
	return nil
}

// Idle returns the workspaces whose TTL ran out at now (see
// store.ListIdleWorkspaces); the TTL runner moves each one step down with
// SetDesiredIfUnchanged.
func (s *Service) Idle(ctx context.Context, now time.Time, standbyTTL, archiveTTL time.Duration) ([]Workspace, error) {
	ws, err := store.ListIdleWorkspaces[Workspace](ctx, s.pool, now, standbyTTL, archiveTTL)
	if err != nil {
		return nil, fmt.Errorf("list idle workspaces: %w", err)
	}
	return ws, nil
}

// ArchiveOwners returns every live workspace and every workspace whose
// deletion finished before deletedBefore: the ones whose archives the GC
// judges.
func (s *Service) ArchiveOwners(ctx context.Context, deletedBefore time.Time) ([]Workspace, error) {
	ws, err := store.ListArchiveOwners[Workspace](ctx, s.pool, deletedBefore)
	if err != nil {
		return nil, fmt.Errorf("list archive owners: %w", err)
	}
	return ws, nil
}

// ReferencedArchives lists the archives of workspace owner that other
// live workspaces point to (they started from a prebuilt home it holds).
func (s *Service) ReferencedArchives(ctx context.Context, owner string) ([]string, error) {
	return store.ReferencedArchives(ctx, s.pool, owner)
}

// Reread returns the current row of a workspace, deleted or not, for a
// runner about to act on what an earlier read showed.
func (s *Service) Reread(ctx context.Context, id string) (Workspace, error) {
	w, err := store.GetWorkspace[Workspace](ctx, s.pool, id)
	if err != nil {
		return Workspace{}, fmt.Errorf("reread workspace: %w", notFound(id, err))
	}
	return w, nil
}

// ArchivesCollected records that a deleted workspace has no archive left,
// so ArchiveOwners leaves it out from then on.
func (s *Service) ArchivesCollected(ctx context.Context, id string) error {
	if err := store.MarkArchivesCollected(ctx, s.pool, id); err != nil {
		return fmt.Errorf("record archives collected: %w", err)
	}
	return nil
}

// ProgramsRunning returns the workspaces whose program runs and that no
// operation works on, for the snapshot runner.
func (s *Service) ProgramsRunning(ctx context.Context) ([]Workspace, error) {
	ws, err := store.ListProgramsRunning[Workspace](ctx, s.pool)
	if err != nil {
		return nil, fmt.Errorf("list running programs: %w", err)
	}
	return ws, nil
}

// CommitSnapshot records a snapshot of the run of w, read as w: key holds
// its home as of at (nil key: w's archive still does). It fails with
// store.ErrConflict when the workspace moved on since w was read (stopped,
// an operation claimed, another archive committed) or the leader epoch
// changed; the snapshot is then not the workspace's.
func (s *Service) CommitSnapshot(ctx context.Context, w Workspace, key *string, at time.Time, epoch int64) error {
	return store.CommitSnapshot(ctx, s.pool, w.ID, w.RunID, w.ArchiveKey, key, at, epoch)
}
