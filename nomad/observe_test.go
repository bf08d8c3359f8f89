package nomad

import (
	"fmt"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/codehub-io/codehub/archive"
	"github.com/codehub-io/codehub/controller"
	"github.com/codehub-io/codehub/workspace"
)

// Workspace ids of the observation fixture, one per situation.
const (
	wsReady    = "01aaaaaaaaaaaaaaaaaaaaaaaa"
	wsStarting = "01bbbbbbbbbbbbbbbbbbbbbbbb"
	wsStopping = "01cccccccccccccccccccccccc"
	wsArchive  = "01dddddddddddddddddddddddd"
	wsPull     = "01eeeeeeeeeeeeeeeeeeeeeeee"
	wsUnplaced = "01ffffffffffffffffffffffff"
	wsRestore  = "01gggggggggggggggggggggggg"
	wsStopped  = "01hhhhhhhhhhhhhhhhhhhhhhhh"
	wsDown     = "01jjjjjjjjjjjjjjjjjjjjjjjj"
	wsDrained  = "01kkkkkkkkkkkkkkkkkkkkkkkk"
	wsGhost    = "01mmmmmmmmmmmmmmmmmmmmmmmm"
)

// startingSince is when the program of the starting fixture workspace
// began running.
var startingSince = time.Date(2026, 11, 2, 9, 0, 0, 0, time.UTC)

// startingSubmitted is when its job's registration, of run runStarting,
// was submitted.
var startingSubmitted = startingSince.Add(-time.Minute)

const runStarting = "01runrunrunrunrunrunrunrun"

func managedMeta(wsID string, extra ...string) map[string]string {
	m := map[string]string{MetaManaged: "true", MetaWorkspaceID: wsID}
	for i := 0; i+1 < len(extra); i += 2 {
		m[extra[i]] = extra[i+1]
	}
	return m
}

func healthy(b bool) *api.AllocDeploymentStatus { return &api.AllocDeploymentStatus{Healthy: &b} }

