package nomad

import (
	"fmt"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/nomad/api"

	"github.com/codehub-io/codehub/controller"
	"github.com/codehub-io/codehub/internal/nomadtest"
)

// mockNodeCapacity declares a node large enough for every mock job's
// reservation (10 MiB and 10 MHz each).
const mockNodeCapacity = `  memory_total_mb   = 1048576
  cpu_total_compute = 1048576`

// BenchmarkNomadMockJobs puts CODEHUB_MOCK_JOBS (10,000) workspace jobs
// into a real Nomad server's state, each running a task of the
// mock_driver that non-release Nomad builds include, and times an
// observation of them: listing everything (no event stream), and from
// the mirror the event stream keeps, converged and after one job stopped.
// The baseline is a plain client listing the same jobs and allocations.
// It skips without a nomad binary on PATH; run it with -benchtime 1x.
func BenchmarkNomadMockJobs(b *testing.B) {
	n := 10000
	if v := os.Getenv("CODEHUB_MOCK_JOBS"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil {
			b.Fatalf("CODEHUB_MOCK_JOBS=%q: %v", v, err)
		}
	}
	agent := nomadtest.StartWith(b, nomadtest.Options{Client: mockNodeCapacity, Drivers: []string{"mock_driver"}})
	start := time.Now()
	registerMockJobs(b, agent.Client, n)
	b.Logf("registered %d mock jobs and waited for their allocations to run in %v", n, time.Since(start).Round(time.Second))

	samples := 10
	timeIt := func(name string, fn func()) time.Duration {
		var total time.Duration
		for range samples {
			t0 := time.Now()
			fn()
			total += time.Since(t0)
		}
		mean := total / time.Duration(samples)
		b.ReportMetric(float64(mean.Microseconds())/1000, name+"-ms")
		return mean
	}
	for range b.N {
		plain := timeIt("plain-list", func() {
			q := &api.QueryOptions{Prefix: controller.NamePrefix}
			if _, _, err := agent.Client.Jobs().List(q); err != nil {
				b.Fatal(err)
			}
			if _, _, err := agent.Client.Allocations().List(&api.QueryOptions{Params: map[string]string{"task_states": "false"}}); err != nil {
				b.Fatal(err)
			}
		})

		listing := New(hclog.NewNullLogger(), agent.Client, mockOptions(), nil)
		listed := timeIt("observe-listing", func() { observeAll(b, listing, n) })

		mirrored := New(hclog.NewNullLogger(), agent.Client, mockOptions(), nil)
		ctx := b.Context()
		done := make(chan error, 1)
		go func() { done <- mirrored.Watch(ctx, func() {}) }()
		nomadtest.Eventually(b, 30*time.Second, "event stream connected", func() bool {
			mirrored.mirror.mu.Lock()
			defer mirrored.mirror.mu.Unlock()
			return mirrored.mirror.stream != 0
		})
		t0 := time.Now()
		observeAll(b, mirrored, n)
		install := time.Since(t0)
		converged := timeIt("observe-mirror", func() { observeAll(b, mirrored, n) })

		// One workspace stops: a change of one job and its allocation.
		id := mockJobID(0)
		if _, _, err := agent.Client.Jobs().Deregister(id, false, nil); err != nil {
			b.Fatal(err)
		}
		nomadtest.Eventually(b, 30*time.Second, "the stop reached the mirror", func() bool {
			mirrored.mirror.mu.Lock()
			defer mirrored.mirror.mu.Unlock()
			j := mirrored.mirror.jobs[id]
			return j != nil && j.Stop
		})
		t0 = time.Now()
		snap := observeAll(b, mirrored, n)
		changed := time.Since(t0)
		if snap.Workspaces[mockWorkspace(0)].RunStarted {
			b.Error("the stopped job still shows its run")
		}
		b.ReportMetric(float64(install.Microseconds())/1000, "observe-install-ms")
		b.ReportMetric(float64(changed.Microseconds())/1000, "observe-one-change-ms")
		b.Logf("%d jobs: plain list %v; observe by listing %v; from the mirror: first (lists and installs) %v, converged %v, after one job stopped %v",
			n, plain.Round(time.Microsecond), listed.Round(time.Microsecond), install.Round(time.Microsecond),
			converged.Round(time.Microsecond), changed.Round(time.Microsecond))
	}
}

func mockWorkspace(i int) string { return fmt.Sprintf("01wave%020d", i) }
func mockJobID(i int) string     { return jobID(mockWorkspace(i)) }

// mockOptions observe the mock jobs as with Consul for services: their
// readiness is their deployment health, which these jobs (no update
// block, so no deployment to watch each) never get, and no check is read.
func mockOptions() Options {
	o := testOptions()
	o.Driver = "mock_driver"
	o.ServiceProvider = ProviderConsul
	return o
}

// observeAll observes through b and checks every workspace is seen.
func observeAll(b *testing.B, backend *Backend, n int) controller.Snapshot {
	b.Helper()
	snap, err := backend.Observe(b.Context())
	if err != nil {
		b.Fatal(err)
	}
	if len(snap.Workspaces) < n {
		b.Fatalf("observed %d workspaces, want %d", len(snap.Workspaces), n)
	}
	return snap
}

// registerMockJobs registers n workspace jobs of codehub's name and mark,
// 32 at a time, each one mock_driver task that runs for a day, and waits
// until every allocation runs.
func registerMockJobs(b *testing.B, client *api.Client, n int) {
	b.Helper()
	var (
		next  atomic.Int64
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
	)
	for range 32 {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				if _, _, err := client.Jobs().Register(mockJob(i), nil); err != nil {
					mu.Lock()
					first = err
					mu.Unlock()
					return
				}
			}
		})
	}
	wg.Wait()
	if first != nil {
		b.Fatal(first)
	}
	nomadtest.Eventually(b, 30*time.Minute, fmt.Sprintf("%d mock allocations running", n), func() bool {
		allocs, _, err := client.Allocations().List(&api.QueryOptions{Params: map[string]string{"task_states": "false"}})
		if err != nil {
			return false
		}
		running := 0
		for _, a := range allocs {
			if a.ClientStatus == api.AllocClientStatusRunning {
				running++
			}
		}
		return running >= n
	})
}

func mockJob(i int) *api.Job {
	id := mockJobID(i)
	job := api.NewServiceJob(id, id, "global", 50)
	job.Datacenters = []string{"*"}
	job.Meta = map[string]string{MetaManaged: "true", MetaWorkspaceID: mockWorkspace(i), MetaRunID: "01run00000000000000000000"}
	task := api.NewTask("workspace", "mock_driver").
		SetConfig("run_for", "24h").
		Require(&api.Resources{CPU: ptr(10), MemoryMB: ptr(10)})
	task.LogConfig = &api.LogConfig{MaxFiles: ptr(1), MaxFileSizeMB: ptr(1)}
	group := api.NewTaskGroup("workspace", 1).AddTask(task)
	// Nomad's default 300 MB of ephemeral disk each would fill the node's
	// disk before its memory.
	group.EphemeralDisk = &api.EphemeralDisk{SizeMB: ptr(10)}
	group.RestartPolicy = &api.RestartPolicy{Attempts: ptr(1), Mode: ptr("fail"), Interval: ptr(5 * time.Minute), Delay: ptr(2 * time.Second)}
	return job.AddTaskGroup(group)
}
