package nomad

import (
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"reflect"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/codehub-io/codehub/controller"
)

const (
	wsMirrorA = "01nnnnnnnnnnnnnnnnnnnnnnnn"
	wsMirrorB = "01pppppppppppppppppppppppp"
)

// event is one stream event about obj (a job, an allocation, a volume or
// a service registration) at index.
func event(topic api.Topic, typ string, index uint64, key string, payload map[string]any) api.Event {
	raw, err := json.Marshal(payload)
	if err != nil {
		panic(err)
	}
	var p map[string]any
	if err := json.Unmarshal(raw, &p); err != nil {
		panic(err)
	}
	return api.Event{Topic: topic, Type: typ, Key: key, Index: index, Payload: p}
}

func jobEvent(typ string, index uint64, job *api.Job, deleted bool) api.Event {
	return event(api.TopicJob, typ, index, *job.ID, map[string]any{"Job": job, "Deleted": deleted})
}

func allocEvent(index uint64, a *api.Allocation) api.Event {
	return event(api.TopicAllocation, "PlanResult", index, a.ID, map[string]any{"Allocation": a})
}

func volumeEvent(typ string, index uint64, v *api.HostVolume) api.Event {
	return event(topicHostVolume, typ, index, v.ID, map[string]any{"Volume": v})
}

func serviceEvent(typ string, index uint64, s *api.ServiceRegistration) api.Event {
	return event(api.TopicService, typ, index, s.ID, map[string]any{"Service": s})
}

func ptr[T any](v T) *T { return &v }

func workspaceJob(wsID string, index uint64, stop bool) *api.Job {
	return &api.Job{ID: ptr("ws-" + wsID), Type: ptr("service"), Stop: ptr(stop), Status: ptr("running"),
		ModifyIndex: ptr(index), JobModifyIndex: ptr(index), Meta: managedMeta(wsID)}
}

// installed is a mirror connected to a stream, holding one workspace job
// (A), its running allocation, its volume and its service, listed at
// index 10.
func installed(t *testing.T) (*mirror, uint64) {
	t.Helper()
	m := newMirror()
	conn := m.connected()
	l := listing{
		jobs:    []*api.JobListStub{{ID: "ws-" + wsMirrorA, Type: "service", ModifyIndex: 8, JobModifyIndex: 8, Meta: managedMeta(wsMirrorA)}},
		allocs:  []*api.AllocationListStub{{ID: "a1", JobID: "ws-" + wsMirrorA, ClientStatus: "running", DesiredStatus: "run", ModifyIndex: 9}},
		volumes: []*api.HostVolumeStub{{ID: "v1", Name: controller.VolumeName(wsMirrorA), State: api.HostVolumeStateReady, ModifyIndex: 7}},
	}
	m.mu.Lock()
	m.install(l, tableIndexes{jobs: 10, allocs: 10, volumes: 10, services: 10}, map[string]bool{"ws-" + wsMirrorA: true}, time.Now())
	m.mu.Unlock()
	return m, conn
}

