package nomad

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/nomad/api"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/codehub-io/codehub/archive"
	"github.com/codehub-io/codehub/controller"
	"github.com/codehub-io/codehub/internal/nomadtest"
	"github.com/codehub-io/codehub/internal/testenv"
)

// mockNodeCapacity declares a node large enough for its share of the
// mock jobs' reservations (10 MiB, 10 MHz and 10 MB of ephemeral disk
// each); the mock tasks use none of it.
const mockNodeCapacity = `  memory_total_mb   = 1048576
  cpu_total_compute = 1048576
  disk_total_mb     = 1048576`

// BenchmarkNomadMockJobs puts CODEHUB_MOCK_JOBS (10,000) workspace jobs
// into a real Nomad server's state, spread over CODEHUB_MOCK_NODES (10)
// client nodes, each job running a task of the mock_driver that
// non-release Nomad builds include, and times an observation of them:
// listing everything (no event stream), and from the mirror the event
// stream keeps, converged and after one job stopped. It then times whole
// controller passes over as many RUNNING workspaces in PostgreSQL, each
// observed from that mirror. The baseline is a plain client listing the
// same jobs and allocations. It skips without a nomad binary on PATH,
// PostgreSQL or the S3 server (scripts/with-services.sh starts both); run
// it with -benchtime 1x.
func BenchmarkNomadMockJobs(b *testing.B) {
	n, nodes := testenv.Count(b, "CODEHUB_MOCK_JOBS", 10000), testenv.Count(b, "CODEHUB_MOCK_NODES", 10)
	// Before the cluster: a benchmark that will skip does so at once, not
	// after registering thousands of jobs.
	db := newMockDB(b, n)
	names := make([]string, nodes)
	for i := range names {
		names[i] = fmt.Sprintf("mock-%d", i)
	}
	// The agents share two busy cores with the server for minutes: a
	// heartbeat late by a few seconds must not mark a node down.
	// Each client collects its host's and every task's statistics once a
	// collection interval (1 s by default). Here the ten "nodes" share one
	// machine, so each would statfs all the machine's mounts, two per
	// allocation of every node, each second: at 8,500 allocations that
	// kept two cores saturated. Once a minute leaves the machine to the
	// scheduling and the answers measured.
	cluster := nomadtest.StartClusterWith(b, nomadtest.ClusterOptions{
		Client:         mockNodeCapacity,
		ClientConfig:   "telemetry {\n  collection_interval = \"1m\"\n}\n",
		HeartbeatGrace: time.Minute,
	}, names...)
	memory := func() (server, clients int64) {
		for _, cc := range cluster.Clients {
			clients += testenv.ResidentBytes(b, cc.PID())
		}
		return testenv.ResidentBytes(b, cluster.ServerPID), clients
	}
	// Spread, not Nomad's default bin packing, which on nodes this large
	// puts most jobs on a few of them.
	if _, _, err := cluster.Client.Operator().SchedulerSetConfiguration(&api.SchedulerConfiguration{SchedulerAlgorithm: api.SchedulerAlgorithmSpread}, nil); err != nil {
		b.Fatal(err)
	}
	idleServer, idleClients := memory()
	start := time.Now()
	registerMockJobs(b, cluster.Client, n)
	server, clients := memory()
	b.Logf("registered %d mock jobs on %d nodes and waited for their allocations to run in %v", n, nodes, time.Since(start).Round(time.Second))
	b.Logf("memory: the server from %d MiB to %d MiB (%.1f KiB a job), the clients from %d MiB to %d MiB (%.1f KiB an allocation)",
		idleServer>>20, server>>20, float64(server-idleServer)/1024/float64(n),
		idleClients>>20, clients>>20, float64(clients-idleClients)/1024/float64(n))
	b.ReportMetric(float64(server>>20), "server-MiB")
	b.ReportMetric(float64(clients>>20), "clients-MiB")
	b.Logf("load average as the observations begin: %s", loadAverage(b))
	const samples = mockSamples
	timeIt := func(name string, fn func()) time.Duration {
		var total time.Duration
		took := make([]time.Duration, samples)
		for i := range took {
			t0 := time.Now()
			fn()
			took[i] = time.Since(t0)
			total += took[i]
		}
		mean := total / time.Duration(samples)
		b.ReportMetric(float64(mean.Microseconds())/1000, name+"-ms")
		slices.Sort(took)
		b.Logf("%s: mean %v, min %v, median %v, max %v", name, mean.Round(time.Microsecond),
			took[0].Round(time.Microsecond), took[samples/2].Round(time.Microsecond), took[samples-1].Round(time.Microsecond))
		return mean
	}
	for range b.N {
		plain := timeIt("plain-list", func() {
			q := &api.QueryOptions{Prefix: controller.NamePrefix}
			if _, _, err := cluster.Client.Jobs().List(q); err != nil {
				b.Fatal(err)
			}
			if _, _, err := cluster.Client.Allocations().List(&api.QueryOptions{Params: map[string]string{"task_states": "false"}}); err != nil {
				b.Fatal(err)
			}
		})

		listing := New(hclog.NewNullLogger(), cluster.Client, mockOptions(), nil)
		listed := timeIt("observe-listing", func() { observeAll(b, listing, n) })

		mirrored := New(hclog.NewNullLogger(), cluster.Client, mockOptions(), nil)
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
		pass := db.convergedPasses(b, mirrored, cluster, timeIt)

		// One workspace stops: a change of one job and its allocation.
		id := mockJobID(0)
		if _, _, err := cluster.Client.Jobs().Deregister(id, false, nil); err != nil {
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
		b.Logf("%d jobs: plain list %v; observe by listing %v; from the mirror: first (lists and installs) %v, converged %v, after one job stopped %v; a converged controller pass %v",
			n, plain.Round(time.Microsecond), listed.Round(time.Microsecond), install.Round(time.Microsecond),
			converged.Round(time.Microsecond), changed.Round(time.Microsecond), pass.Round(time.Microsecond))
	}
}

// mockSamples is how many times each observation and pass is timed.
const mockSamples = 10

// mockDB holds n RUNNING workspaces, one for each mock job, for a
// controller to pass over.
type mockDB struct {
	pool     *pgxpool.Pool
	archives *archive.Store
	epoch    int64
}

func newMockDB(b *testing.B, n int) *mockDB {
	b.Helper()
	s3 := testenv.NewS3(b)
	pool, owner, epoch := newTestDB(b, "mock-bench")
	rows := make([][]any, n)
	for i := range rows {
		rows[i] = []any{mockWorkspace(i), owner, fmt.Sprintf("w%d", i), "mock", "RUNNING", "RUNNING"}
	}
	if _, err := pool.CopyFrom(b.Context(), pgx.Identifier{"workspaces"},
		[]string{"id", "owner_id", "name", "image", "desired_state", "phase"}, pgx.CopyFromRows(rows)); err != nil {
		b.Fatal(err)
	}
	return &mockDB{pool: pool, archives: archive.NewStore(hclog.NewNullLogger(), s3.Client, s3.Bucket), epoch: epoch}
}

// convergedPasses times controller passes, as codehub server's leader
// runs them, over the workspaces observed through backend's mirror: with
// the client agents at work, then with them paused. The ten clients stand
// for ten machines, and at a thousand allocations each they keep this
// machine's two cores busy; paused, the pass shares the machine only with
// the Nomad server and PostgreSQL, as on a host of codehub's own. The
// first passes record the observation in every row; the timed ones must
// write nothing and call no actuator.
func (d *mockDB) convergedPasses(b *testing.B, backend *Backend, cluster *nomadtest.Cluster, timeIt func(string, func()) time.Duration) time.Duration {
	b.Helper()
	ctx := b.Context()
	ready := &mockReady{Backend: backend}
	ctl := controller.NewWorkspaceController(hclog.NewNullLogger(), d.pool, ready, d.archives, controller.DefaultConfig())
	tick := func() controller.TickStats {
		stats, err := ctl.Tick(ctx, d.epoch)
		if err != nil {
			b.Fatal(err)
		}
		if stats.Steps != 0 {
			b.Fatalf("a pass over running workspaces acted %d times: %+v", stats.Steps, stats)
		}
		return stats
	}
	for i := 0; tick().Writes != 0; i++ {
		if i == 3 {
			b.Fatal("passes still write after the observation was recorded three times")
		}
	}
	timePasses := func(name string) time.Duration {
		observed, cpu := ready.observes.Load(), processCPU(b)
		mean := timeIt(name, func() {
			if stats := tick(); stats.Writes != 0 {
				b.Fatalf("a converged pass wrote %d rows", stats.Writes)
			}
		})
		b.Logf("%s: %v of this process's CPU a pass", name, ((processCPU(b) - cpu) / mockSamples).Round(time.Microsecond))
		if got := ready.observes.Load() - observed; got != mockSamples {
			b.Fatalf("%d timed passes observed Nomad %d times", mockSamples, got)
		}
		return mean
	}
	pass := timePasses("controller-pass")
	func() {
		defer pause(b, cluster)()
		timePasses("controller-pass-clients-paused")
	}()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	b.Logf("heap in use by the benchmark process after the passes (both backends, the mirror, the controller): %d MiB", m.HeapInuse>>20)
	return pass
}

// pause stops every client agent of the cluster (SIGSTOP) and returns
// what continues them. A few seconds are well within the heartbeat grace
// the mock cluster gives its nodes.
func pause(b *testing.B, cluster *nomadtest.Cluster) (resume func()) {
	b.Helper()
	signal := func(sig syscall.Signal) {
		for _, cc := range cluster.Clients {
			if err := syscall.Kill(cc.PID(), sig); err != nil {
				b.Errorf("signal %v to client %d: %v", sig, cc.PID(), err)
			}
		}
	}
	signal(syscall.SIGSTOP)
	return func() { signal(syscall.SIGCONT) }
}

// processCPU is the user and system CPU time this process has used.
func processCPU(b *testing.B) time.Duration {
	b.Helper()
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// mockReady is Nomad's observation of the mock jobs with each workspace's
// volume and upstream ready: mock jobs have no host volume and no health
// check to say so. Its own loop over the snapshot counts in the timed
// passes.
type mockReady struct {
	*Backend
	observes atomic.Int64
}

func (m *mockReady) Observe(ctx context.Context) (controller.Snapshot, error) {
	m.observes.Add(1)
	snap, err := m.Backend.Observe(ctx)
	for id, o := range snap.Workspaces {
		o.VolumeExists, o.VolumeReady, o.UpstreamReady = true, true, true
		snap.Workspaces[id] = o
	}
	return snap, err
}

// loadAverage is the machine's 1, 5 and 15 minute load averages.
func loadAverage(b *testing.B) string {
	b.Helper()
	raw, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		b.Fatal(err)
	}
	return strings.Join(strings.Fields(string(raw))[:3], " ")
}

func mockWorkspace(i int) string { return fmt.Sprintf("01wave%020d", i) }
func mockJobID(i int) string     { return jobID(mockWorkspace(i)) }

// mockOptions observe the mock jobs as with Consul for services: their
// readiness is their deployment health, which these jobs (no deployment,
// mockJob) never get, and no check is read.
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
	// Every 5 s: listing thousands of allocations keeps the server busy
	// for a good part of a second, which Eventually's 100 ms would take
	// from the placements being waited for.
	deadline := time.Now().Add(time.Duration(n) * time.Second / 2)
	for {
		allocs, _, err := client.Allocations().List(&api.QueryOptions{Params: map[string]string{"task_states": "false"}})
		running := 0
		for _, a := range allocs {
			if a.ClientStatus == api.AllocClientStatusRunning {
				running++
			}
		}
		if err == nil && running >= n {
			return
		}
		if time.Now().After(deadline) {
			b.Fatalf("%d of %d mock allocations running after %v (%v)", running, n, time.Duration(n)*time.Second/2, err)
		}
		time.Sleep(5 * time.Second)
	}
}

