// Package events carries workspace change notifications from PostgreSQL to
// every API replica: the leader's Listener LISTENs on codehub_workspace and
// republishes each notification to the Redis channel of the workspace's
// owner, where the SSE handlers of all replicas receive it. Each time it
// starts listening it also republishes recent changes, which nobody may
// have heard while no listener listened. A notification is only a hint
// naming a workspace and version; readers fetch the state.
package events

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"
)

// PGChannel is the channel the workspaces trigger notifies.
const PGChannel = "codehub_workspace"

// ChannelPrefix starts every per-user Redis channel.
const ChannelPrefix = "codehub:sse:"

// Kinds of a Notice (migrations/001_init.sql).
const (
	KindUpdated = "updated"
	KindDeleted = "deleted"
	KindDesired = "desired"
)

// Channel is the Redis channel carrying the notices of one user's workspaces.
func Channel(ownerID string) string { return ChannelPrefix + ownerID }

// Notice is the payload of a notification: which workspace changed, to
// which version, and how.
type Notice struct {
	ID      string `json:"id"`
	OwnerID string `json:"owner_id"`
	Version int64  `json:"version"`
	Kind    string `json:"kind"`
}

// ParseNotice decodes a notification payload.
func ParseNotice(payload string) (Notice, error) {
	var n Notice
	if err := json.Unmarshal([]byte(payload), &n); err != nil {
		return Notice{}, fmt.Errorf("decode notice: %w", err)
	}
	if n.ID == "" || n.OwnerID == "" {
		return Notice{}, fmt.Errorf("decode notice: id and owner_id are required")
	}
	return n, nil
}

// Reconnect delays of the Listener's dedicated connection.
const (
	reconnectMin = 250 * time.Millisecond
	reconnectMax = 10 * time.Second
)

// Listener republishes workspace notifications from PostgreSQL to Redis.
// It runs only on the coordinator's leader, so each notice is published once.
type Listener struct {
	logger hclog.Logger
	dbURL  string
	rdb    redis.Cmdable
	// wake, when set, is called for desired-state changes (deletion
	// included) so the controller reconciles at once.
	wake func()
}

// NewListener returns a listener that connects to dbURL on its own
// connection (LISTEN needs one that the pool never hands to anyone else).
// wake may be nil.
func NewListener(logger hclog.Logger, dbURL string, rdb redis.Cmdable, wake func()) *Listener {
	return &Listener{logger: logger, dbURL: dbURL, rdb: rdb, wake: wake}
}

// catchUpWindow is how far back a listener that starts listening looks for
// changes it may have missed: notices raised while no listener listened
// (between one leader and the next, or while one reconnects) would
// otherwise never reach SSE clients that stayed connected to their replica.
const catchUpWindow = 10 * time.Minute

// recentChanges lists the workspaces changed in the last $1 seconds, by the
// database's clock.
const recentChanges = `SELECT id, owner_id, version, deleted_at IS NOT NULL
FROM workspaces WHERE updated_at > now() - make_interval(secs => $1)`

// Run listens until ctx ends, reconnecting with backoff when the
// connection is lost. Each time it starts listening it first republishes
// the workspaces changed since shortly before the last connection was lost
// (catchUpWindow on the first), so no notice raised meanwhile stays lost.
func (l *Listener) Run(ctx context.Context) error {
	delay := reconnectMin
	var lostAt time.Time
	for {
		window := catchUpWindow
		if !lostAt.IsZero() {
			window += time.Since(lostAt)
		}
		err := l.listen(ctx, window)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if errors.Is(err, errListening) {
			delay = reconnectMin
			lostAt = time.Now()
		}
		l.logger.Warn("workspace notifications interrupted", "error", err, "retry_in", delay)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(delay):
		}
		delay = min(delay*2, reconnectMax)
	}
}

// errListening marks a failure after LISTEN succeeded, which resets the
// reconnect backoff.
var errListening = errors.New("connection lost while listening")

func (l *Listener) listen(ctx context.Context, window time.Duration) error {
	conn, err := pgx.Connect(ctx, l.dbURL)
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, "LISTEN "+PGChannel); err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	l.logger.Debug("listening for workspace notifications")
	// After LISTEN, so every change is either in this list or notified.
	if err := l.catchUp(ctx, window); err != nil {
		l.logger.Warn("republishing recent workspace changes failed", "error", err)
	}
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			return fmt.Errorf("%w: %w", errListening, err)
		}
		l.relay(ctx, n.Payload)
	}
}

// catchUp publishes a notice for each workspace changed within window.
// SSE handlers skip versions their clients already have, so repeats are
// cheap. What kind of change it was is unknown, so the controller is woken
// once in case a desired state changed. It reads on a connection of its
// own: the listening one keeps showing LISTEN as its query in
// pg_stat_activity, which is how operators (and tests) recognise it.
func (l *Listener) catchUp(ctx context.Context, window time.Duration) error {
	conn, err := pgx.Connect(ctx, l.dbURL)
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	rows, err := conn.Query(ctx, recentChanges, window.Seconds())
	if err != nil {
		return fmt.Errorf("list recent changes: %w", err)
	}
	notices, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Notice, error) {
		var n Notice
		var deleted bool
		err := row.Scan(&n.ID, &n.OwnerID, &n.Version, &deleted)
		n.Kind = KindUpdated
		if deleted {
			n.Kind = KindDeleted
		}
		return n, err
	})
	if err != nil {
		return fmt.Errorf("list recent changes: %w", err)
	}
	if len(notices) == 0 {
		return nil
	}
	if l.wake != nil {
		l.wake()
	}
	_, err = l.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, n := range notices {
			payload, err := json.Marshal(n)
			if err != nil {
				return fmt.Errorf("encode notice: %w", err)
			}
			p.Publish(ctx, Channel(n.OwnerID), payload)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("publish %d recent changes: %w", len(notices), err)
	}
	l.logger.Debug("republished recent workspace changes", "count", len(notices))
	return nil
}

func (l *Listener) relay(ctx context.Context, payload string) {
	notice, err := ParseNotice(payload)
	if err != nil {
		l.logger.Warn("ignoring malformed notification", "payload", payload, "error", err)
		return
	}
	if (notice.Kind == KindDesired || notice.Kind == KindDeleted) && l.wake != nil {
		l.wake()
	}
	if err := l.rdb.Publish(ctx, Channel(notice.OwnerID), payload).Err(); err != nil {
		l.logger.Warn("publish workspace notice", "workspace_id", notice.ID, "error", err)
	}
}
