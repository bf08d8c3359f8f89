package nomad

import (
	"fmt"
	"runtime"
	"strings"
	"testing"

	"github.com/hashicorp/nomad/api"

	"github.com/codehub-io/codehub/controller"
)

// benchFixture serves n running, healthy workspaces with volumes and
// service registrations, of which one per startingEvery (none for 0) is
// still starting (its deployment health unknown), which costs one check
// read each. Allocations are listed without task states, as Observe asks
// for them.
func benchFixture(f *fakeNomad, n, startingEvery int) {
	jobs := make([]*api.JobListStub, 0, n)
	allocs := make([]*api.AllocationListStub, 0, n)
	vols := make([]*api.HostVolumeStub, 0, n)
	svcs := make([]*api.ServiceRegistrationStub, 0, n)
	for i := range n {
		wsID := fmt.Sprintf("01bench%019d", i)
		jobs = append(jobs, &api.JobListStub{ID: "ws-" + wsID, Status: "running", JobModifyIndex: 10, Meta: managedMeta(wsID)})
		a := &api.AllocationListStub{ID: fmt.Sprintf("alloc-%d", i), JobID: "ws-" + wsID, CreateIndex: 11,
			ClientStatus: "running", DesiredStatus: "run", DeploymentStatus: healthy(true)}
		if startingEvery > 0 && i%startingEvery == 0 {
			a.DeploymentStatus = nil
			f.json("GET /v1/client/allocation/"+a.ID+"/checks", api.AllocCheckStatuses{"c": {Status: "success"}})
		}
		allocs = append(allocs, a)
		vols = append(vols, &api.HostVolumeStub{ID: fmt.Sprintf("vol-%d", i), Name: controller.VolumeName(wsID), State: api.HostVolumeStateReady,
			NodeID: fmt.Sprintf("node-%d", i%10)})
		svcs = append(svcs, &api.ServiceRegistrationStub{ServiceName: serviceName(wsID)})
	}
	f.json("GET /v1/jobs", jobs)
	f.json("GET /v1/allocations", allocs)
	f.json("GET /v1/volumes", vols)
	var nodes []*api.NodeListStub
	for i := range 10 {
		nodes = append(nodes, &api.NodeListStub{ID: fmt.Sprintf("node-%d", i), Name: fmt.Sprintf("client-%d", i),
			Status: api.NodeStatusReady, SchedulingEligibility: api.NodeSchedulingEligible})
	}
	f.json("GET /v1/nodes", nodes)
	f.json("GET /v1/services", []*api.ServiceRegistrationListStub{{Namespace: "default", Services: svcs}})
}

func BenchmarkObserve(b *testing.B) {
	for _, n := range []int{1000, 10000} {
		b.Run(fmt.Sprintf("jobs=%d", n), func(b *testing.B) {
			f := newFakeNomad(b)
			benchFixture(f, n, 100)
			backend := newTestBackend(b, f, testOptions())
			for b.Loop() {
				snap, err := backend.Observe(b.Context())
				if err != nil {
					b.Fatal(err)
				}
				if len(snap.Workspaces) != n {
					b.Fatalf("observed %d workspaces, want %d", len(snap.Workspaces), n)
				}
			}
			f.mu.Lock()
			lists, checks := 0, 0
			for _, r := range f.requests {
				if strings.HasSuffix(r.Path, "/checks") {
					checks++
				} else {
					lists++
				}
			}
			f.mu.Unlock()
			b.ReportMetric(float64(lists)/float64(b.N), "list-calls/op")
			b.ReportMetric(float64(checks)/float64(b.N), "check-calls/op")
		})
	}
}

// BenchmarkObserveMirror: observations that follow Nomad's event stream
// over n converged workspaces. "converged": nothing changed since the last
// observation; "one change": one workspace's allocation changed before
// each. list-calls/op counts every request but the nodes' listing, which
// each observation makes.
func BenchmarkObserveMirror(b *testing.B) {
	for _, n := range []int{10000, 100000} {
		f := newFakeNomad(b)
		benchFixture(f, n, 0)
		backend := newTestBackend(b, f, testOptions())
		conn := backend.mirror.connected()
		if _, err := backend.Observe(b.Context()); err != nil {
			b.Fatal(err)
		}
		requests := func() int {
			f.mu.Lock()
			defer f.mu.Unlock()
			calls := 0
			for _, r := range f.requests {
				if r.Path != "/v1/nodes" {
					calls++
				}
			}
			return calls
		}
		run := func(b *testing.B, change func(i int)) {
			before := requests()
			i := 0
			for b.Loop() {
				change(i)
				i++
				snap, err := backend.Observe(b.Context())
				if err != nil {
					b.Fatal(err)
				}
				if len(snap.Workspaces) != n {
					b.Fatalf("observed %d workspaces, want %d", len(snap.Workspaces), n)
				}
			}
			b.ReportMetric(float64(requests()-before)/float64(b.N), "list-calls/op")
		}
		b.Run(fmt.Sprintf("jobs=%d/converged", n), func(b *testing.B) {
			run(b, func(int) {})
		})
		b.Run(fmt.Sprintf("jobs=%d/one-change", n), func(b *testing.B) {
			index := uint64(1000)
			run(b, func(i int) {
				index++
				k := i % n
				backend.mirror.apply(conn, []api.Event{allocEvent(index, &api.Allocation{
					ID: fmt.Sprintf("alloc-%d", k), JobID: fmt.Sprintf("ws-01bench%019d", k), CreateIndex: 11, ModifyIndex: index,
					ClientStatus: "running", DesiredStatus: "run", DeploymentStatus: healthy(true),
				})})
			})
		})
	}
}

// BenchmarkMirrorMemory reports the heap that a backend following the
// event stream keeps for n converged workspaces: the mirror of their
// objects and the last observation beside it.
func BenchmarkMirrorMemory(b *testing.B) {
	for _, n := range []int{10000, 100000} {
		b.Run(fmt.Sprintf("jobs=%d", n), func(b *testing.B) {
			f := newFakeNomad(b)
			benchFixture(f, n, 0)
			for b.Loop() {
				var before, after runtime.MemStats
				runtime.GC()
				runtime.ReadMemStats(&before)
				backend := newTestBackend(b, f, testOptions())
				backend.mirror.connected()
				if _, err := backend.Observe(b.Context()); err != nil {
					b.Fatal(err)
				}
				runtime.GC()
				runtime.ReadMemStats(&after)
				b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/(1<<20), "heap-MiB")
				runtime.KeepAlive(backend)
			}
		})
	}
}
