package nomad

import (
	"context"
	"net"
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

// TestE2EWatch follows a real agent's event stream: a workspace job wakes
// the controller, a job that is not codehub's does not, even while its
// events flow, and stopping the workspace wakes it again.
func TestE2EWatch(t *testing.T) {
	nomadtest.Binary(t)
	bins := t.TempDir()
	nomadtest.BuildProgram(t, bins, "./testdata/wsserver", "wsserver")
	a := nomadtest.Start(t, "")
	// No archive or restore job runs here, so no S3 server is needed.
	b := e2eBackend(t, a, bins, e2eConfig{})
	ctx := t.Context()
	const wsID = "01jb3x7k9q2m5n8p4r6s0twtch"

	var wakes atomic.Int64
	stopWatch := watchInBackground(t, b, func() { wakes.Add(1) })

	if err := b.ProvisionVolume(ctx, controller.VolumeSpec{WorkspaceID: wsID, UID: os.Getuid(), GID: os.Getgid()}); err != nil {
		t.Fatal(err)
	}
	observeUntil(t, b, wsID, "volume ready", func(o controller.Observed) bool { return o.VolumeReady })
	before := settledWakes(t, &wakes)

	// (a) The workspace job's events wake the controller.
	if err := b.StartWorkspace(ctx, controller.WorkspaceSpec{WorkspaceID: wsID}); err != nil {
		t.Fatal(err)
	}
	nomadtest.Eventually(t, 30*time.Second, "a wake after registering the workspace job", func() bool { return wakes.Load() > before })
	observeUntil(t, b, wsID, "upstream ready", func(o controller.Observed) bool { return o.UpstreamReady })
	before = settledWakes(t, &wakes)
	t.Logf("%d wake(s) up to the running workspace", before)

	// (b) Another job's events flow, seen by a subscription of our own,
	// without waking the controller.
	const otherID = "other-watch-e2e"
	seen := subscribeJob(t, a.Client, otherID)
	registerSleeper(t, a.Client, otherID)
	nomadtest.Eventually(t, 60*time.Second, "allocation event of "+otherID+" with client status running", func() bool {
		return seen.running.Load()
	})
	// Both subscriptions read the same broker; the grace lets the watch
	// catch up with events the other one has already delivered.
	time.Sleep(3 * time.Second)
	if n := wakes.Load(); n != before {
		t.Fatalf("%d wake(s) while only %s changed (%d events of it seen), want none", n-before, otherID, seen.events.Load())
	}
	t.Logf("no wake during %d events of %s", seen.events.Load(), otherID)

	// (c) Stopping the workspace wakes it again.
	if err := b.StopWorkspace(ctx, wsID, controller.StopSave); err != nil {
		t.Fatal(err)
	}
	nomadtest.Eventually(t, 30*time.Second, "a wake after stopping the workspace job", func() bool { return wakes.Load() > before })

	if err := stopWatch(); err != nil {
		t.Fatalf("watch: %v", err)
	}
	observeUntil(t, b, wsID, "container gone", func(o controller.Observed) bool { return !o.ContainerLive })
	if err := b.PurgeJob(ctx, wsID, controller.JobWorkspace); err != nil {
		t.Fatal(err)
	}
	deleteVolume(t, b, wsID)
	// Stop the other job and let its task die before purging it: the agent
	// stops with the test, and a task still running then leaves its
	// executor behind.
	if _, _, err := a.Client.Jobs().Deregister(otherID, false, nil); err != nil {
		t.Fatal(err)
	}
	nomadtest.Eventually(t, 60*time.Second, otherID+" allocations terminal", func() bool {
		allocs, _, err := a.Client.Jobs().Allocations(otherID, true, nil)
		if err != nil {
			return false
		}
		for _, al := range allocs {
			if !clientTerminal(al.ClientStatus) {
				return false
			}
		}
		return true
	})
	if _, _, err := a.Client.Jobs().Deregister(otherID, true, nil); err != nil {
		t.Fatal(err)
	}
}

// watchInBackground runs b.Watch until the returned func (or the end of the
// test) stops it; that func waits for Watch to return and yields its error.
func watchInBackground(t *testing.T, b *Backend, wake func()) func() error {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- b.Watch(ctx, wake) }()
	stop := sync.OnceValue(func() error {
		cancel()
		return <-done
	})
	t.Cleanup(func() { _ = stop() })
	return stop
}

// settledWakes waits until no wake has come for a few seconds and returns
// the count, so later assertions compare against a quiet stream.
func settledWakes(t *testing.T, wakes *atomic.Int64) int64 {
	t.Helper()
	const quiet = 3 * time.Second
	last, since := wakes.Load(), time.Now()
	nomadtest.Eventually(t, 60*time.Second, "wakes to settle", func() bool {
		if n := wakes.Load(); n != last {
			last, since = n, time.Now()
		}
		return time.Since(since) >= quiet
	})
	return last
}

// jobEvents counts what an independent event-stream subscription sees of
// one job.
type jobEvents struct {
	events  atomic.Int64
	running atomic.Bool
}

