package controller

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/codehub-io/codehub/workspace"
)

func TestWaitingLongest(t *testing.T) {
	at := func(s int) *time.Time {
		v := time.Date(2026, 11, 28, 9, 0, s, 0, time.UTC)
		return &v
	}
	ws := []*workspace.Workspace{
		{ID: "d", CreatedAt: *at(0), DesiredAt: at(30)},
		{ID: "c", CreatedAt: *at(20)},
		{ID: "b", CreatedAt: *at(1), DesiredAt: at(10)},
		{ID: "a", CreatedAt: *at(5), DesiredAt: at(10)},
		{ID: "e", CreatedAt: *at(2)},
	}
	var got []string
	for _, w := range waitingLongest(ws) {
		got = append(got, w.ID)
	}
	// The oldest request first: e created at 2 s, a and b asked at 10 s
	// (by id), c created at 20 s, d asked at 30 s.
	if want := []string{"e", "a", "b", "c", "d"}; !slices.Equal(got, want) {
		t.Fatalf("order %v, want %v", got, want)
	}
	if ws[0].ID != "d" {
		t.Fatal("waitingLongest reordered its argument")
	}
}

func workspaces(n int) []*workspace.Workspace {
	out := make([]*workspace.Workspace, n)
	for i := range out {
		out[i] = &workspace.Workspace{ID: fmt.Sprintf("ws-%03d", i)}
	}
	return out
}

func TestActAllBoundedOncePerWorkspace(t *testing.T) {
	for _, parallel := range []int{0, 1, 4} {
		t.Run(fmt.Sprint(parallel), func(t *testing.T) {
			c := &WorkspaceController{cfg: Config{Parallel: parallel}}
			var running, most atomic.Int32
			var mu sync.Mutex
			seen := map[string]int{}
			var started []string
			res, err := c.actAll(context.Background(), workspaces(20), func(_ context.Context, w workspace.Workspace) acted {
				now := running.Add(1)
				for m := most.Load(); now > m && !most.CompareAndSwap(m, now); m = most.Load() {
				}
				mu.Lock()
				seen[w.ID]++
				started = append(started, w.ID)
				mu.Unlock()
				time.Sleep(2 * time.Millisecond)
				running.Add(-1)
				return acted{after: w, stats: TickStats{Writes: 1}}
			})
			if err != nil {
				t.Fatal(err)
			}
			if len(res) != 20 {
				t.Fatalf("%d results, want 20", len(res))
			}
			for i, r := range res {
				if want := fmt.Sprintf("ws-%03d", i); r.after.ID != want {
					t.Fatalf("result %d is %s, want %s: results keep the pass's order", i, r.after.ID, want)
				}
				if seen[r.after.ID] != 1 {
					t.Fatalf("%s acted on %d times", r.after.ID, seen[r.after.ID])
				}
			}
			if limit := int32(max(parallel, 1)); most.Load() > limit {
				t.Fatalf("%d at once, limit %d", most.Load(), limit)
			}
			if parallel > 1 && most.Load() < 2 {
				t.Fatalf("never more than %d at once with parallel %d", most.Load(), parallel)
			}
			// Workers take workspaces in the pass's order.
			if parallel <= 1 && !slices.IsSorted(started) {
				t.Fatalf("one worker began them out of order: %v", started)
			}
		})
	}
}

func TestActAllStopsAtStaleSnapshot(t *testing.T) {
	c := &WorkspaceController{cfg: Config{Parallel: 2}}
	var began atomic.Int32
	res, err := c.actAll(context.Background(), workspaces(50), func(_ context.Context, w workspace.Workspace) acted {
		began.Add(1)
		if w.ID == "ws-003" {
			return acted{after: w, err: fmt.Errorf("%w: observed 6s ago", errStaleSnapshot)}
		}
		time.Sleep(5 * time.Millisecond)
		return acted{after: w}
	})
	if !errors.Is(err, errStaleSnapshot) {
		t.Fatalf("err %v, want the stale snapshot", err)
	}
	// Those under way when ws-003 stopped the pass finish; no more begin.
	if n := began.Load(); n > 6 || int(n) != len(res) {
		t.Fatalf("%d began, %d results: the pass went on after its observation grew old", n, len(res))
	}
}

func TestActAllDeposedCancelsWorkUnderWay(t *testing.T) {
	c := &WorkspaceController{cfg: Config{Parallel: 3}}
	deposed := make(chan struct{})
	var underWay sync.WaitGroup
	underWay.Add(2)
	var cancelled atomic.Int32
	res, err := c.actAll(context.Background(), workspaces(30), func(ctx context.Context, w workspace.Workspace) acted {
		switch w.ID {
		case "ws-000", "ws-001":
			// Under way when the leader learns it was deposed.
			underWay.Done()
			<-deposed
			select {
			case <-ctx.Done():
				cancelled.Add(1)
				return acted{after: w, err: ctx.Err()}
			case <-time.After(10 * time.Second):
				return acted{after: w}
			}
		case "ws-002":
			underWay.Wait()
			defer close(deposed)
			return acted{after: w, err: fmt.Errorf("%w: epoch 1, current 2", ErrDeposed)}
		}
		return acted{after: w}
	})
	if !errors.Is(err, ErrDeposed) {
		t.Fatalf("err %v, want deposed", err)
	}
	if cancelled.Load() != 2 {
		t.Fatalf("%d of the 2 workspaces under way saw the cancellation", cancelled.Load())
	}
	if len(res) != 3 {
		t.Fatalf("%d results, want the 3 begun", len(res))
	}
}
