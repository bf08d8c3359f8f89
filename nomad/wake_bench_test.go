package nomad

import (
	"context"
	"fmt"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/codehub-io/codehub/controller"
	"github.com/codehub-io/codehub/internal/nomadtest"
)

// BenchmarkWakeToReady measures, on a real agent with raw_exec, the time
// from StartWorkspace of a stopped workspace (STANDBY, volume kept) until
// Observe reports its upstream ready, with the backend's Watch running as
// the controller runs it: Observe is called when Watch wakes and every
// 100 ms besides, as the controller's active interval would at best. Each
// program (the small test server, and code-server when
// CODEHUB_TEST_CODE_SERVER names it) is measured with readiness left to
// Nomad's check alone and with the direct probe, back to back on one agent.
// Besides the percentiles it reports, from Nomad's own timestamps, the
// median time to place the allocation (sched), to start its task (task:
// prestart hooks, template, driver) and from there to ready (boot), and
// the median time from the start until the event stream reported the
// allocation running (running), which is when a probe can begin.
func BenchmarkWakeToReady(b *testing.B) {
	nomadtest.Binary(b)
	bins := b.TempDir()
	nomadtest.BuildProgram(b, bins, "./testdata/wsserver", "wsserver")
	a := nomadtest.Start(b, "")
	programs := []struct {
		name string
		conf e2eConfig
	}{{name: "wsserver", conf: e2eConfig{upstreamToken: benchToken}}}
	if cs := os.Getenv(envCodeServer); cs != "" {
		programs = append(programs, struct {
			name string
			conf e2eConfig
		}{name: "code-server", conf: e2eConfig{
			command: cs,
			args: []string{
				"--bind-addr", "127.0.0.1:%PORT%",
				"--auth", "password",
				"--disable-telemetry",
				"--disable-update-check",
				"--disable-workspace-trust",
				"--ignore-last-opened",
				"--user-data-dir", "%HOME%/.local/share/code-server",
				"--extensions-dir", "%HOME%/.local/share/code-server/extensions",
				"%HOME%",
			},
			cpu: 500, memory: 2048,
			upstreamToken: benchToken,
		}})
	} else {
		b.Logf("code-server not measured: set %s", envCodeServer)
	}
	for pi, p := range programs {
		for mi, mode := range []string{"check", "probe"} {
			// Workspace ids are lower-case ULIDs: no i, l, o or u.
			wsID := fmt.Sprintf("01jb3x7k9q2m5n8p4r6s0twk%d%d", pi, mi)
			b.Run(p.name+"/"+mode, func(b *testing.B) {
				benchWake(b, a, bins, p.conf, mode == "check", wsID)
			})
		}
	}
}

func benchToken(wsID, runID string) string { return "tok-" + wsID + "-" + runID }

func benchWake(b *testing.B, a *nomadtest.Agent, bins string, conf e2eConfig, checkOnly bool, wsID string) {
	backend := e2eBackend(b, a, bins, conf)
	backend.opts.CheckOnly = checkOnly
	ctx, cancel := context.WithCancel(b.Context())
	woken := make(chan struct{}, 1)
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		_ = backend.Watch(ctx, func() {
			select {
			case woken <- struct{}{}:
			default:
			}
		})
	}()
	defer func() {
		cancel()
		<-watched
	}()

	if err := backend.ProvisionVolume(ctx, controller.VolumeSpec{WorkspaceID: wsID, UID: os.Getuid(), GID: os.Getgid()}); err != nil {
		b.Fatal(err)
	}
	waitObserved(b, backend, wsID, func(o controller.Observed) bool { return o.VolumeReady })
	running := runningEvents(ctx, b, a.Client, jobID(wsID))

	var samples, sched, task, boot, seen []time.Duration
	run := 0
	for b.Loop() {
		run++
		spec := controller.WorkspaceSpec{WorkspaceID: wsID, RunID: fmt.Sprintf("run-%d", run)}
		start := time.Now()
		if err := backend.StartWorkspace(ctx, spec); err != nil {
			b.Fatal(err)
		}
		waitWoken(b, backend, wsID, woken, func(o controller.Observed) bool { return o.UpstreamReady || o.Failure != nil })
		ready := time.Now()
		samples = append(samples, ready.Sub(start))

		b.StopTimer()
		if o := observed(b, backend, wsID); o.Failure != nil {
			b.Fatalf("workspace failed: %+v", o.Failure)
		}
		if allocID, created, started, ok := allocTimes(b, a.Client, jobID(wsID)); ok {
			sched = append(sched, created.Sub(start))
			task = append(task, started.Sub(created))
			boot = append(boot, ready.Sub(started))
			if at, ok := running.at(allocID); ok {
				seen = append(seen, at.Sub(start))
			}
		}
		if err := backend.StopWorkspace(ctx, wsID, controller.StopSave); err != nil {
			b.Fatal(err)
		}
		waitObserved(b, backend, wsID, func(o controller.Observed) bool { return !o.ContainerLive })
		b.StartTimer()
	}
	median := func(d []time.Duration) float64 {
		if len(d) == 0 {
			return 0
		}
		slices.Sort(d)
		return d[len(d)/2].Seconds()
	}
	slices.Sort(samples)
	b.ReportMetric(median(samples), "p50-s")
	b.ReportMetric(samples[len(samples)*9/10].Seconds(), "p90-s")
	b.ReportMetric(samples[len(samples)-1].Seconds(), "max-s")
	b.ReportMetric(median(sched), "sched-p50-s")
	b.ReportMetric(median(task), "task-p50-s")
	b.ReportMetric(median(boot), "boot-p50-s")
	b.ReportMetric(median(seen), "running-p50-s")
}

