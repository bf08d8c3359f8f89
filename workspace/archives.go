package workspace

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/codehub-io/codehub/archive"
)

// ArchiveStore is the part of the archive store the service reads.
type ArchiveStore interface {
	List(ctx context.Context, workspaceID string) (archive.Listing, error)
	Stat(ctx context.Context, key string) (archive.Meta, error)
}

// Archive is one complete archive of a workspace's home.
type Archive struct {
	Key       string
	CreatedAt time.Time
	// Size is the compressed size in bytes.
	Size int64
	// Current marks the archive a restore reads (the workspace's
	// archive_key); the others are older ones the GC has not removed yet.
	Current bool
}

// ErrNoArchiveStore: the service was built without an archive store.
var ErrNoArchiveStore = errors.New("no archive store configured")

// Archives lists the complete archives of a live workspace, newest first.
// Unfinished archives (an object without its meta) are left out: nothing
// can restore from them.
func (s *Service) Archives(ctx context.Context, id string) ([]Archive, error) {
	if s.opts.Archives == nil {
		return nil, ErrNoArchiveStore
	}
	w, err := s.Get(ctx, id)
	if err != nil {
		return nil, err
	}
	l, err := s.opts.Archives.List(ctx, id)
	if err != nil {
		return nil, fmt.Errorf("list archives of %s: %w", id, err)
	}
	out := make([]Archive, 0, len(l.Complete))
	for _, key := range l.Complete {
		meta, err := s.opts.Archives.Stat(ctx, key)
		if errors.Is(err, archive.ErrArchiveNotFound) || errors.Is(err, archive.ErrMetaNotFound) {
			// Deleted (by the GC) since the listing.
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("read archive %s: %w", key, err)
		}
		out = append(out, Archive{Key: key, CreatedAt: meta.CreatedAt, Size: meta.Size,
			Current: w.ArchiveKey != nil && *w.ArchiveKey == key})
	}
	return out, nil
}