func observeFixture(f *fakeNomad) {
	jobs := []*api.JobListStub{
		{ID: "ws-" + wsReady, Status: "running", JobModifyIndex: 10, Meta: managedMeta(wsReady)},
		{ID: "ws-" + wsStarting, Status: "running", JobModifyIndex: 10, SubmitTime: startingSubmitted.UnixNano(),
			Meta: managedMeta(wsStarting, MetaRunID, runStarting)},
		// A stopped registration is no start's submission.
		{ID: "ws-" + wsStopping, Status: "dead", Stop: true, JobModifyIndex: 20, SubmitTime: startingSubmitted.UnixNano(),
			Meta: managedMeta(wsStopping, MetaRunID, runStarting)},
		{ID: "ws-" + wsArchive + "-archive", Type: "batch", Status: "dead", JobModifyIndex: 10,
			Meta: managedMeta(wsArchive, MetaOpID, "01opopopopopopopopopopopop", MetaArchiveKey, "archives/k", MetaAttempt, "2")},
		{ID: "ws-" + wsPull, Status: "running", JobModifyIndex: 10, Meta: managedMeta(wsPull)},
		{ID: "ws-" + wsUnplaced, Status: "pending", JobModifyIndex: 10, Meta: managedMeta(wsUnplaced),
			JobSummary: &api.JobSummary{Summary: map[string]api.TaskGroupSummary{"workspace": {Queued: 1}}}},
		{ID: "ws-" + wsRestore + "-restore", Type: "batch", Status: "dead", JobModifyIndex: 10,
			Meta: managedMeta(wsRestore, MetaOpID, "01rrrrrrrrrrrrrrrrrrrrrrrr", MetaArchiveKey, "archives/r", MetaAttempt, "1")},
		{ID: "ws-" + wsStopped + "-archive", Type: "batch", Status: "dead", Stop: true, JobModifyIndex: 10,
			Meta: managedMeta(wsStopped, MetaOpID, "01opopopopopopopopopopopop", MetaArchiveKey, "archives/s", MetaAttempt, "1")},
		// Not codehub's: no mark, or a foreign name.
		{ID: "ws-" + wsReady + "-other", Meta: managedMeta(wsReady)},
		{ID: "ws-01zzzzzzzzzzzzzzzzzzzzzzzz", Meta: map[string]string{}},
	}
	terminated := func(code int) map[string]*api.TaskState {
		return map[string]*api.TaskState{"archive": {State: "dead", Failed: code != 0, Events: []*api.TaskEvent{
			{Type: api.TaskStarted, Time: 1},
			{Type: api.TaskTerminated, ExitCode: code, Time: 2},
		}}}
	}
	allocs := []*api.AllocationListStub{
		{ID: "a-ready", JobID: "ws-" + wsReady, CreateIndex: 11, ClientStatus: "running", DesiredStatus: "run", DeploymentStatus: healthy(true)},
		{ID: "a-starting", JobID: "ws-" + wsStarting, CreateIndex: 11, ClientStatus: "running", DesiredStatus: "run", ModifyTime: startingSince.UnixNano()},
		// Stopped job whose task is still being killed: live, not ready.
		{ID: "a-stopping", JobID: "ws-" + wsStopping, CreateIndex: 11, ClientStatus: "running", DesiredStatus: "stop", DeploymentStatus: healthy(true)},
		// An older attempt of the archive job must not shadow the current one.
		{ID: "a-archive-old", JobID: "ws-" + wsArchive + "-archive", CreateIndex: 5, ClientStatus: "complete", DesiredStatus: "run"},
		{ID: "a-archive", JobID: "ws-" + wsArchive + "-archive", CreateIndex: 12, ClientStatus: "failed", DesiredStatus: "run"},
		{ID: "a-pull", JobID: "ws-" + wsPull, CreateIndex: 11, ClientStatus: "pending", DesiredStatus: "run"},
		{ID: "a-restore", JobID: "ws-" + wsRestore + "-restore", CreateIndex: 11, ClientStatus: "complete", DesiredStatus: "run"},
		// Nomad reports a batch allocation it stopped as complete.
		{ID: "a-stopped", JobID: "ws-" + wsStopped + "-archive", CreateIndex: 11, ClientStatus: "complete", DesiredStatus: "stop"},
		// A live allocation of a purged workspace job still counts.
		{ID: "a-orphan", JobID: "ws-" + wsRestore, CreateIndex: 3, ClientStatus: "running", DesiredStatus: "stop"},
	}
	volumes := []*api.HostVolumeStub{
		{ID: "v1", Name: "ws-" + wsReady + "-home", State: api.HostVolumeStateReady, NodeID: "n-up"},
		{ID: "v2", Name: "ws-" + wsStarting + "-home", State: api.HostVolumeStateReady, NodeID: "n-up"},
		{ID: "v3", Name: "ws-" + wsStopping + "-home", State: api.HostVolumeStatePending, NodeID: "n-up"},
		{ID: "v4", Name: "ws-not-a-workspace-home", State: api.HostVolumeStateReady},
		// Nomad keeps calling the volume of a node that is down ready.
		{ID: "v5", Name: "ws-" + wsDown + "-home", State: api.HostVolumeStateReady, NodeID: "n-down"},
		{ID: "v6", Name: "ws-" + wsDrained + "-home", State: api.HostVolumeStateReady, NodeID: "n-drained"},
		{ID: "v7", Name: "ws-" + wsGhost + "-home", State: api.HostVolumeStateReady, NodeID: "n-removed"},
	}
	f.json("GET /v1/nodes", []*api.NodeListStub{
		{ID: "n-up", Name: "node-up", Status: api.NodeStatusReady, SchedulingEligibility: api.NodeSchedulingEligible},
		{ID: "n-down", Name: "node-down", Status: api.NodeStatusDown, SchedulingEligibility: api.NodeSchedulingEligible},
		{ID: "n-drained", Name: "node-drained", Status: api.NodeStatusReady, SchedulingEligibility: api.NodeSchedulingIneligible},
	})
	services := []*api.ServiceRegistrationListStub{{Namespace: "default", Services: []*api.ServiceRegistrationStub{
		{ServiceName: "ws-" + wsReady}, {ServiceName: "ws-" + wsStarting}, {ServiceName: "web"},
	}}}
	// Listed without task states; the ones that explain a state are read.
	f.json("GET /v1/allocation/a-archive", &api.Allocation{ID: "a-archive", ClientStatus: "failed", TaskStates: terminated(1)})
	f.json("GET /v1/allocation/a-stopped", &api.Allocation{ID: "a-stopped", ClientStatus: "complete", TaskStates: map[string]*api.TaskState{
		"archive": {State: "dead", Events: []*api.TaskEvent{
			{Type: api.TaskStarted, Time: 1},
			{Type: api.TaskKilling, Time: 2},
			{Type: api.TaskTerminated, ExitCode: 1, Time: 3},
			{Type: api.TaskKilled, Time: 4},
		}},
	}})
	f.json("GET /v1/allocation/a-pull", &api.Allocation{ID: "a-pull", ClientStatus: "pending", TaskStates: map[string]*api.TaskState{
		"workspace": {State: "pending", Events: []*api.TaskEvent{
			{Type: api.TaskReceived},
			{Type: api.TaskDriverFailure, DriverError: "Failed to pull `codercom/code-server:nope`: manifest unknown"},
		}},
	}})
	f.json("GET /v1/jobs", jobs)
	f.json("GET /v1/allocations", allocs)
	f.json("GET /v1/volumes", volumes)
	f.json("GET /v1/services", services)
	f.json("GET /v1/client/allocation/a-starting/checks", api.AllocCheckStatuses{
		"c1": {Service: "ws-" + wsStarting, Status: "success"},
	})
	f.json("GET /v1/service/ws-"+wsStarting, []*api.ServiceRegistration{
		{ServiceName: "ws-" + wsStarting, JobID: "evil", AllocID: "a-evil"},
		{ServiceName: "ws-" + wsStarting, JobID: "ws-" + wsStarting, AllocID: "a-starting"},
	})
	f.handle("GET /v1/client/fs/logs/a-archive", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, "CODEHUB_JOB=archive\nRESULT=FAIL CODEHUB_ERROR=S3_ACCESS_ERROR DETAIL=first\nretrying\nRESULT=FAIL CODEHUB_ERROR=DISK_FULL DETAIL=\"no space\"\n")
	})
	f.json("GET /v1/job/ws-"+wsUnplaced+"/evaluations", []*api.Evaluation{
		{ID: "e1", CreateIndex: 10, FailedTGAllocs: map[string]*api.AllocationMetric{"workspace": {
			NodesEvaluated: 1, ConstraintFiltered: map[string]int{"missing drivers": 1},
		}}},
		{ID: "e0", CreateIndex: 9},
	})
}

