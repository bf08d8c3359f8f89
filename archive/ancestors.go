package archive

import (
	"context"
	"errors"
	"fmt"
)

// Ancestors returns the archives the archives at keys build on (every key
// of their chains, Meta.Chain): as long as an archive is kept, so must they
// be, or it cannot be restored. stat reads an archive's meta (Store.Stat);
// a key whose archive is gone, was never completed, or whose object
// disagrees with its meta (it cannot be restored) has nothing to keep. Any
// other failure is returned, so that a caller deletes nothing it cannot
// tell is unneeded.
func Ancestors(ctx context.Context, keys []string, stat func(context.Context, string) (Meta, error)) (map[string]bool, error) {
	out := map[string]bool{}
	for _, key := range keys {
		meta, err := stat(ctx, key)
		if errors.Is(err, ErrArchiveNotFound) || errors.Is(err, ErrMetaNotFound) || errors.Is(err, ErrChecksumMismatch) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("read the chain of %s: %w", key, err)
		}
		for _, k := range meta.Chain {
			out[k] = true
		}
	}
	return out, nil
}
