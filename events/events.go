// Package events carries workspace change notifications from PostgreSQL to
// every API replica: the leader's Listener LISTENs on codehub_workspace and
// republishes each notification to the Redis channel of the workspace's
// owner, where the SSE handlers of all replicas receive it. A notification
// is only a hint naming a workspace and version; readers fetch the state.
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

// Run listens until ctx ends, reconnecting with backoff when the
// connection is lost. Notices that arrive while disconnected are lost;
// SSE clients recover them because every (re)connect starts with the
// current state, and the controller re-reads the table on its next tick.
func (l *Listener) Run(ctx context.Context) error {
	delay := reconnectMin
	for {
		err := l.listen(ctx)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if errors.Is(err, errListening) {
			delay = reconnectMin
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

func (l *Listener) listen(ctx context.Context) error {
	conn, err := pgx.Connect(ctx, l.dbURL)
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, "LISTEN "+PGChannel); err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	l.logger.Debug("listening for workspace notifications")
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			return fmt.Errorf("%w: %w", errListening, err)
		}
		l.relay(ctx, n.Payload)
	}
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