func TestObserve(t *testing.T) {
	f := newFakeNomad(t)
	observeFixture(f)
	b := newTestBackend(t, f, testOptions())

	snap, err := b.Observe(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]controller.Observed{
		// A placed run started (RunStarted); one pulling its image (a
		// pending allocation) or never placed has not.
		wsReady: {VolumeExists: true, VolumeReady: true, VolumeID: "v1", NodeID: "n-up", Node: "node-up", ContainerLive: true, RunStarted: true, UpstreamReady: true},
		wsStarting: {VolumeExists: true, VolumeReady: true, VolumeID: "v2", NodeID: "n-up", Node: "node-up", ContainerLive: true, RunStarted: true, RunningSince: startingSince,
			Submitted: startingSubmitted, SubmittedRun: runStarting, UpstreamReady: true},
		wsStopping: {VolumeExists: true, VolumeID: "v3", NodeID: "n-up", Node: "node-up", ContainerLive: true},
		wsDown:     {VolumeExists: true, VolumeID: "v5", NodeID: "n-down", Node: "node-down", NodeAway: workspace.ReasonNodeDown},
		wsDrained:  {VolumeExists: true, VolumeReady: true, VolumeID: "v6", NodeID: "n-drained", Node: "node-drained", NodeAway: workspace.ReasonNodeIneligible, NodeDraining: true},
		wsGhost:    {VolumeExists: true, VolumeID: "v7", NodeID: "n-removed", Node: "n-removed", NodeAway: workspace.ReasonNodeGone},
		wsArchive: {Archive: &controller.JobResult{
			OpID: "01opopopopopopopopopopopop", ArchiveKey: "archives/k", Attempt: 2,
			Status: controller.JobFailed, ExitCode: 1, ErrorCode: "DISK_FULL", Message: "task archive exited with code 1",
		}},
		wsStopped: {Archive: &controller.JobResult{
			OpID: "01opopopopopopopopopopopop", ArchiveKey: "archives/s", Attempt: 1,
			Status: controller.JobFailed, ExitCode: -1, ErrorCode: "UNKNOWN", Message: "job stopped before it finished",
		}},
		wsPull: {ContainerLive: true, Preparing: true, Failure: &controller.Failure{
			Reason: workspace.ReasonImagePullFailed, Terminal: true,
			Message: "Failed to pull `codercom/code-server:nope`: manifest unknown",
		}},
		wsUnplaced: {Failure: &controller.Failure{
			Reason:  workspace.ReasonUnschedulable,
			Message: `no node can run it: group "workspace": constraint "missing drivers" filtered 1 node(s)`,
		}},
		wsRestore: {ContainerLive: true, Restore: &controller.JobResult{
			OpID: "01rrrrrrrrrrrrrrrrrrrrrrrr", ArchiveKey: "archives/r", Attempt: 1, Status: controller.JobSucceeded,
		}},
	}
	if !reflect.DeepEqual(snap.Workspaces, want) {
		for id, o := range snap.Workspaces {
			if !reflect.DeepEqual(o, want[id]) {
				t.Errorf("workspace %s:\n got %+v\nwant %+v", id, o, want[id])
			}
		}
		if len(snap.Workspaces) != len(want) {
			t.Errorf("observed %d workspaces, want %d", len(snap.Workspaces), len(want))
		}
	}

	// One call per list; targeted reads only where the listing asked.
	wantRoutes := []string{
		"GET /v1/allocation/a-archive",
		"GET /v1/allocation/a-pull",
		"GET /v1/allocation/a-stopped",
		// The workspace being stopped: is its stop-archive task saving
		// the home?
		"GET /v1/allocation/a-stopping",
		"GET /v1/allocations",
		"GET /v1/client/allocation/a-starting/checks",
		"GET /v1/client/fs/logs/a-archive",
		"GET /v1/job/ws-" + wsUnplaced + "/evaluations",
		"GET /v1/jobs",
		"GET /v1/nodes",
		// The starting workspace passes its checks: is it registered by
		// its own allocation?
		"GET /v1/service/ws-" + wsStarting,
		"GET /v1/services",
		"GET /v1/volumes",
	}
	if got := f.routesCalled(); !reflect.DeepEqual(got, wantRoutes) {
		t.Errorf("routes called:\n got %v\nwant %v", got, wantRoutes)
	}
	jobsCall := f.calls("GET /v1/jobs")[0]
	if jobsCall.Query["prefix"][0] != "ws-" || jobsCall.Query["meta"][0] != "true" {
		t.Errorf("jobs list query = %v, want prefix ws- and meta", jobsCall.Query)
	}
	allocsQuery := f.calls("GET /v1/allocations")[0].Query
	if got := allocsQuery["filter"]; len(got) != 1 || !strings.Contains(got[0], "^ws-") {
		t.Errorf("allocations filter = %v", got)
	}
	if got := allocsQuery.Get("task_states"); got != "false" {
		t.Errorf("allocations listed with task_states=%q, want false", got)
	}
	logs := f.calls("GET /v1/client/fs/logs/a-archive")[0].Query
	if logs["task"][0] != "archive" || logs["type"][0] != "stdout" || logs["plain"][0] != "true" {
		t.Errorf("logs query = %v", logs)
	}

	// A failed job's events and log are read once, not on every
	// observation; a pending allocation's events are read again.
	if _, err := b.Observe(t.Context()); err != nil {
		t.Fatal(err)
	}
	for route, want := range map[string]int{
		"GET /v1/client/fs/logs/a-archive": 1,
		"GET /v1/allocation/a-archive":     1,
		"GET /v1/allocation/a-pull":        2,
	} {
		if n := len(f.calls(route)); n != want {
			t.Errorf("%s called %d times over two observations, want %d", route, n, want)
		}
	}
}

