package store

import (
	"context"
	"fmt"
)

// LeaderLockKey is the session advisory lock held by the coordinator leader.
const LeaderLockKey int64 = 0x636f6f7264 // "coord"

// TryLeaderLock tries to take the leader lock on the session of q, which
// must be a dedicated connection: the lock lives as long as that session.
func TryLeaderLock(ctx context.Context, q Querier) (bool, error) {
	var ok bool
	if err := q.QueryRow(ctx, `SELECT pg_try_advisory_lock($1)`, LeaderLockKey).Scan(&ok); err != nil {
		return false, fmt.Errorf("try leader lock: %w", err)
	}
	return ok, nil
}

// BumpEpoch starts a new leader term for holder and returns its epoch.
// Controller writes of every earlier term fail from then on.
func BumpEpoch(ctx context.Context, q Querier, holder string) (int64, error) {
	var epoch int64
	err := q.QueryRow(ctx, `UPDATE coordinator_epoch
		SET epoch = epoch + 1, holder = $1, acquired_at = now() RETURNING epoch`, holder).Scan(&epoch)
	if err != nil {
		return 0, fmt.Errorf("bump leader epoch: %w", err)
	}
	return epoch, nil
}

// CurrentEpoch returns the epoch of the current leader term.
func CurrentEpoch(ctx context.Context, q Querier) (int64, error) {
	var epoch int64
	if err := q.QueryRow(ctx, `SELECT epoch FROM coordinator_epoch`).Scan(&epoch); err != nil {
		return 0, fmt.Errorf("read leader epoch: %w", err)
	}
	return epoch, nil
}
