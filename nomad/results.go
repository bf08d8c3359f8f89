package nomad

import (
	"context"
	"io"
	"strconv"
	"sync"

	"github.com/hashicorp/nomad/api"

	"github.com/codehub-io/codehub/archive"
	"github.com/codehub-io/codehub/controller"
)

// allocCache remembers what never changes once an allocation is
// client-terminal: its task states and, for failed batch jobs, the
// CODEHUB_ERROR from its log, and for failed workspaces the end of their
// stderr. Each is read once, until the job is purged.
type allocCache struct {
	states  perAlloc[map[string]*api.TaskState]
	codes   perAlloc[archive.Code]
	outputs perAlloc[string]
	stops   perAlloc[archive.Outcome]
}

func newAllocCache() *allocCache { return &allocCache{} }

func (c *allocCache) forget(allocID string) {
	c.states.forget(allocID)
	c.codes.forget(allocID)
	c.outputs.forget(allocID)
	c.stops.forget(allocID)
}

// perAlloc holds one value per allocation id, safe for concurrent use.
type perAlloc[T any] struct {
	mu sync.Mutex
	m  map[string]T
}

func (p *perAlloc[T]) get(allocID string) (T, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	v, ok := p.m[allocID]
	return v, ok
}

func (p *perAlloc[T]) put(allocID string, v T) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.m == nil {
		p.m = make(map[string]T)
	}
	p.m[allocID] = v
}

func (p *perAlloc[T]) forget(allocID string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.m, allocID)
}

// errorCode reads the tail of a failed batch allocation's stdout and returns
// the code of its last result line.
func (b *Backend) errorCode(ctx context.Context, a *api.AllocationListStub) (archive.Code, error) {
	if code, ok := b.allocs.codes.get(a.ID); ok {
		return code, nil
	}
	// Nomad answers 404 for the logs of a task that never started.
	if neverStarted(a) {
		b.allocs.codes.put(a.ID, archive.CodeUnknown)
		return archive.CodeUnknown, nil
	}
	body, err := b.logTail(ctx, a, taskName(a), "stdout", archive.ResultTail)
	if err != nil {
		return "", err
	}
	defer body.Close()
	code, err := archive.ResultCode(body, archive.ResultTail)
	if err != nil {
		return "", err
	}
	b.allocs.codes.put(a.ID, code)
	return code, nil
}

// stopOutcome reads the result line of the stop-archive task of a
// workspace allocation that ended, once per allocation. A task that never
// started has none.
func (b *Backend) stopOutcome(ctx context.Context, a *api.AllocationListStub) (archive.Outcome, error) {
	if out, ok := b.allocs.stops.get(a.ID); ok {
		return out, nil
	}
	if ts := a.TaskStates[stopArchiveTask]; ts == nil || ts.StartedAt.IsZero() {
		out := archive.Outcome{Code: archive.CodeUnknown}
		b.allocs.stops.put(a.ID, out)
		return out, nil
	}
	body, err := b.logTail(ctx, a, stopArchiveTask, "stdout", archive.ResultTail)
	if err != nil {
		return archive.Outcome{}, err
	}
	defer body.Close()
	out, err := archive.LastResult(body, archive.ResultTail)
	if err != nil {
		return archive.Outcome{}, classify("read logs of "+a.ID, err)
	}
	b.allocs.stops.put(a.ID, out)
	return out, nil
}

// failedOutput returns the end of what task of a failed allocation (a
// workspace's, or a prebuild's build) wrote to stderr, read once per
// allocation; "" when it never ran.
func (b *Backend) failedOutput(ctx context.Context, a *api.AllocationListStub, task string) (string, error) {
	if out, ok := b.allocs.outputs.get(a.ID); ok {
		return out, nil
	}
	if neverStarted(a) {
		b.allocs.outputs.put(a.ID, "")
		return "", nil
	}
	body, err := b.logTail(ctx, a, task, "stderr", controller.OutputBytes)
	if err != nil {
		return "", err
	}
	defer body.Close()
	raw, err := io.ReadAll(body)
	if err != nil {
		return "", classify("read logs of "+a.ID, err)
	}
	out := string(raw)
	b.allocs.outputs.put(a.ID, out)
	return out, nil
}

// neverStarted reports whether a's task states are known and no task ever
// started: an artifact download, template or driver failed first, so the
// job printed nothing.
func neverStarted(a *api.AllocationListStub) bool {
	if len(a.TaskStates) == 0 {
		return false
	}
	for _, ts := range a.TaskStates {
		if ts == nil || !ts.StartedAt.IsZero() {
			return false
		}
		for _, ev := range ts.Events {
			if ev.Type == api.TaskStarted {
				return false
			}
		}
	}
	return true
}

// taskName is the task whose output explains the allocation: the first
// that failed (a workspace's first-start task before its program), or the
// single task of a batch allocation (named after its kind).
func taskName(a *api.AllocationListStub) string {
	names := sortedTaskNames(a.TaskStates)
	for _, name := range names {
		if ts := a.TaskStates[name]; ts != nil && ts.Failed {
			return name
		}
	}
	for _, name := range names {
		return name
	}
	_, kind, _ := controller.ParseJobName(a.JobID)
	return string(kind)
}

// logTail opens the last size bytes of what task of the allocation wrote
// to stream (stdout or stderr). Nomad answers 404 for a task that never
// started: callers check neverStarted first.
func (b *Backend) logTail(ctx context.Context, a *api.AllocationListStub, task, stream string, size int) (io.ReadCloser, error) {
	q := b.query(ctx)
	q.Params = map[string]string{
		"task":   task,
		"type":   stream,
		"plain":  "true",
		"origin": "end",
		"offset": strconv.Itoa(size),
	}
	body, err := b.client.Raw().Response("/v1/client/fs/logs/"+a.ID, q)
	if err != nil {
		return nil, classify("read logs of "+a.ID, err)
	}
	return struct {
		io.Reader
		io.Closer
	}{io.LimitReader(body, int64(size)), body}, nil
}