func TestObserveNotReadyUntilRegisteredAndPassing(t *testing.T) {
	passing := api.AllocCheckStatuses{"c": {Status: "success"}}
	pending := api.AllocCheckStatuses{"c": {Status: "pending"}}
	// Nomad stamps check results in whole seconds.
	at := time.Unix(1_800_000_000, 300_000_000)
	failedAt := func(sec int64) api.AllocCheckStatuses {
		return api.AllocCheckStatuses{"c": {Status: "failure", Timestamp: sec}}
	}
	const run = "run-2"
	answeredBy := func(id, run string) map[string]answer { return map[string]answer{id: {run: run, at: at}} }
	cases := []struct {
		name       string
		deployment *api.AllocDeploymentStatus
		checks     api.AllocCheckStatuses
		own        bool
		answered   map[string]answer // alloc id -> run of its job version, when
		registered bool
		want       bool
	}{
		{"healthy deployment", healthy(true), nil, false, nil, true, true},
		{"unhealthy deployment", healthy(false), nil, false, nil, true, false},
		{"checks pending", nil, pending, true, nil, true, false},
		{"one of two checks failing", nil, api.AllocCheckStatuses{"c": {Status: "success"}, "d": {Status: "failure"}}, true, nil, true, false},
		{"no checks yet", nil, api.AllocCheckStatuses{}, true, nil, true, false},
		{"checks passing", nil, passing, true, nil, true, true},
		// Another job registered ws-{id}; this allocation's own
		// registration has not reached the server yet.
		{"checks passing, only a registration by another job", nil, passing, false, nil, true, false},
		{"not registered", healthy(true), nil, false, nil, false, false},

		// The program answered a direct probe before Nomad's check ran.
		{"probe answered, no check result yet", nil, api.AllocCheckStatuses{}, true, answeredBy("a", run), true, true},
		{"probe answered, checks pending", nil, pending, true, answeredBy("a", run), true, true},
		// The check that ran as the task started, before the program
		// listened.
		{"probe answered after a failed check", nil, failedAt(at.Unix() - 1), true, answeredBy("a", run), true, true},
		{"probe answered within the second of a failed check", nil, failedAt(at.Unix()), true, answeredBy("a", run), true, true},
		{"check failed after the probe answered", nil, failedAt(at.Unix() + 1), true, answeredBy("a", run), true, false},
		{"probe answered, deployment unhealthy", healthy(false), nil, true, answeredBy("a", run), true, false},
		{"probe answered by an older run's program", nil, pending, true, answeredBy("a", "run-1"), true, false},
		{"probe answered, only a registration by another job", nil, pending, false, answeredBy("a", run), true, false},
		{"probe answered, not registered", nil, pending, true, answeredBy("a", run), false, false},
		{"another allocation answered", nil, pending, true, answeredBy("b", run), true, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			a := &api.AllocationListStub{ID: "a", ClientStatus: "running", DesiredStatus: "run", DeploymentStatus: tc.deployment}
			r := readiness{
				checks: map[string]api.AllocCheckStatuses{"a": tc.checks}, own: map[string]bool{"a": tc.own},
				answered: tc.answered, run: run,
			}
			if got := upstreamReady([]*api.AllocationListStub{a}, r, tc.registered); got != tc.want {
				t.Fatalf("upstreamReady = %v, want %v", got, tc.want)
			}
		})
	}

	t.Run("a job without a run never counts a probe", func(t *testing.T) {
		a := &api.AllocationListStub{ID: "a", ClientStatus: "running", DesiredStatus: "run"}
		r := readiness{own: map[string]bool{"a": true}, answered: map[string]answer{"a": {at: at}}}
		if upstreamReady([]*api.AllocationListStub{a}, r, true) {
			t.Fatal("upstreamReady = true for a probe of a job without a run")
		}
	})
}

