// Package audit owns the audit log: who did what to which object, from
// which address, and how it ended. It appends events to PostgreSQL, reads
// them back filtered, and prunes those past the retention. It never decides
// whether an action is allowed: callers record what they did and its
// outcome.
package audit

import (
	"context"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/codehub-io/codehub/store"
)

// Actions recorded. Names are "object.verb", stable: admins filter and
// alert on them.
const (
	ActionLogin  = "user.login"
	ActionLogout = "user.logout"

	ActionWorkspaceCreate  = "workspace.create"
	ActionWorkspaceStart   = "workspace.start"
	ActionWorkspaceStop    = "workspace.stop"
	ActionWorkspaceArchive = "workspace.archive"
	ActionWorkspaceRestore = "workspace.restore"
	ActionWorkspaceDelete  = "workspace.delete"
	ActionWorkspaceRecover = "workspace.recover"

	ActionUserCreate   = "user.create"
	ActionUserDisable  = "user.disable"
	ActionUserEnable   = "user.enable"
	ActionUserPassword = "user.password_reset"
	// ActionUserPasswordChange is a user changing their own password.
	ActionUserPasswordChange = "user.password_change"
	ActionUserAdminGrant     = "user.admin_grant"
	ActionUserAdminRevoke    = "user.admin_revoke"

	// ActionPortShare is an owner changing how widely a port of their
	// workspace is shared; Detail says the port and both levels.
	ActionPortShare = "port.share"

	ActionTokenCreate = "token.create"
	ActionTokenRevoke = "token.revoke"

	// ActionConnectionEnd: the proxy closed a user's open connections to
	// a workspace because their session ended or the user lost the
	// workspace; Detail says which.
	ActionConnectionEnd = "session.connection_end"

	// ActionTemplatePrebuild is an admin asking for a prebuild of a
	// template now; Detail names the prebuild.
	ActionTemplatePrebuild = "template.prebuild"
)

// Target types.
const (
	TargetUser      = "user"
	TargetWorkspace = "workspace"
	TargetToken     = "token"
	TargetTemplate  = "template"
)

// Outcome says how an action ended.
type Outcome string

const (
	Success Outcome = "success"
	Failure Outcome = "failure"
)

// Actor is who acted: a user through a session, a token (with the user it
// belongs to, when known), or nobody known yet (a failed login), always
// with the client address.
type Actor struct {
	UserID   string
	Username string
	TokenID  string
	Address  string
}

// Target is what an action was done to.
type Target struct {
	Type string
	ID   string
	Name string
}

// Event is one recorded action.
type Event struct {
	ID      int64
	At      time.Time
	Actor   Actor
	Action  string
	Target  Target
	Outcome Outcome
	// Detail says why an action failed, or what it changed, in a short
	// sentence; never a secret.
	Detail string
}

// Recorder records events. Recording never fails the action it records: a
// failure to write is logged.
type Recorder interface {
	Record(ctx context.Context, e Event)
}

// Log is the audit log in PostgreSQL.
type Log struct {
	logger hclog.Logger
	pool   *pgxpool.Pool
}

var _ Recorder = (*Log)(nil)

// New returns the audit log kept in pool's database.
func New(logger hclog.Logger, pool *pgxpool.Pool) *Log {
	return &Log{logger: logger, pool: pool}
}

// writeTimeout bounds one insert; the request that acted may have ended.
const writeTimeout = 5 * time.Second

// Record appends e. It writes even when ctx was cancelled after the action
// was done, so a client hanging up does not erase its trace.
func (l *Log) Record(ctx context.Context, e Event) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), writeTimeout)
	defer cancel()
	err := store.InsertAuditEvent(ctx, l.pool, store.AuditEvent{
		ActorUserID: e.Actor.UserID, ActorUsername: e.Actor.Username, ActorTokenID: e.Actor.TokenID,
		ActorAddress: e.Actor.Address, Action: e.Action,
		TargetType: e.Target.Type, TargetID: e.Target.ID, TargetName: e.Target.Name,
		Outcome: string(e.Outcome), Detail: e.Detail,
	})
	if err != nil {
		l.logger.Error("record audit event", "action", e.Action, "actor", e.Actor.UserID, "target", e.Target.ID, "error", err)
	}
}

// Filter selects events, newest first.
type Filter = store.AuditFilter

// List returns the events f selects, newest first.
func (l *Log) List(ctx context.Context, f Filter) ([]Event, error) {
	rows, err := store.ListAuditEvents(ctx, l.pool, f)
	if err != nil {
		return nil, err
	}
	events := make([]Event, 0, len(rows))
	for _, r := range rows {
		events = append(events, Event{
			ID: r.ID, At: r.At,
			Actor:  Actor{UserID: r.ActorUserID, Username: r.ActorUsername, TokenID: r.ActorTokenID, Address: r.ActorAddress},
			Action: r.Action, Target: Target{Type: r.TargetType, ID: r.TargetID, Name: r.TargetName},
			Outcome: Outcome(r.Outcome), Detail: r.Detail,
		})
	}
	return events, nil
}

// Prune deletes the events older than retention before now.
func (l *Log) Prune(ctx context.Context, now time.Time, retention time.Duration) (int64, error) {
	return store.DeleteAuditEventsBefore(ctx, l.pool, now.Add(-retention))
}

// PruneInterval is how often RunPruner prunes.
const PruneInterval = time.Hour

// RunPruner prunes events past retention at start and then every
// PruneInterval until ctx ends. Every replica may run it: pruning twice
// deletes nothing more.
func (l *Log) RunPruner(ctx context.Context, retention time.Duration) error {
	t := time.NewTicker(PruneInterval)
	defer t.Stop()
	for {
		n, err := l.Prune(ctx, time.Now(), retention)
		switch {
		case err != nil && ctx.Err() == nil:
			l.logger.Warn("prune audit log", "error", err)
		case n > 0:
			l.logger.Debug("pruned audit log", "count", n)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}