// firstRunning records when the event stream first reported each
// allocation of one job running.
type firstRunning struct {
	mu   sync.Mutex
	seen map[string]time.Time
}

func (f *firstRunning) at(allocID string) (time.Time, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	t, ok := f.seen[allocID]
	return t, ok
}

// runningEvents follows the allocation events of job until ctx ends.
func runningEvents(ctx context.Context, tb testing.TB, client *api.Client, job string) *firstRunning {
	tb.Helper()
	f := &firstRunning{seen: make(map[string]time.Time)}
	ch, err := client.EventStream().Stream(ctx, map[api.Topic][]string{api.TopicAllocation: {"*"}}, 0, nil)
	if err != nil {
		tb.Fatal(err)
	}
	go func() {
		for events := range ch {
			now := time.Now()
			for _, ev := range events.Events {
				a, err := ev.Allocation()
				if err != nil || a == nil || a.JobID != job || a.ClientStatus != api.AllocClientStatusRunning {
					continue
				}
				f.mu.Lock()
				if _, ok := f.seen[a.ID]; !ok {
					f.seen[a.ID] = now
				}
				f.mu.Unlock()
			}
		}
	}()
	return f
}

// allocTimes reads, of the job's newest allocation, its id, when Nomad
// created it and when its main task last started.
func allocTimes(tb testing.TB, client *api.Client, job string) (allocID string, created, started time.Time, ok bool) {
	tb.Helper()
	stubs, _, err := client.Jobs().Allocations(job, false, nil)
	if err != nil || len(stubs) == 0 {
		return "", created, started, false
	}
	newest := stubs[0]
	for _, s := range stubs {
		if s.CreateIndex > newest.CreateIndex {
			newest = s
		}
	}
	alloc, _, err := client.Allocations().Info(newest.ID, nil)
	if err != nil {
		return "", created, started, false
	}
	created = time.Unix(0, alloc.CreateTime)
	for _, ts := range alloc.TaskStates {
		if ts.State == "running" && ts.StartedAt.After(started) {
			started = ts.StartedAt
		}
	}
	return alloc.ID, created, started, !started.IsZero()
}

func observed(tb testing.TB, backend *Backend, wsID string) controller.Observed {
	tb.Helper()
	snap, err := backend.Observe(tb.Context())
	if err != nil {
		tb.Fatal(err)
	}
	return snap.Workspaces[wsID]
}

// waitWoken observes when Watch wakes and every 100 ms besides, until cond.
func waitWoken(tb testing.TB, backend *Backend, wsID string, woken <-chan struct{}, cond func(controller.Observed) bool) {
	tb.Helper()
	deadline := time.Now().Add(90 * time.Second)
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		snap, err := backend.Observe(tb.Context())
		if err == nil && cond(snap.Workspaces[wsID]) {
			return
		}
		if time.Now().After(deadline) {
			tb.Fatalf("workspace %s never reached the expected state (last error %v)", wsID, err)
		}
		select {
		case <-woken:
		case <-tick.C:
		}
	}
}

func waitObserved(tb testing.TB, backend *Backend, wsID string, cond func(controller.Observed) bool) {
	tb.Helper()
	deadline := time.Now().Add(90 * time.Second)
	for {
		snap, err := backend.Observe(tb.Context())
		if err == nil && cond(snap.Workspaces[wsID]) {
			return
		}
		if time.Now().After(deadline) {
			tb.Fatalf("workspace %s never reached the expected state (last error %v)", wsID, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