func TestObserveErrors(t *testing.T) {
	t.Run("server error is retried as unreachable", func(t *testing.T) {
		f := newFakeNomad(t)
		f.json("GET /v1/nodes", []*api.NodeListStub{})
		f.status("GET /v1/jobs", http.StatusInternalServerError, "rpc error: no cluster leader")
		_, err := newTestBackend(t, f, testOptions()).Observe(t.Context())
		assertFailure(t, err, workspace.ReasonUnreachable)
	})
	t.Run("permission denied is a backend error", func(t *testing.T) {
		f := newFakeNomad(t)
		f.json("GET /v1/nodes", []*api.NodeListStub{})
		f.status("GET /v1/jobs", http.StatusForbidden, "Permission denied")
		_, err := newTestBackend(t, f, testOptions()).Observe(t.Context())
		assertFailure(t, err, workspace.ReasonBackendError)
	})
	t.Run("connection refused is unreachable", func(t *testing.T) {
		f := newFakeNomad(t)
		b := newTestBackend(t, f, testOptions())
		f.srv.Close()
		_, err := b.Observe(t.Context())
		assertFailure(t, err, workspace.ReasonUnreachable)
	})
}

func assertFailure(t *testing.T, err error, reason string) {
	t.Helper()
	f, ok := err.(*controller.Failure)
	if !ok {
		t.Fatalf("err = %v (%T), want a *controller.Failure", err, err)
	}
	if f.Reason != reason || f.Terminal {
		t.Fatalf("failure = %+v, want reason %s, not terminal", f, reason)
	}
}

func TestDescribePlacement(t *testing.T) {
	got := describePlacement(map[string]*api.AllocationMetric{
		"workspace": {
			ConstraintFiltered: map[string]int{"missing compatible host volumes": 2, "${attr.consul.version} semver >= 1.8.0": 1},
			DimensionExhausted: map[string]int{"memory": 3},
		},
		"archive": {NodesEvaluated: 0, NodesInPool: 0, NodePool: "gpu"},
	})
	want := `no node can run it: group "archive": 0 of 0 node(s) in pool "gpu" evaluated, none fits; ` +
		`group "workspace": constraint "${attr.consul.version} semver >= 1.8.0" filtered 1 node(s); ` +
		`constraint "missing compatible host volumes" filtered 2 node(s); memory exhausted on 3 node(s)`
	if got != want {
		t.Fatalf("got  %s\nwant %s", got, want)
	}
}

