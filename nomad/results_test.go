package nomad

import (
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"
)

func TestNeverStarted(t *testing.T) {
	events := func(types ...string) *api.TaskState {
		ts := &api.TaskState{State: "dead", Failed: true}
		for _, typ := range types {
			ts.Events = append(ts.Events, &api.TaskEvent{Type: typ})
		}
		return ts
	}
	for _, tc := range []struct {
		name   string
		states map[string]*api.TaskState
		want   bool
	}{
		{"states unknown", nil, false},
		{"artifact download failed", map[string]*api.TaskState{"archive": events(api.TaskReceived, api.TaskSetup, api.TaskDownloadingArtifacts, api.TaskArtifactDownloadFailed, api.TaskNotRestarting)}, true},
		{"ran and failed", map[string]*api.TaskState{"archive": events(api.TaskReceived, api.TaskStarted, api.TaskTerminated, api.TaskNotRestarting)}, false},
		{"start time without the event", map[string]*api.TaskState{"archive": {State: "dead", StartedAt: time.Unix(1, 0), Events: events(api.TaskTerminated).Events}}, false},
		{"nil state is unknown", map[string]*api.TaskState{"archive": nil}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := neverStarted(&api.AllocationListStub{TaskStates: tc.states}); got != tc.want {
				t.Fatalf("neverStarted = %v, want %v", got, tc.want)
			}
		})
	}
}
