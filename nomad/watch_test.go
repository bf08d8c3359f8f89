package nomad

import (
	"context"
	"fmt"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"
)

func TestWatchWakesAndResumes(t *testing.T) {
	f := newFakeNomad(t)
	var connections atomic.Int32
	f.handle("GET /v1/event/stream", func(w http.ResponseWriter, r *http.Request) {
		if connections.Add(1) > 1 {
			<-r.Context().Done()
			return
		}
		fmt.Fprintln(w, `{}`)
		fmt.Fprintln(w, `{"Index":7,"Events":[{"Topic":"Node","Key":"node-1","Index":7}]}`)
		fmt.Fprintln(w, `{"Index":9,"Events":[{"Topic":"Allocation","Key":"8c1b","FilterKeys":["ws-`+testWS+`"],"Index":9}]}`)
		// The stream ends: Watch must reconnect after index 9.
	})
	b := newTestBackend(t, f, testOptions())

	ctx, cancel := context.WithCancel(t.Context())
	var wakes atomic.Int32
	done := make(chan error, 1)
	go func() { done <- b.Watch(ctx, func() { wakes.Add(1) }) }()

	waitFor(t, func() bool { return connections.Load() >= 2 })
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	calls := f.calls("GET /v1/event/stream")
	if got := calls[0].Query.Get("index"); got != "0" && got != "" {
		t.Errorf("first connection index = %q, want none", got)
	}
	if got := calls[1].Query.Get("index"); got != "10" {
		t.Errorf("reconnect index = %q, want 10 (after the last event seen)", got)
	}
	if topics := calls[0].Query["topic"]; len(topics) != len(watchTopics) {
		t.Errorf("topics = %v", topics)
	}
	// One wake for the workspace event, one for the reconnect; none for
	// the heartbeat or the foreign node event.
	if n := wakes.Load(); n != 2 {
		t.Errorf("wake called %d times, want 2", n)
	}
}

func TestStartingAlloc(t *testing.T) {
	job := "ws-01jb3x7k9q2m5n8p4r6s0tprbe"
	event := func(jobID, client, desired string, healthy *bool) api.Event {
		alloc := map[string]any{"ID": "a1", "JobID": jobID, "ClientStatus": client, "DesiredStatus": desired}
		if healthy != nil {
			alloc["DeploymentStatus"] = map[string]any{"Healthy": *healthy}
		}
		return api.Event{Topic: api.TopicAllocation, Key: "a1", FilterKeys: []string{jobID, ""}, Payload: map[string]any{"Allocation": alloc}}
	}
	yes := true
	cases := []struct {
		name string
		ev   api.Event
		want bool
	}{
		{"workspace allocation running", event(job, "running", "run", nil), true},
		{"still pending", event(job, "pending", "run", nil), false},
		{"being stopped", event(job, "running", "stop", nil), false},
		{"health known", event(job, "running", "run", &yes), false},
		{"archive job", event(job+"-archive", "running", "run", nil), false},
		{"another job", event("web", "running", "run", nil), false},
		{"not an allocation", api.Event{Topic: api.TopicJob, Key: job}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			a, ok := startingAlloc(tc.ev)
			if ok != tc.want || ok && a.ID != "a1" {
				t.Fatalf("startingAlloc = %+v, %v, want %v", a, ok, tc.want)
			}
		})
	}
}

// Each starting allocation is probed once while a prober runs; the offers
// a stopped prober left unanswered go to the next one, and an observation
// drops what is no longer starting.
func TestProbeOffers(t *testing.T) {
	b := &Backend{answered: newAnswered()}
	first := &prober{backend: b, queue: make(chan probeOffer, 4)}
	first.offer("a1", nil)
	first.offer("a1", nil)
	first.offer("a2", nil)
	if n := len(first.queue); n != 2 {
		t.Fatalf("%d allocations queued, want 2 (a1 once, a2)", n)
	}
	b.answered.answers["a2"] = answer{run: "r1", at: time.Now()}

	b.answered.dropOffers()
	next := &prober{backend: b, queue: make(chan probeOffer, 4)}
	next.offer("a1", nil)
	next.offer("a2", nil)
	if got := len(next.queue); got != 1 || (<-next.queue).id != "a1" {
		t.Fatalf("next prober got %d allocation(s), want only a1, which no probe answered", got)
	}

	got := b.answered.snapshot(map[string]bool{"a1": true})
	if len(got) != 0 {
		t.Fatalf("snapshot kept %v, want nothing of a2, no longer starting", got)
	}
	if !next.wanted("a1") || next.wanted("a2") {
		t.Fatal("a1 still starting must stay wanted, a2 must not")
	}
}

// An allocation offered by its event is probed at the address the event
// carries, with the run of the job the mirror holds, when that
// registration created it; otherwise (no stream, a job registered again
// since, a stopped job) the allocation is read for its job.
func TestProbeEventTarget(t *testing.T) {
	job := "ws-" + wsMirrorA
	alloc := func(createIndex uint64) *api.Allocation {
		return &api.Allocation{
			ID: "a2", Namespace: "default", JobID: job, CreateIndex: createIndex,
			ClientStatus: api.AllocClientStatusRunning, DesiredStatus: api.AllocDesiredStatusRun,
			AllocatedResources: &api.AllocatedResources{Shared: api.AllocatedSharedResources{Ports: []api.PortMapping{
				{Label: "agent", HostIP: "127.0.0.1", Value: 20001},
				{Label: "http", HostIP: "127.0.0.1", Value: 20002},
			}}},
		}
	}
	withRun := func(m *mirror, modifyIndex uint64, stop bool) {
		m.mu.Lock()
		defer m.mu.Unlock()
		m.jobs[job] = &api.JobListStub{ID: job, Type: "service", Stop: stop, ModifyIndex: modifyIndex, JobModifyIndex: modifyIndex,
			Meta: managedMeta(wsMirrorA, MetaRunID, "run-2")}
	}
	cases := []struct {
		name    string
		mirror  func() *mirror
		alloc   *api.Allocation
		want    probeAddr
		wantHit bool
	}{
		{"created by the job the mirror holds", func() *mirror { m, _ := installed(t); withRun(m, 20, false); return m },
			alloc(21), probeAddr{wsID: wsMirrorA, run: "run-2", addr: "127.0.0.1:20002"}, true},
		{"created by that registration's own index", func() *mirror { m, _ := installed(t); withRun(m, 21, false); return m },
			alloc(21), probeAddr{wsID: wsMirrorA, run: "run-2", addr: "127.0.0.1:20002"}, true},
		{"the job was registered again since", func() *mirror { m, _ := installed(t); withRun(m, 30, false); return m },
			alloc(21), probeAddr{}, false},
		{"the job is stopped", func() *mirror { m, _ := installed(t); withRun(m, 20, true); return m },
			alloc(21), probeAddr{}, false},
		{"no stream", func() *mirror { return newMirror() }, alloc(21), probeAddr{}, false},
		{"offered by an observation", func() *mirror { m, _ := installed(t); withRun(m, 20, false); return m },
			nil, probeAddr{}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			b := &Backend{mirror: tc.mirror(), opts: Options{Namespace: "default"}}
			p := &prober{backend: b}
			got, ok := p.eventTarget(tc.alloc)
			if ok != tc.wantHit || got != tc.want {
				t.Fatalf("eventTarget = %+v, %v; want %+v, %v", got, ok, tc.want, tc.wantHit)
			}
		})
	}
}