// Nomad reports a batch allocation it stopped as complete, even when its
// task was killed half way; only a task that exited before the kill
// finished.
func TestBatchRun(t *testing.T) {
	events := func(evs ...*api.TaskEvent) map[string]*api.TaskState {
		return map[string]*api.TaskState{"archive": {State: "dead", Events: evs}}
	}
	started := &api.TaskEvent{Type: api.TaskStarted, Time: 1}
	killing := &api.TaskEvent{Type: api.TaskKilling, Time: 2}
	exit := func(code int) *api.TaskEvent {
		return &api.TaskEvent{Type: api.TaskTerminated, ExitCode: code, Time: 3}
	}
	alloc := func(client, desired string, states map[string]*api.TaskState) []*api.AllocationListStub {
		return []*api.AllocationListStub{{ID: "a", ClientStatus: client, DesiredStatus: desired, TaskStates: states}}
	}
	codes := map[string]archive.Code{"a": archive.CodeDiskFull}
	for _, tc := range []struct {
		name    string
		stopped bool
		allocs  []*api.AllocationListStub
		want    controller.RunState
		code    int
	}{
		{"not placed yet", false, nil, controller.RunPending, 0},
		{"stopped: its allocations count as older", true, nil, controller.RunEnded, 0},
		{"pending", false, alloc("pending", "run", nil), controller.RunPending, 0},
		{"running", false, alloc("running", "run", nil), controller.RunLive, 0},
		{"waiting to try again", false, alloc("pending", "run", map[string]*api.TaskState{
			"archive": {State: "pending", Restarts: 1, Events: []*api.TaskEvent{started, exit(1), {Type: api.TaskRestarting, Time: 4}}},
		}), controller.RunLive, 0},
		{"fetching its artifact", false, alloc("pending", "run", map[string]*api.TaskState{
			"archive": {State: "pending", Events: []*api.TaskEvent{{Type: api.TaskDownloadingArtifacts, Time: 1}}},
		}), controller.RunPending, 0},
		{"complete", false, alloc("complete", "run", nil), controller.RunExited, 0},
		{"stopped while it ran", true, alloc("complete", "stop", events(started, killing, exit(1))), controller.RunEnded, 0},
		{"stopped after it exited", true, alloc("complete", "stop", events(started, exit(0))), controller.RunExited, 0},
		{"stopped, events unknown", true, alloc("complete", "stop", nil), controller.RunEnded, 0},
		{"failed", false, alloc("failed", "run", events(started, exit(1))), controller.RunExited, 1},
		{"failed before it started", false, alloc("failed", "run", events()), controller.RunEnded, 0},
		{"lost", false, alloc("lost", "stop", nil), controller.RunEnded, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			run := batchRun(&api.JobListStub{Stop: tc.stopped}, tc.allocs, codes, "")
			if run.State != tc.want || run.ExitCode != tc.code {
				t.Fatalf("batchRun = %+v, want state %d exit %d", run, tc.want, tc.code)
			}
		})
	}
}

