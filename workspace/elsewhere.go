package workspace

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/oklog/ulid/v2"

	"github.com/codehub-io/codehub/store"
)

// LossError refuses a restore elsewhere that was not confirmed with the
// archive key it would restore: it says what would be lost.
type LossError struct {
	ArchiveKey string
	// ArchivedAt is the time up to which the archive holds the home: when
	// it was made, or the last snapshot that found the home unchanged.
	ArchivedAt time.Time
	Node       string
}

func (e *LossError) Error() string {
	return fmt.Sprintf("restoring archive %s (the home as of %s) on another node loses every change made in the home since then, which only node %s holds; to accept that, confirm with that archive key",
		e.ArchiveKey, e.ArchivedAt.UTC().Format(time.RFC3339), e.Node)
}

// RestoreElsewhere gives up the home on a node that is down or gone for
// the workspace's last archive, restored on another node. confirm must be
// that archive's key: the admin accepts losing every change made since it
// (a *LossError otherwise, which says so). Only a home restored from that
// archive qualifies; a never-archived one has no other copy and waits for
// its node.
func (s *Service) RestoreElsewhere(ctx context.Context, id, confirm string) (Workspace, error) {
	var w Workspace
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		cur, err := store.LockLiveWorkspace[Workspace](ctx, tx, id)
		if err != nil {
			return notFound(id, err)
		}
		if err := elsewhereAllowed(cur, confirm); err != nil {
			return err
		}
		w, err = store.AbandonRestoredVolume[Workspace](ctx, tx, id, cur.Version)
		if errors.Is(err, store.ErrConflict) {
			return fmt.Errorf("%w: workspace changed meanwhile", ErrInvalidState)
		}
		return err
	})
	if err != nil {
		return Workspace{}, fmt.Errorf("restore workspace %s elsewhere: %w", id, err)
	}
	s.logger.Info("workspace home given up for its last archive", "workspace_id", id, "archive_key", confirm)
	return w, nil
}

// elsewhereAllowed is the pure judgement of RestoreElsewhere.
func elsewhereAllowed(w Workspace, confirm string) error {
	v := w.Conditions[CondVolumeReady]
	switch {
	case w.Operation != OpNone:
		return fmt.Errorf("%w: %s is running", ErrInvalidState, w.Operation)
	case v.Reason != ReasonNodeDown && v.Reason != ReasonNodeGone:
		return fmt.Errorf("%w: the home's node serves it (a drained node's homes move by evacuating it)", ErrInvalidState)
	case w.ArchiveKey == nil:
		return fmt.Errorf("%w: never archived: node %s holds the only copy of the home; it waits for the node", ErrInvalidState, v.Node)
	case w.RestoreMarker == nil || *w.RestoreMarker != *w.ArchiveKey:
		return fmt.Errorf("%w: the archive holds the home already", ErrInvalidState)
	case confirm != *w.ArchiveKey:
		at := archiveTime(*w.ArchiveKey)
		if rp := RecoveryOf(w); rp.ArchivedAt != nil {
			at = *rp.ArchivedAt
		}
		return &LossError{ArchiveKey: *w.ArchiveKey, ArchivedAt: at, Node: v.Node}
	}
	return nil
}

// archiveTime is when an archive (archives/{id}/{op id}/home.tar.zst) was
// made: its op id is a ULID, taken when the archiving began.
func archiveTime(key string) time.Time {
	parts := strings.Split(key, "/")
	if len(parts) != 4 {
		return time.Time{}
	}
	op, err := ulid.ParseStrict(strings.ToUpper(parts[2]))
	if err != nil {
		return time.Time{}
	}
	return ulid.Time(op.Time())
}
