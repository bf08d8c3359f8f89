// Package activity records that workspaces are in use: the proxy marks a
// workspace on every request and WebSocket message, the marks live in
// memory (one per workspace per second at most) and are flushed every 30 s
// to the Redis ZSET codehub:activity with ZADD GT, where the TTL runner
// picks them up. It never touches the database.
package activity

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/redis/go-redis/v9"
)

// Key is the ZSET holding, per workspace id, the unix second of its latest
// recorded activity.
const Key = "codehub:activity"

// FlushInterval is how often marks reach Redis.
const FlushInterval = 30 * time.Second

// forgetAfter drops a workspace's in-memory entry once it has been idle
// that long, so memory follows the set of recently used workspaces.
const forgetAfter = time.Hour

// entry is one workspace's latest mark and the latest mark flushed.
type entry struct {
	last    atomic.Int64
	flushed int64 // touched only by Flush, under flushMu
}

// Recorder buffers activity marks in memory and flushes them to Redis.
type Recorder struct {
	logger  hclog.Logger
	rdb     redis.Cmdable
	now     func() time.Time
	entries sync.Map // workspace id -> *entry
	flushMu sync.Mutex
}

// NewRecorder returns a recorder writing to rdb.
func NewRecorder(logger hclog.Logger, rdb redis.Cmdable) *Recorder {
	return &Recorder{logger: logger, rdb: rdb, now: time.Now}
}

// Mark records activity of a workspace now. It is cheap enough to call on
// every read and write of a proxied connection: in the common case it is
// one map load and one atomic compare.
func (r *Recorder) Mark(workspaceID string) {
	now := r.now().Unix()
	v, ok := r.entries.Load(workspaceID)
	if !ok {
		v, _ = r.entries.LoadOrStore(workspaceID, &entry{})
	}
	e := v.(*entry)
	for {
		old := e.last.Load()
		if old >= now || e.last.CompareAndSwap(old, now) {
			return
		}
	}
}

// Flush writes every mark newer than the last flush with one ZADD GT, so a
// newer timestamp already in Redis (from another replica) is never lowered.
func (r *Recorder) Flush(ctx context.Context) error {
	r.flushMu.Lock()
	defer r.flushMu.Unlock()
	var members []redis.Z
	var pending []*entry
	idleBefore := r.now().Add(-forgetAfter).Unix()
	r.entries.Range(func(k, v any) bool {
		e := v.(*entry)
		last := e.last.Load()
		if last > e.flushed {
			members = append(members, redis.Z{Score: float64(last), Member: k.(string)})
			pending = append(pending, e)
			return true
		}
		if last < idleBefore {
			// A mark racing this delete lands in the dropped entry and is
			// lost; the next second's mark creates a fresh one.
			r.entries.Delete(k)
		}
		return true
	})
	if len(members) == 0 {
		return nil
	}
	if err := r.rdb.ZAddGT(ctx, Key, members...).Err(); err != nil {
		return fmt.Errorf("flush %d activity marks: %w", len(members), err)
	}
	for i, e := range pending {
		e.flushed = int64(members[i].Score)
	}
	return nil
}

// Run flushes every FlushInterval until ctx ends, then flushes once more so
// a clean shutdown loses nothing. A failed flush keeps its marks for the next.
func (r *Recorder) Run(ctx context.Context) error {
	return r.run(ctx, FlushInterval)
}

func (r *Recorder) run(ctx context.Context, interval time.Duration) error {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			final, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			err := r.Flush(final)
			cancel()
			if err != nil {
				r.logger.Warn("final activity flush failed", "error", err)
			}
			return ctx.Err()
		case <-t.C:
			if err := r.Flush(ctx); err != nil && !errors.Is(err, context.Canceled) {
				r.logger.Warn("activity flush failed", "error", err)
			}
		}
	}
}