func TestIsCurrent(t *testing.T) {
	ws := &api.JobListStub{ID: "ws-" + testWS, JobModifyIndex: 50}
	batch := &api.JobListStub{ID: "ws-" + testWS + "-archive", JobModifyIndex: 50}
	cases := []struct {
		name  string
		job   *api.JobListStub
		alloc api.AllocationListStub
		want  bool
	}{
		{"created after the registration", ws, api.AllocationListStub{CreateIndex: 51, ClientStatus: "failed", DesiredStatus: "run"}, true},
		{"updated in place, running", ws, api.AllocationListStub{CreateIndex: 10, ClientStatus: "running", DesiredStatus: "run"}, true},
		{"old failure before a restart", ws, api.AllocationListStub{CreateIndex: 10, ClientStatus: "failed", DesiredStatus: "run"}, false},
		{"old allocation being stopped", ws, api.AllocationListStub{CreateIndex: 10, ClientStatus: "running", DesiredStatus: "stop"}, false},
		{"previous batch attempt", batch, api.AllocationListStub{CreateIndex: 10, ClientStatus: "running", DesiredStatus: "run"}, false},
		{"current batch attempt", batch, api.AllocationListStub{CreateIndex: 50, ClientStatus: "pending", DesiredStatus: "run"}, true},
	}
	for _, tc := range cases {
		if got := isCurrent(tc.job, &tc.alloc); got != tc.want {
			t.Errorf("%s: isCurrent = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestObserveConsulProvider(t *testing.T) {
	f := newFakeNomad(t)
	observeFixture(f)
	opts := testOptions()
	opts.ServiceProvider = ProviderConsul
	snap, err := newTestBackend(t, f, opts).Observe(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	// Readiness comes from deployment health alone: Nomad has no check
	// results for Consul services, and its service list holds none of them.
	if !snap.Workspaces[wsReady].UpstreamReady || snap.Workspaces[wsStarting].UpstreamReady {
		t.Fatalf("ready = %v, starting = %v", snap.Workspaces[wsReady].UpstreamReady, snap.Workspaces[wsStarting].UpstreamReady)
	}
	for _, route := range []string{"GET /v1/services", "GET /v1/client/allocation/a-starting/checks"} {
		if n := len(f.calls(route)); n != 0 {
			t.Errorf("%s called %d times with the consul provider", route, n)
		}
	}
}

// Nomad can follow a task's exit with events of its own; the exit says why.
func TestFailureMessagePrefersTheExit(t *testing.T) {
	a := &api.AllocationListStub{ID: "a1", TaskStates: map[string]*api.TaskState{"workspace": {Events: []*api.TaskEvent{
		{Type: api.TaskStarted, DisplayMessage: "Task started by client"},
		{Type: api.TaskTerminated, ExitCode: 3, DisplayMessage: "Exit Code: 3"},
		{Type: api.TaskKilling, DisplayMessage: "Unhealthy because of failed task"},
	}}}}
	if got := failureMessage(a); got != "task workspace exited with code 3" {
		t.Errorf("failureMessage = %q", got)
	}
	a.TaskStates["workspace"].Events = []*api.TaskEvent{{Type: api.TaskKilling, DisplayMessage: "Unhealthy because of failed task"}}
	if got := failureMessage(a); got != "task workspace: Unhealthy because of failed task" {
		t.Errorf("without an exit: %q", got)
	}
}

// TestStopArchive: what the newest allocation of a workspace job says of
// its stop-archive task. Only an allocation stopped while its job still
// wants to run (a drain) reports one: running while the allocation is,
// then the result line of the task's log. A task that archived nothing
// reports nothing.
func TestStopArchive(t *testing.T) {
	const run = "01jb3x7k9q2m5n8p4r6s0t1run"
	job := &api.JobListStub{ID: "ws-" + wsDrained, Meta: managedMeta(wsDrained, MetaRunID, run)}
	started := map[string]*api.TaskState{stopArchiveTask: {State: "dead", StartedAt: time.Unix(1, 0)}}
	alloc := func(desired, client string, states map[string]*api.TaskState) []*api.AllocationListStub {
		return []*api.AllocationListStub{{ID: "a1", DesiredStatus: desired, ClientStatus: client, TaskStates: states}}
	}
	key := archive.Key(wsDrained, run)
	cases := []struct {
		name    string
		allocs  []*api.AllocationListStub
		outcome *archive.Outcome
		want    *controller.JobResult
	}{
		{"running program", alloc(api.AllocDesiredStatusRun, api.AllocClientStatusRunning, started), nil, nil},
		{"no allocation", nil, nil, nil},
		{"job without the task", alloc(api.AllocDesiredStatusStop, api.AllocClientStatusComplete, map[string]*api.TaskState{"workspace": {}}), nil, nil},
		{"archiving", alloc(api.AllocDesiredStatusStop, api.AllocClientStatusRunning, started), nil,
			&controller.JobResult{OpID: run, ArchiveKey: key, Status: controller.JobRunning}},
		{"archived", alloc(api.AllocDesiredStatusStop, api.AllocClientStatusComplete, started), &archive.Outcome{Result: archive.ResultOK},
			&controller.JobResult{OpID: run, ArchiveKey: key, Status: controller.JobSucceeded}},
		{"not asked", alloc(api.AllocDesiredStatusStop, api.AllocClientStatusComplete, started), &archive.Outcome{Result: archive.ResultSkipped}, nil},
		{"log not read this pass", alloc(api.AllocDesiredStatusStop, api.AllocClientStatusComplete, started), nil, nil},
		{"never started", alloc(api.AllocDesiredStatusStop, api.AllocClientStatusComplete, map[string]*api.TaskState{stopArchiveTask: {State: "dead"}}),
			&archive.Outcome{Code: archive.CodeUnknown}, nil},
		{"failed", alloc(api.AllocDesiredStatusStop, api.AllocClientStatusFailed, started), &archive.Outcome{Result: archive.ResultFail, Code: archive.CodeS3Access},
			&controller.JobResult{OpID: run, ArchiveKey: key, Status: controller.JobFailed, ErrorCode: archive.CodeS3Access,
				Message: "the archive made as the program was stopped on its node failed"}},
		{"killed before its result", alloc(api.AllocDesiredStatusStop, api.AllocClientStatusComplete, started), &archive.Outcome{Code: archive.CodeUnknown},
			&controller.JobResult{OpID: run, ArchiveKey: key, Status: controller.JobFailed, ErrorCode: archive.CodeUnknown,
				Message: "the archive made as the program was stopped on its node failed"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			outcomes := map[string]archive.Outcome{}
			if c.outcome != nil {
				outcomes["a1"] = *c.outcome
			}
			if got := stopArchive(wsDrained, job, c.allocs, outcomes); !reflect.DeepEqual(got, c.want) {
				t.Errorf("stopArchive = %+v, want %+v", got, c.want)
			}
		})
	}
}

// The task events of a batch job's newest allocation are read once it
// ended, and while it is pending: between two tries of a backup only they
// tell that its task ran.
func TestAllocsNeedingEvents(t *testing.T) {
	alloc := func(id, job, client, desired string) *api.AllocationListStub {
		return &api.AllocationListStub{ID: id, JobID: job, ClientStatus: client, DesiredStatus: desired}
	}
	const ws = "01jb3x7k9q2m5n8p4r6s0t1v2w"
	archiveJob, restoreJob := controller.JobName(ws, controller.JobArchive), controller.JobName(ws, controller.JobRestore)
	jobs := map[string]*api.JobListStub{archiveJob: {ID: archiveJob}, restoreJob: {ID: restoreJob}}
	for _, c := range []struct {
		name  string
		alloc *api.AllocationListStub
		want  bool
	}{
		{"pending", alloc("a", archiveJob, "pending", "run"), true},
		{"running", alloc("a", archiveJob, "running", "run"), false},
		{"complete", alloc("a", archiveJob, "complete", "run"), false},
		{"stopped", alloc("a", restoreJob, "complete", "stop"), true},
		{"failed", alloc("a", restoreJob, "failed", "run"), true},
	} {
		got := allocsNeedingEvents(jobs, map[string][]*api.AllocationListStub{c.alloc.JobID: {c.alloc}})
		if (len(got) == 1) != c.want {
			t.Errorf("%s: read events %v, want %v", c.name, len(got) == 1, c.want)
		}
	}
}

func TestRunProgress(t *testing.T) {
	at := func(sec int64) int64 {
		return time.Date(2026, 11, 2, 9, 0, 0, 0, time.UTC).Add(time.Duration(sec) * time.Second).UnixNano()
	}
	running := func(sec int64, health *api.AllocDeploymentStatus) *api.AllocationListStub {
		return &api.AllocationListStub{ClientStatus: "running", DesiredStatus: "run", ModifyTime: at(sec), DeploymentStatus: health}
	}
	cases := []struct {
		name      string
		allocs    []*api.AllocationListStub
		preparing bool
		since     int64 // seconds after 9:00; -1: zero
	}{
		{"none", nil, false, -1},
		{"being prepared", []*api.AllocationListStub{{ClientStatus: "pending", DesiredStatus: "run"}}, true, -1},
		{"a pending one being stopped", []*api.AllocationListStub{{ClientStatus: "pending", DesiredStatus: "stop"}}, false, -1},
		{"running, health unknown", []*api.AllocationListStub{running(30, nil)}, false, 30},
		{"running, health not set yet", []*api.AllocationListStub{running(30, &api.AllocDeploymentStatus{})}, false, 30},
		{"set unhealthy", []*api.AllocationListStub{running(30, healthy(false))}, false, -1},
		{"healthy", []*api.AllocationListStub{running(30, healthy(true))}, false, -1},
		{"ended", []*api.AllocationListStub{{ClientStatus: "failed", DesiredStatus: "run", ModifyTime: at(30)}}, false, -1},
		{"the latest of two", []*api.AllocationListStub{running(30, nil), running(90, nil)}, false, 90},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			preparing, since := runProgress(c.allocs)
			want := time.Time{}
			if c.since >= 0 {
				want = time.Unix(0, at(c.since)).UTC()
			}
			if preparing != c.preparing || !since.Equal(want) {
				t.Errorf("runProgress = %v, %v; want %v, %v", preparing, since, c.preparing, want)
			}
		})
	}
}