func mockJob(i int) *api.Job {
	id := mockJobID(i)
	job := api.NewServiceJob(id, id, "global", 50)
	job.Datacenters = []string{"*"}
	job.Meta = map[string]string{MetaManaged: "true", MetaWorkspaceID: mockWorkspace(i), MetaRunID: "01run00000000000000000000"}
	task := api.NewTask("workspace", "mock_driver").
		SetConfig("run_for", "24h").
		Require(&api.Resources{CPU: ptr(10), MemoryMB: ptr(10)})
	// Without logs Nomad starts no logmon process for the task; with one
	// each (about 12 MiB), 942 mock allocations filled 11 GiB.
	task.LogConfig = &api.LogConfig{Disabled: ptr(true), MaxFiles: ptr(1), MaxFileSizeMB: ptr(1)}
	group := api.NewTaskGroup("workspace", 1).AddTask(task)
	group.EphemeralDisk = &api.EphemeralDisk{SizeMB: ptr(10)}
	group.RestartPolicy = &api.RestartPolicy{Attempts: ptr(1), Mode: ptr("fail"), Interval: ptr(5 * time.Minute), Delay: ptr(2 * time.Second)}
	// No deployment (max_parallel 0): Nomad's deployment watcher does
	// work in proportion to the running deployments for each one, and
	// with one per job placements fell to about 3.5 a second at 3,500.
	job.Update = &api.UpdateStrategy{MaxParallel: ptr(0)}
	group.Update = &api.UpdateStrategy{MaxParallel: ptr(0)}
	return job.AddTaskGroup(group)
}
