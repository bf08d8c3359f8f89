package controller

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/codehub-io/codehub/workspace"
)

// acted is what a pass did to one workspace.
type acted struct {
	// after is the workspace as the pass leaves it.
	after workspace.Workspace
	err   error
	// write: the plan wrote the row (the pass rereads it next time).
	write bool
	// settled is set when the plan left the workspace as it was.
	settled *settledPlan
	stats   TickStats
}

// add counts another workspace's share of a pass.
func (s *TickStats) add(o TickStats) {
	s.Writes += o.Writes
	s.Steps += o.Steps
}

// waitingLongest orders a pass: the workspace whose request is oldest
// first (desired state set, else created), so that in a wave of requests
// none waits for later ones, and a pass cut short picks up where the
// oldest requests still wait.
func waitingLongest(ws []*workspace.Workspace) []*workspace.Workspace {
	since := func(w *workspace.Workspace) time.Time {
		if w.DesiredAt != nil {
			return *w.DesiredAt
		}
		return w.CreatedAt
	}
	out := slices.Clone(ws)
	slices.SortStableFunc(out, func(a, b *workspace.Workspace) int {
		return cmp.Or(since(a).Compare(since(b)), cmp.Compare(a.ID, b.ID))
	})
	return out
}

// actAll runs one for each workspace in order, c.cfg.Parallel at a time,
// each workspace by one worker only, and returns what each it reached did,
// in order. A result whose observation is too old stops the workspaces
// not begun yet (errStaleSnapshot); a deposed leader (ErrDeposed) or the
// end of ctx also cancels those under way. It returns once every worker
// is done.
func (c *WorkspaceController) actAll(ctx context.Context, ws []*workspace.Workspace, one func(context.Context, workspace.Workspace) acted) ([]acted, error) {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	results := make([]acted, len(ws))
	reached := make([]bool, len(ws))
	var (
		mu      sync.Mutex
		stopped error
	)
	stop := func(err error) {
		mu.Lock()
		defer mu.Unlock()
		if stopped == nil {
			stopped = err
		}
	}
	// begins reports whether another workspace may begin: none does once
	// the pass is stopped or cancelled.
	begins := func() bool {
		mu.Lock()
		defer mu.Unlock()
		return stopped == nil && ctx.Err() == nil
	}
	next := make(chan int)
	var wg sync.WaitGroup
	for range max(c.cfg.Parallel, 1) {
		wg.Go(func() {
			for i := range next {
				if !begins() {
					continue
				}
				r := one(ctx, *ws[i])
				results[i], reached[i] = r, true
				switch {
				case errors.Is(r.err, errStaleSnapshot):
					stop(r.err)
				case errors.Is(r.err, ErrDeposed):
					stop(r.err)
					cancel(r.err)
				}
			}
		})
	}
dispatch:
	for i := range ws {
		if !begins() {
			break
		}
		select {
		case next <- i:
		case <-ctx.Done():
			break dispatch
		}
	}
	close(next)
	wg.Wait()
	// In place: at 10 000 workspaces a second slice of results would be
	// 6 MB more to allocate and copy on every pass.
	out := results[:0]
	for i, r := range results {
		if reached[i] {
			out = append(out, r)
		}
	}
	if stopped != nil {
		return out, stopped
	}
	return out, context.Cause(ctx)
}
