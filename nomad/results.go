package nomad

import (
	"context"
	"io"
	"sync"

	"github.com/hashicorp/nomad/api"

	"github.com/codehub-io/codehub/archive"
)

// logTail is how much of a failed job's stdout is read: the result line is
// the last one the job prints.
const logTail = 64 << 10

// allocCache remembers what never changes once an allocation is
// client-terminal: its task states and, for failed batch jobs, the
// CODEHUB_ERROR from its log. Each is read once, until the job is purged.
type allocCache struct {
	mu     sync.Mutex
	states map[string]map[string]*api.TaskState
	codes  map[string]string
}

func newAllocCache() *allocCache {
	return &allocCache{states: make(map[string]map[string]*api.TaskState), codes: make(map[string]string)}
}

func (c *allocCache) taskStates(allocID string) (map[string]*api.TaskState, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	s, ok := c.states[allocID]
	return s, ok
}

func (c *allocCache) putTaskStates(allocID string, s map[string]*api.TaskState) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.states[allocID] = s
}

func (c *allocCache) code(allocID string) (string, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	code, ok := c.codes[allocID]
	return code, ok
}

func (c *allocCache) putCode(allocID, code string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.codes[allocID] = code
}

func (c *allocCache) forget(allocID string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.states, allocID)
	delete(c.codes, allocID)
}

// errorCode reads the tail of a failed batch allocation's stdout and returns
// the code of its last result line.
func (b *Backend) errorCode(ctx context.Context, a *api.AllocationListStub) (string, error) {
	if code, ok := b.allocs.code(a.ID); ok {
		return code, nil
	}
	// Nomad answers 404 for the logs of a task that never started.
	if neverStarted(a) {
		b.allocs.putCode(a.ID, string(archive.CodeUnknown))
		return string(archive.CodeUnknown), nil
	}
	q := b.query(ctx)
	q.Params = map[string]string{
		"task":   taskName(a),
		"type":   "stdout",
		"plain":  "true",
		"origin": "end",
		"offset": "65536",
	}
	body, err := b.client.Raw().Response("/v1/client/fs/logs/"+a.ID, q)
	if err != nil {
		return "", classify("read logs of "+a.ID, err)
	}
	defer body.Close()
	code, err := archive.ResultCode(io.LimitReader(body, logTail), logTail)
	if err != nil {
		return "", err
	}
	b.allocs.putCode(a.ID, string(code))
	return string(code), nil
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

// taskName is the single task of a batch allocation (named after its kind).
func taskName(a *api.AllocationListStub) string {
	for name := range a.TaskStates {
		return name
	}
	_, kind, _ := parseJobID(a.JobID)
	return string(kind)
}