func TestMirrorApply(t *testing.T) {
	jobA := "ws-" + wsMirrorA
	jobB := "ws-" + wsMirrorB
	for _, tc := range []struct {
		name   string
		events []api.Event
		check  func(t *testing.T, m *mirror)
	}{
		{"a job registered", []api.Event{jobEvent("JobRegistered", 11, workspaceJob(wsMirrorB, 11, false), false)}, func(t *testing.T, m *mirror) {
			if j := m.jobs[jobB]; j == nil || j.Stop || j.Meta[MetaWorkspaceID] != wsMirrorB || j.JobModifyIndex != 11 {
				t.Errorf("job B: %+v", j)
			}
		}},
		{"an event the listing holds", []api.Event{jobEvent("JobRegistered", 10, workspaceJob(wsMirrorB, 10, false), false)}, func(t *testing.T, m *mirror) {
			if m.jobs[jobB] != nil {
				t.Error("an event at the listing's index was applied")
			}
		}},
		{"a job stopped", []api.Event{jobEvent("JobDeregistered", 12, workspaceJob(wsMirrorA, 12, true), false)}, func(t *testing.T, m *mirror) {
			if j := m.jobs[jobA]; j == nil || !j.Stop {
				t.Errorf("stopped job A: %+v", j)
			}
		}},
		{"a job purged (before Nomad 2.0)", []api.Event{jobEvent("JobDeregistered", 12, workspaceJob(wsMirrorA, 8, true), false)}, func(t *testing.T, m *mirror) {
			if j := m.jobs[jobA]; j != nil {
				t.Errorf("purged job A kept: %+v", j)
			}
		}},
		{"a job purged (Nomad 2.0 says so)", []api.Event{jobEvent("JobDeregistered", 12, workspaceJob(wsMirrorA, 12, false), true)}, func(t *testing.T, m *mirror) {
			if j := m.jobs[jobA]; j != nil {
				t.Errorf("purged job A kept: %+v", j)
			}
		}},
		// Nomad deletes a purged job's allocations without an event: one
		// still pending must not stay live here.
		{"a job purged with its allocations, then registered again", []api.Event{
			allocEvent(11, &api.Allocation{ID: "a2", JobID: jobA, ClientStatus: "pending", DesiredStatus: "run", CreateIndex: 11, ModifyIndex: 11}),
			jobEvent("JobDeregistered", 12, workspaceJob(wsMirrorA, 12, false), true),
			jobEvent("JobRegistered", 13, workspaceJob(wsMirrorA, 13, false), false),
			allocEvent(14, &api.Allocation{ID: "a3", JobID: jobA, ClientStatus: "pending", DesiredStatus: "run", CreateIndex: 14, ModifyIndex: 14}),
		}, func(t *testing.T, m *mirror) {
			if m.allocs["a1"] != nil || m.allocs["a2"] != nil {
				t.Errorf("the purged job's allocations kept: a1 %+v, a2 %+v", m.allocs["a1"], m.allocs["a2"])
			}
			if m.allocs["a3"] == nil || !m.allocsByJob[jobA]["a3"] || len(m.allocsByJob[jobA]) != 1 {
				t.Errorf("the new job's allocations: %v", m.allocsByJob[jobA])
			}
		}},
		{"a job collected", []api.Event{jobEvent(eventJobBatchDeregistered, 12, workspaceJob(wsMirrorA, 12, false), false)}, func(t *testing.T, m *mirror) {
			if j := m.jobs[jobA]; j != nil {
				t.Errorf("collected job A kept: %+v", j)
			}
		}},
		{"an older event after a newer", []api.Event{
			jobEvent("JobRegistered", 13, workspaceJob(wsMirrorB, 13, true), false),
			jobEvent("JobRegistered", 12, workspaceJob(wsMirrorB, 12, false), false),
		}, func(t *testing.T, m *mirror) {
			if j := m.jobs[jobB]; j == nil || !j.Stop {
				t.Errorf("job B: %+v, want the newer, stopped", j)
			}
		}},
		{"a job not codehub's", []api.Event{jobEvent("JobRegistered", 11, &api.Job{ID: ptr("web"), ModifyIndex: ptr(uint64(11))}, false)}, func(t *testing.T, m *mirror) {
			if len(m.jobs) != 1 {
				t.Errorf("jobs: %v", m.jobs)
			}
		}},
		{"allocations: a running one's task states are dropped, a stopped one's kept", []api.Event{
			allocEvent(11, &api.Allocation{ID: "a1", JobID: jobA, ClientStatus: "running", DesiredStatus: "run", ModifyIndex: 11,
				TaskStates: map[string]*api.TaskState{"workspace": {State: "running"}}}),
			allocEvent(12, &api.Allocation{ID: "a2", JobID: jobB, ClientStatus: "complete", DesiredStatus: "stop", ModifyIndex: 12,
				TaskStates: map[string]*api.TaskState{"stop-archive": {State: "dead"}}}),
			allocEvent(12, &api.Allocation{ID: "a3", JobID: "web", ClientStatus: "running", DesiredStatus: "run", ModifyIndex: 12}),
		}, func(t *testing.T, m *mirror) {
			if a := m.allocs["a1"]; a == nil || a.ModifyIndex != 11 || a.TaskStates != nil {
				t.Errorf("a1: %+v", a)
			}
			if a := m.allocs["a2"]; a == nil || a.TaskStates["stop-archive"] == nil {
				t.Errorf("a2: %+v", a)
			}
			if m.allocs["a3"] != nil {
				t.Error("another job's allocation was kept")
			}
		}},
		{"volumes: one created, one deleted", []api.Event{
			volumeEvent("HostVolumeRegistered", 11, &api.HostVolume{ID: "v2", Name: controller.VolumeName(wsMirrorB), State: api.HostVolumeStatePending, NodeID: "n1", ModifyIndex: 11}),
			volumeEvent(eventHostVolumeDeleted, 12, &api.HostVolume{ID: "v1", Name: controller.VolumeName(wsMirrorA), ModifyIndex: 7}),
		}, func(t *testing.T, m *mirror) {
			if v := m.volumes["v2"]; v == nil || v.NodeID != "n1" || v.State != api.HostVolumeStatePending {
				t.Errorf("v2: %+v", v)
			}
			if m.volumes["v1"] != nil {
				t.Error("deleted volume kept")
			}
		}},
		{"services: an event's registration comes and goes", []api.Event{
			serviceEvent("ServiceRegistration", 11, &api.ServiceRegistration{ID: "r2", ServiceName: jobB}),
			serviceEvent(eventServiceDeregistered, 12, &api.ServiceRegistration{ID: "r2", ServiceName: jobB}),
		}, func(t *testing.T, m *mirror) {
			if m.services[jobB] != nil {
				t.Errorf("service B: %+v", m.services[jobB])
			}
		}},
		{"services: a listed name's registration goes", []api.Event{
			serviceEvent(eventServiceDeregistered, 11, &api.ServiceRegistration{ID: "r1", ServiceName: jobA}),
		}, func(t *testing.T, m *mirror) {
			s := m.services[jobA]
			if s == nil || !s.dirty {
				t.Fatalf("service A: %+v, want kept until read", s)
			}
			m.mu.Unlock()
			m.settle(jobA, s.seq-1, nil) // a read older than the event
			m.mu.Lock()
			if m.services[jobA] == nil {
				t.Fatal("an older read settled service A")
			}
			m.mu.Unlock()
			m.settle(jobA, s.seq, nil)
			m.mu.Lock()
			if m.services[jobA] != nil {
				t.Error("service A kept after a read found no registration")
			}
		}},
		{"services: the allocations that registered a name", []api.Event{
			serviceEvent("ServiceRegistration", 11, &api.ServiceRegistration{ID: "r3", ServiceName: jobB, JobID: jobB, AllocID: "b1"}),
			serviceEvent("ServiceRegistration", 12, &api.ServiceRegistration{ID: "r4", ServiceName: jobB, JobID: jobB, AllocID: "b2"}),
			serviceEvent(eventServiceDeregistered, 13, &api.ServiceRegistration{ID: "r4", ServiceName: jobB, JobID: jobB, AllocID: "b2"}),
		}, func(t *testing.T, m *mirror) {
			m.mu.Unlock()
			defer m.mu.Lock()
			now := time.Now()
			for _, c := range []struct {
				alloc, job string
				want       bool
			}{{"b1", jobB, true}, {"b2", jobB, false}, {"b1", jobA, false}, {"a1", jobA, false}} {
				if got := m.registeredBy(jobB, c.alloc, c.job, now); got != c.want {
					t.Errorf("registered by %s of %s: %v, want %v", c.alloc, c.job, got, c.want)
				}
			}
			m.mu.Lock()
			m.broken()
			m.mu.Unlock()
			if m.registeredBy(jobB, "b1", jobB, now) {
				t.Error("a mirror that does not count answered")
			}
		}},
		{"an event it cannot read", []api.Event{{Topic: api.TopicAllocation, Index: 11, Payload: map[string]any{"Allocation": "nonsense"}}}, func(t *testing.T, m *mirror) {
			if m.fresh(time.Now()) {
				t.Error("the mirror still counts")
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, conn := installed(t)
			m.apply(conn, tc.events)
			m.mu.Lock()
			defer m.mu.Unlock()
			tc.check(t, m)
		})
	}
}

// The mirror counts only under the stream its listing was taken under:
// events of an older connection change nothing, and a stream that ends
// leaves it to the next full listing.
func TestMirrorCountsUnderItsStream(t *testing.T) {
	m, conn := installed(t)
	now := time.Now()
	m.mu.Lock()
	fresh := m.fresh(now)
	m.mu.Unlock()
	if !fresh {
		t.Fatal("a mirror installed under the connected stream does not count")
	}
	m.disconnected(conn)
	next := m.connected()
	m.apply(conn, []api.Event{jobEvent("JobRegistered", 11, workspaceJob(wsMirrorB, 11, false), false)})
	m.apply(next, []api.Event{jobEvent("JobRegistered", 11, workspaceJob(wsMirrorB, 11, false), false)})
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.fresh(now) {
		t.Error("the mirror counts under a new stream before a listing")
	}
	if m.jobs["ws-"+wsMirrorB] != nil {
		t.Error("an event was applied without a listing under its stream")
	}
	m.synced = next
	if m.fresh(now.Add(resyncEvery)) {
		t.Error("the mirror counts past its resync interval")
	}
}

// TestObserveFollowsEventStream: with the event stream connected, the first
// observation lists everything and later ones list nothing, read only what
// the events left unsaid, and see what the events said; once the stream
// ends the next observation lists again.
func TestObserveFollowsEventStream(t *testing.T) {
	f := newFakeNomad(t)
	observeFixture(f)
	events := make(chan []api.Event, 8)
	f.handle("GET /v1/event/stream", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, `{}`)
		w.(http.Flusher).Flush()
		for {
			select {
			case <-r.Context().Done():
				return
			case evs, ok := <-events:
				if !ok {
					return
				}
				body, _ := json.Marshal(api.Events{Index: evs[len(evs)-1].Index, Events: evs})
				fmt.Fprintf(w, "%s\n", body)
				w.(http.Flusher).Flush()
			}
		}
	})
	listed := func() int {
		return len(f.calls("GET /v1/jobs")) + len(f.calls("GET /v1/allocations")) + len(f.calls("GET /v1/volumes")) + len(f.calls("GET /v1/services"))
	}

	want, err := newTestBackend(t, f, testOptions()).Observe(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if listed() != 4 {
		t.Fatalf("a plain observation made %d list calls, want 4", listed())
	}

	b := newTestBackend(t, f, testOptions())
	clock := time.Now()
	b.now = func() time.Time { return clock }
	done := make(chan error, 1)
	go func() { done <- b.Watch(t.Context(), func() {}) }()
	waitFor(t, func() bool {
		b.mirror.mu.Lock()
		defer b.mirror.mu.Unlock()
		return b.mirror.stream != 0
	})
	observe := func() controller.Snapshot {
		t.Helper()
		snap, err := b.Observe(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		return snap
	}
	if snap := observe(); !reflect.DeepEqual(snap, want) || listed() != 8 {
		t.Fatalf("first observation with the stream: %d list calls, want 8; same snapshot: %v", listed(), reflect.DeepEqual(snap, want))
	}
	if snap := observe(); !reflect.DeepEqual(snap, want) || listed() != 8 {
		t.Fatalf("observation from the mirror: %d list calls, want 8; same snapshot: %v", listed(), reflect.DeepEqual(snap, want))
	}

	// Workspace B appears, running and ready; the unplaced job is
	// registered again (its stub now has no summary, which is read); the
	// ready workspace's job is purged.
	f.json("GET /v1/job/ws-"+wsUnplaced+"/summary", &api.JobSummary{Summary: map[string]api.TaskGroupSummary{"workspace": {Queued: 1}}})
	jobB := "ws-" + wsMirrorB
	events <- []api.Event{
		jobEvent("JobRegistered", 50, workspaceJob(wsMirrorB, 50, false), false),
		jobEvent("JobRegistered", 50, workspaceJob(wsUnplaced, 50, false), false),
		volumeEvent("HostVolumeRegistered", 51, &api.HostVolume{ID: "vb", Name: controller.VolumeName(wsMirrorB), State: api.HostVolumeStateReady, NodeID: "n-up", ModifyIndex: 51}),
		allocEvent(52, &api.Allocation{ID: "ab", JobID: jobB, CreateIndex: 52, ModifyIndex: 52, ClientStatus: "running", DesiredStatus: "run", DeploymentStatus: healthy(true)}),
		serviceEvent("ServiceRegistration", 53, &api.ServiceRegistration{ID: "rb", ServiceName: jobB, JobID: jobB, AllocID: "ab"}),
		jobEvent("JobDeregistered", 54, workspaceJob(wsReady, 10, false), false),
	}
	waitFor(t, func() bool {
		b.mirror.mu.Lock()
		defer b.mirror.mu.Unlock()
		return b.mirror.jobs["ws-"+wsReady] == nil
	})
	snap := observe()
	if listed() != 8 {
		t.Errorf("observation after events: %d list calls, want 8", listed())
	}
	// A job just registered is given placementGrace to be placed before
	// its summary is read.
	if got := snap.Workspaces[wsUnplaced]; got.Failure != nil || len(f.calls("GET /v1/job/ws-"+wsUnplaced+"/summary")) != 0 {
		t.Errorf("a job registered again was judged before its grace: %+v", got)
	}
	clock = clock.Add(placementGrace)
	snap = observe()
	if got := snap.Workspaces[wsMirrorB]; !got.UpstreamReady || !got.VolumeReady || !got.ContainerLive || got.Node != "node-up" {
		t.Errorf("workspace B: %+v", got)
	}
	if got := snap.Workspaces[wsUnplaced]; !reflect.DeepEqual(got, want.Workspaces[wsUnplaced]) {
		t.Errorf("unplaced workspace: %+v, want %+v", got, want.Workspaces[wsUnplaced])
	}
	if len(f.calls("GET /v1/job/ws-"+wsUnplaced+"/summary")) != 1 {
		t.Error("the summary of the job without allocation was not read once")
	}
	// Its job purged, the ready workspace has no allocation left: Nomad
	// deletes them with the job, as a listing would show.
	if got := snap.Workspaces[wsReady]; got.UpstreamReady || got.ContainerLive || !got.VolumeReady {
		t.Errorf("workspace whose job was purged: %+v", got)
	}

	// What the observation of the changed workspaces gave is what one of
	// every workspace gives.
	b.last = nil
	if full := observe(); !reflect.DeepEqual(full, snap) {
		t.Errorf("observing what changed and observing all differ:\n%+v\n%+v", snap.Workspaces, full.Workspaces)
	}
	// A node that is drained changes every home on it, without an event
	// codehub follows.
	f.json("GET /v1/nodes", []*api.NodeListStub{
		{ID: "n-up", Name: "node-up", Status: api.NodeStatusReady, SchedulingEligibility: api.NodeSchedulingIneligible, Drain: true},
		{ID: "n-down", Name: "node-down", Status: api.NodeStatusDown, SchedulingEligibility: api.NodeSchedulingEligible},
		{ID: "n-drained", Name: "node-drained", Status: api.NodeStatusReady, SchedulingEligibility: api.NodeSchedulingIneligible},
	})
	snap = observe()
	for _, id := range []string{wsMirrorB, wsStarting, wsStopping} {
		if !snap.Workspaces[id].NodeDraining {
			t.Errorf("workspace %s on the drained node: %+v", id, snap.Workspaces[id])
		}
	}
	b.last = nil
	if full := observe(); !reflect.DeepEqual(full, snap) {
		t.Errorf("after the drain, observing what changed and observing all differ:\n%+v\n%+v", snap.Workspaces, full.Workspaces)
	}
	// A workspace Nomad has not finished starting is observed again each
	// time: its image pull, failing before, now succeeds, with no event.
	f.json("GET /v1/allocation/a-pull", &api.Allocation{ID: "a-pull", ClientStatus: "pending", TaskStates: map[string]*api.TaskState{
		"workspace": {State: "pending", Events: []*api.TaskEvent{{Type: api.TaskReceived}}},
	}})
	if got := observe().Workspaces[wsPull]; got.Failure != nil {
		t.Errorf("workspace whose image pull recovered: %+v", got)
	}
	if listed() != 8 {
		t.Errorf("observations from the mirror: %d list calls, want 8", listed())
	}

	close(events)
	waitFor(t, func() bool {
		b.mirror.mu.Lock()
		defer b.mirror.mu.Unlock()
		return b.mirror.stream == 0 || b.mirror.synced != b.mirror.stream
	})
	observe()
	if listed() != 12 {
		t.Errorf("observation after the stream ended: %d list calls, want 12", listed())
	}
}

// A wave of jobs Nomad is slow to place costs a few summary reads per
// observation, each job read in turn.
func TestSummaryReadsAreBounded(t *testing.T) {
	f := newFakeNomad(t)
	b := newTestBackend(t, f, testOptions())
	clock := time.Now()
	b.now = func() time.Time { return clock }
	jobs := map[string]*api.JobListStub{}
	for i := range 20 {
		id := jobID(fmt.Sprintf("01wave%020d", i))
		jobs[id] = &api.JobListStub{ID: id, Type: "service", JobModifyIndex: 5}
		f.json("GET /v1/job/"+id+"/summary", &api.JobSummary{})
	}
	read := map[string]int{}
	for pass := range 4 {
		f.mu.Lock()
		start := len(f.requests)
		f.mu.Unlock()
		if err := b.readSummaries(t.Context(), maps.Clone(jobs), nil); err != nil {
			t.Fatal(err)
		}
		f.mu.Lock()
		for _, r := range f.requests[start:] {
			read[r.Path]++
		}
		n := len(f.requests) - start
		f.mu.Unlock()
		want := allocReaders
		if pass == 0 {
			want = 0 // within the grace
		}
		if n != want {
			t.Errorf("pass %d read %d summaries, want %d", pass, n, want)
		}
		clock = clock.Add(placementGrace)
	}
	if len(read) != 20 {
		t.Errorf("%d jobs read in three passes of %d, want all 20 in turn: %v", len(read), allocReaders, read)
	}
}
