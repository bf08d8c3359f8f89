package local

import (
	"context"
	"reflect"
	"time"

	"github.com/codehub-io/codehub/controller"
)

var _ controller.Notifier = (*Backend)(nil)

// watchInterval paces Watch. Each round reads the data dir and probes only
// workspaces that have not answered their health check yet.
const watchInterval = 200 * time.Millisecond

// Watch calls wake whenever what Observe would report changes: a process
// starts or ends, a job finishes, a starting workspace begins to answer.
// The controller then records completions without waiting for its next
// pass. It is only a hint, and it returns nil when ctx ends: an error
// would end the leadership it runs under.
func (b *Backend) Watch(ctx context.Context, wake func()) error {
	ticker := time.NewTicker(watchInterval)
	defer ticker.Stop()
	// Compared with nothing, the first look wakes the controller once if
	// anything exists: one early pass, and no change can slip in unseen
	// before the first look.
	last := controller.Snapshot{Workspaces: map[string]controller.Observed{}}
	var failing bool
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-ticker.C:
		}
		snap, err := b.watchSnapshot(ctx)
		if err != nil {
			if !failing {
				b.logger.Warn("watch data dir", "error", err)
			}
			failing = true
			continue
		}
		failing = false
		if !reflect.DeepEqual(snap, last) {
			wake()
		}
		last = snap
	}
}

// watchSnapshot is Observe without re-probing workspaces already known to
// answer: their readiness comes from the cache Observe and Resolve keep.
func (b *Backend) watchSnapshot(ctx context.Context) (controller.Snapshot, error) {
	l, err := b.list()
	if err != nil {
		return controller.Snapshot{}, err
	}
	for wsID, w := range l.workspaces {
		if !w.live || w.state.Stopped {
			continue
		}
		w.ready = b.isReady(wsID, w.state.Process)
		if !w.ready && b.healthy(ctx, w.state.Port) {
			b.setReady(wsID, w.state.Process, true)
			w.ready = true
		}
		l.workspaces[wsID] = w
	}
	return assemble(l), nil
}
