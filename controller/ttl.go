package controller

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/redis/go-redis/v9"

	"github.com/codehub-io/codehub/workspace"
)

// ActivityKey is the Redis sorted set of workspace activity: member is the
// workspace id, score the unix time in seconds of its latest access. The
// proxy raises scores with ZADD GT; the TTL runner drains it.
const ActivityKey = "codehub:activity"

// TTLConfig configures the TTL runner. A workspace's own standby_ttl and
// archive_ttl override the defaults.
type TTLConfig struct {
	Interval   time.Duration
	StandbyTTL time.Duration
	ArchiveTTL time.Duration
	// Metrics counts expiries (nil: none).
	Metrics *Metrics
}

// TTLRunner moves activity from Redis into last_access_at and steps idle
// workspaces down: RUNNING idle past standby_ttl to STANDBY, STANDBY past
// archive_ttl (since it became STANDBY) to ARCHIVED. It changes desired
// state only through the workspace service, like the API.
type TTLRunner struct {
	logger hclog.Logger
	svc    *workspace.Service
	redis  *redis.Client
	cfg    TTLConfig
	now    func() time.Time
}

// NewTTLRunner returns a TTL runner.
func NewTTLRunner(logger hclog.Logger, svc *workspace.Service, rdb *redis.Client, cfg TTLConfig) *TTLRunner {
	return &TTLRunner{logger: logger, svc: svc, redis: rdb, cfg: cfg, now: time.Now}
}

// Run runs a pass every interval until ctx ends. A failed pass is logged
// and retried at the next interval.
func (r *TTLRunner) Run(ctx context.Context) error {
	ticker := time.NewTicker(r.cfg.Interval)
	defer ticker.Stop()
	for {
		if _, err := r.RunOnce(ctx); err != nil && ctx.Err() == nil {
			r.logger.Warn("ttl pass failed", "error", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-ticker.C:
		}
	}
}

// TTLResult reports one pass.
type TTLResult struct {
	Flushed  int
	Started  []string // workspaces woken for their schedule
	Standby  []string // workspaces asked to stop
	Archived []string // workspaces asked to archive
}

// RunOnce flushes activity, wakes workspaces whose schedule is due, then
// applies the TTLs.
func (r *TTLRunner) RunOnce(ctx context.Context) (TTLResult, error) {
	var res TTLResult
	n, err := r.flush(ctx)
	if err != nil {
		return res, err
	}
	res.Flushed = n
	if res.Started, err = r.autostart(ctx); err != nil {
		return res, err
	}
	idle, err := r.svc.Idle(ctx, r.now(), r.cfg.StandbyTTL, r.cfg.ArchiveTTL)
	if err != nil {
		return res, err
	}
	for _, w := range idle {
		desired := workspace.DesiredArchived
		if w.Phase == workspace.PhaseRunning {
			desired = workspace.DesiredStandby
		}
		// The version guard loses to anything that touched the workspace
		// since it was read (a wake, an operation starting).
		_, err := r.svc.SetDesiredIfUnchanged(ctx, w.ID, w.Version, desired, workspace.CauseIdle)
		switch {
		case errors.Is(err, workspace.ErrInvalidState), errors.Is(err, workspace.ErrNotFound):
			r.logger.Debug("ttl skipped changed workspace", "workspace_id", w.ID, "error", err)
			continue
		case err != nil:
			return res, err
		}
		r.logger.Info("workspace idle", "workspace_id", w.ID, "phase", w.Phase, "desired", desired)
		r.cfg.Metrics.ttlExpired(desired)
		if desired == workspace.DesiredStandby {
			res.Standby = append(res.Standby, w.ID)
		} else {
			res.Archived = append(res.Archived, w.ID)
		}
	}
	return res, nil
}

// autostart wakes the workspaces whose scheduled start is due. One that
// cannot start now (an operation in flight, the running limit) is tried
// again next pass, until the start is MissedStart old.
func (r *TTLRunner) autostart(ctx context.Context) ([]string, error) {
	ws, err := r.svc.Autostarts(ctx)
	if err != nil {
		return nil, err
	}
	var started []string
	for _, w := range ws {
		at, due := r.svc.AutostartDue(w, r.now())
		if !due {
			continue
		}
		_, err := r.svc.StartScheduled(ctx, w.ID, at)
		switch {
		case errors.Is(err, workspace.ErrInvalidState), errors.Is(err, workspace.ErrLimitExceeded):
			r.logger.Warn("scheduled start waits", "workspace_id", w.ID, "start", at, "error", err)
			continue
		case errors.Is(err, workspace.ErrNotFound):
			continue
		case err != nil:
			return started, err
		}
		r.logger.Info("scheduled start", "workspace_id", w.ID, "start", at, "phase", w.Phase)
		started = append(started, w.ID)
	}
	return started, nil
}

// removeIfUnchanged removes each member whose score is still the flushed
// one; a newer score written meanwhile stays for the next pass.
var removeIfUnchanged = redis.NewScript(`
local removed = 0
for i = 1, #ARGV, 2 do
  local score = redis.call('ZSCORE', KEYS[1], ARGV[i])
  if score and tonumber(score) == tonumber(ARGV[i + 1]) then
    removed = removed + redis.call('ZREM', KEYS[1], ARGV[i])
  end
end
return removed
`)

// flush moves the activity set into last_access_at in one statement.
func (r *TTLRunner) flush(ctx context.Context) (int, error) {
	entries, err := r.redis.ZRangeWithScores(ctx, ActivityKey, 0, -1).Result()
	if err != nil {
		return 0, fmt.Errorf("read activity: %w", err)
	}
	if len(entries) == 0 {
		return 0, nil
	}
	accesses := make([]workspace.Access, 0, len(entries))
	for _, e := range entries {
		id, _ := e.Member.(string)
		accesses = append(accesses, workspace.Access{WorkspaceID: id, At: time.Unix(int64(e.Score), 0)})
	}
	if err := r.svc.RecordAccess(ctx, accesses); err != nil {
		return 0, err
	}
	return len(entries), r.ack(ctx, entries)
}

// ack removes flushed entries, keeping any whose score rose meanwhile.
func (r *TTLRunner) ack(ctx context.Context, entries []redis.Z) error {
	args := make([]any, 0, 2*len(entries))
	for _, e := range entries {
		args = append(args, e.Member, strconv.FormatFloat(e.Score, 'f', -1, 64))
	}
	if err := removeIfUnchanged.Run(ctx, r.redis, []string{ActivityKey}, args...).Err(); err != nil {
		return fmt.Errorf("remove flushed activity: %w", err)
	}
	return nil
}