// subscribeJob follows the job and allocation events of job id until the
// test ends.
func subscribeJob(t *testing.T, client *api.Client, id string) *jobEvents {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	topics := map[api.Topic][]string{api.TopicJob: {id}, api.TopicAllocation: {id}}
	ch, err := client.EventStream().Stream(ctx, topics, 0, nil)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	seen := &jobEvents{}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for events := range ch {
			if events.Err != nil {
				return
			}
			for _, ev := range events.Events {
				seen.events.Add(1)
				if ev.Topic != api.TopicAllocation {
					continue
				}
				if alloc, err := ev.Allocation(); err == nil && alloc != nil && alloc.ClientStatus == api.AllocClientStatusRunning {
					seen.running.Store(true)
				}
			}
		}
	}()
	t.Cleanup(func() {
		cancel()
		wg.Wait()
	})
	return seen
}

// registerSleeper registers a raw_exec service job named id that codehub
// does not own: one task that sleeps, with a native service.
func registerSleeper(t *testing.T, client *api.Client, id string) {
	t.Helper()
	job := api.NewServiceJob(id, id, "global", 50)
	job.Datacenters = []string{"*"}
	task := api.NewTask("sleep", DriverRawExec).
		SetConfig("command", "/bin/sleep").
		SetConfig("args", []string{"3600"}).
		Require(&api.Resources{CPU: new(50), MemoryMB: new(32)})
	group := api.NewTaskGroup("sleep", 1).AddTask(task)
	group.Networks = []*api.NetworkResource{{DynamicPorts: []api.Port{{Label: "http"}}}}
	group.Services = []*api.Service{{Name: id, PortLabel: "http", Provider: ProviderNomad}}
	job.AddTaskGroup(group)
	if _, _, err := client.Jobs().Register(job, nil); err != nil {
		t.Fatalf("register %s: %v", id, err)
	}
}

// TestE2EWatchProbe starts a workspace whose program listens only after a
// while, under a check interval so long that Nomad's check never passes
// during the test: the check that may run as the task starts finds nothing
// listening. Watch's direct probe alone makes the upstream ready, wakes
// the controller, and lets the resolver route to it.
func TestE2EWatchProbe(t *testing.T) {
	nomadtest.Binary(t)
	bins := t.TempDir()
	nomadtest.BuildProgram(t, bins, "./testdata/wsserver", "wsserver")
	a := nomadtest.Start(t, "")
	b := e2eBackend(t, a, bins, e2eConfig{
		args:          []string{"-listen", "127.0.0.1:%PORT%", "-home", "%HOME%", "-listen-delay", "1s"},
		upstreamToken: func(wsID, runID string) string { return "tok-" + wsID + "-" + runID },
	})
	b.opts.CheckInterval = time.Hour
	ctx := t.Context()
	const wsID = "01jb3x7k9q2m5n8p4r6s0tprbe"

	var wakes atomic.Int64
	watchInBackground(t, b, func() { wakes.Add(1) })
	if err := b.ProvisionVolume(ctx, controller.VolumeSpec{WorkspaceID: wsID, UID: os.Getuid(), GID: os.Getgid()}); err != nil {
		t.Fatal(err)
	}
	observeUntil(t, b, wsID, "volume ready", func(o controller.Observed) bool { return o.VolumeReady })
	if err := b.StartWorkspace(ctx, controller.WorkspaceSpec{WorkspaceID: wsID, RunID: "run-1"}); err != nil {
		t.Fatal(err)
	}
	observeUntil(t, b, wsID, "upstream ready by the probe alone", func(o controller.Observed) bool { return o.UpstreamReady })

	allocs, _, err := a.Client.Jobs().Allocations(jobID(wsID), false, nil)
	if err != nil || len(allocs) != 1 {
		t.Fatalf("allocations of %s: %d, %v", jobID(wsID), len(allocs), err)
	}
	checks, err := a.Client.Allocations().Checks(allocs[0].ID, nil)
	if err != nil {
		t.Fatal(err)
	}
	if allPassing(checks) {
		t.Fatalf("Nomad's check passed (%+v): the test cannot tell the probe's part", checks)
	}
	if n := wakes.Load(); n == 0 {
		t.Fatal("no wake from Watch")
	}
	addr, err := NewServiceResolver(hclog.NewNullLogger(), a.Client, ResolverOptions{Namespace: "default"}).Resolve(ctx, wsID)
	if err != nil {
		t.Fatalf("resolve while only the probe answered: %v", err)
	}
	if _, port, _ := net.SplitHostPort(addr); port != strconv.Itoa(allocPort(t, a.Client, allocs[0].ID)) {
		t.Fatalf("resolved %s, want the allocation's http port", addr)
	}
}

func allocPort(t *testing.T, client *api.Client, allocID string) int {
	t.Helper()
	alloc, _, err := client.Allocations().Info(allocID, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range alloc.AllocatedResources.Shared.Ports {
		if p.Label == "http" {
			return p.Value
		}
	}
	t.Fatalf("allocation %s has no http port", allocID)
	return 0
}
