package workspace

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/codehub-io/codehub/archive"
)

// ArchiveStore is the part of the archive store the service reads.
type ArchiveStore interface {
	List(ctx context.Context, workspaceID string) (archive.Listing, error)
	Stat(ctx context.Context, key string) (archive.Meta, error)
	// Open reads a complete archive as stored, checking it against its
	// meta as it is read (archive.Store.Open).
	Open(ctx context.Context, key string) (io.ReadCloser, archive.Meta, error)
}

// Archive is one complete archive of a workspace's home.
type Archive struct {
	// ID names the archive among its workspace's: the op id that made it.
	ID        string
	Key       string
	CreatedAt time.Time
	// Size is the compressed size in bytes of the archive's own object.
	Size int64
	// Parent is the archive an incremental archive builds on ("" for one
	// complete on its own); its download is made from its whole chain, so
	// its length is not known in advance.
	Parent string
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
		out = append(out, Archive{ID: archive.OpID(key), Key: key, CreatedAt: meta.CreatedAt, Size: meta.Size, Parent: meta.Parent,
			Current: w.ArchiveKey != nil && *w.ArchiveKey == key})
	}
	return out, nil
}

// ErrArchiveNotFound: the workspace has no complete archive of that id.
var ErrArchiveNotFound = errors.New("archive not found")

// OpenArchive opens the complete archive archiveID of the live workspace id
// for download: the stored bytes (home.tar.zst), checked against the
// archive's sha256 and size as they are read, so a damaged archive fails
// its last read instead of completing. An id that names no complete
// archive of the workspace is ErrArchiveNotFound.
func (s *Service) OpenArchive(ctx context.Context, id, archiveID string) (io.ReadCloser, Archive, error) {
	if s.opts.Archives == nil {
		return nil, Archive{}, ErrNoArchiveStore
	}
	w, err := s.Get(ctx, id)
	if err != nil {
		return nil, Archive{}, err
	}
	if !validArchiveID(archiveID) {
		return nil, Archive{}, fmt.Errorf("%w: %q", ErrArchiveNotFound, archiveID)
	}
	key := archive.Key(id, archiveID)
	if w.ArchiveKey != nil && archive.OwnedBy(*w.ArchiveKey, id) && archive.OpID(*w.ArchiveKey) == archiveID {
		// A builder's prebuilt home is named after its commit too.
		key = *w.ArchiveKey
	}
	body, meta, err := s.opts.Archives.Open(ctx, key)
	if errors.Is(err, archive.ErrArchiveNotFound) || errors.Is(err, archive.ErrMetaNotFound) {
		return nil, Archive{}, fmt.Errorf("%w: %s", ErrArchiveNotFound, archiveID)
	}
	if err != nil {
		return nil, Archive{}, fmt.Errorf("open archive %s: %w", key, err)
	}
	return body, Archive{ID: archiveID, Key: key, CreatedAt: meta.CreatedAt, Size: meta.Size, Parent: meta.Parent,
		Current: w.ArchiveKey != nil && *w.ArchiveKey == key}, nil
}

// validArchiveID accepts op ids as NewID makes them: 26 characters of
// lower-case Crockford base32. Anything else could not name an archive,
// and must not reach an S3 key.
func validArchiveID(id string) bool {
	if len(id) != 26 {
		return false
	}
	for _, c := range id {
		if !strings.ContainsRune("0123456789abcdefghjkmnpqrstvwxyz", c) {
			return false
		}
	}
	return true
}
