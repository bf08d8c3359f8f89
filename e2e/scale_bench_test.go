package e2e

import (
	"errors"
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/codehub-io/codehub/config"
	"github.com/codehub-io/codehub/controller"
	"github.com/codehub-io/codehub/internal/nomadtest"
	"github.com/codehub-io/codehub/internal/testenv"
	"github.com/codehub-io/codehub/nomad"
)

// scaleNodeCapacity is the dev agent's node as the scale harness sizes
// it. Each workspace job reserves the largest of its tasks' memory, and
// the stop archive's data mover asks for 256 MiB, so Nomad would place
// about 90 workspaces on this machine's 24 GiB although each uses a
// small part of that; the harness measures what they use instead.
const scaleNodeCapacity = `  memory_total_mb   = 262144
  cpu_total_compute = 262144`

// scalePoll is how often both sides of a measurement look for what became
// ready: the server's listing, or Nomad's allocations and a probe of each.
const scalePoll = 250 * time.Millisecond

// scaleWorkers is how many requests each side has in flight during a wave.
const scaleWorkers = 16

// BenchmarkNomadScale runs CODEHUB_SCALE_WORKSPACES (300) workspaces on a
// real Nomad agent (raw_exec, the small test server as the program, S3 on
// this machine) through a server started from its configuration file with
// the default pacing, and measures, against two plain clients
// registering volumes and jobs straight to Nomad in the same run (one a
// plain job with the same program, group and service, the other the very
// job codehub registers, with its workspace agent, templates and stop
// archive task):
//
//   - creating every workspace until all are RUNNING;
//   - a mass wake: half of them stopped, then asked to run at once, with
//     the spread of their waits against the controller's pass length;
//   - one wake while the others run, against the same wake on an empty
//     cluster (CODEHUB_SCALE_WAKES samples each, 10), by each client;
//   - the memory of a workspace (its program and Nomad's executor and
//     logmon), of the server and of the Nomad agent.
//
// CODEHUB_SCALE_INSTALLED=1 runs codehub from codehub_path instead of
// the artifact; CODEHUB_SCALE_PROFILES=dir keeps CPU profiles of the
// Nomad agent. `make scale` runs it; docs/benchmarks.md holds the results.
func BenchmarkNomadScale(b *testing.B) {
	n := testenv.Count(b, "CODEHUB_SCALE_WORKSPACES", 300)
	samples := testenv.Count(b, "CODEHUB_SCALE_WAKES", 10)
	bins := b.TempDir()
	if err := os.Chmod(bins, 0o755); err != nil {
		b.Fatal(err)
	}
	wsserver := nomadtest.BuildProgram(b, bins, "../nomad/testdata/wsserver", "wsserver")
	agent := nomadtest.StartWith(b, nomadtest.Options{Client: scaleNodeCapacity})
	agentPID := agent.PID
	for i := 0; i < b.N; i++ {
		metricsPort := testenv.FreePort(b)
		cfg := serverConfig{databaseURL: testenv.PostgresURL(b), redisURL: testenv.RedisURL(b), s3: testenv.NewS3(b)}
		// CODEHUB_SCALE_INSTALLED=1: codehub is installed on the node
		// (codehub_path), so no start downloads it as an artifact.
		installed := ""
		if os.Getenv("CODEHUB_SCALE_INSTALLED") != "" {
			installed = fmt.Sprintf("  codehub_path = %q\n", codehubBinary(b))
		}
		cfg.backend = fmt.Sprintf(`backend "nomad" {
  address = %q
  driver  = "raw_exec"
%s`+aclOptOut+`}

metrics {
  listen = "127.0.0.1:%d"
}

workspace {
  command = %q
  args    = ["-listen", "127.0.0.1:%%PORT%%", "-home", "%%HOME%%"]
  cpu     = 20
  memory  = 32
}
`, agent.Addr, installed, metricsPort, wsserver)
		cfg.maxRunning, cfg.maxRunningGlobal = n, n
		cfg.defaultPacing = true
		// As many requests in flight as the direct client keeps.
		cfg.coordinator = fmt.Sprintf("  parallel = %d\n", scaleWorkers)
		srv := startServer(b, cfg)
		// A dev agent that stops leaves its raw_exec tasks running;
		// hundreds of them would weigh on whatever runs next. The
		// workspaces are deleted first, through the API, and every job
		// left is stopped while the server still serves the codehub
		// binary their stop tasks fetch (stopped after the server, each
		// allocation stayed pending between the fetch's retries); what
		// the server started again meanwhile is stopped once it is gone.
		b.Cleanup(func() {
			if srv.running == nil {
				srv.start(b)
			}
			stopAllJobs(b, agent.Client)
			srv.stop()
			stopAllJobs(b, agent.Client)
		})
		c := login(b, srv)
		b.Cleanup(func() { deleteAll(c, agent.Client) })
		metrics := fmt.Sprintf("http://127.0.0.1:%d/metrics", metricsPort)

		// The probe's job is the shape of the second baseline, which,
		// like the first, runs while the server does not.
		probe := c.create("scale-probe")
		c.settle(probe, "RUNNING", time.Now())
		same := sameJob(b, agent.Client, probe)
		srv.stop()
		roots := map[int]string{agentPID: "nomad agent", os.Getpid(): "harness"}
		direct := &directClient{tb: b, client: agent.Client, name: "direct", shape: plainJob(wsserver)}
		base := direct.measure(n, samples, roots, agent.Addr)
		baseCreate, baseWake := base.created, base.woken
		copies := &directClient{tb: b, client: agent.Client, name: "same", shape: same}
		sameBase := copies.measure(n, samples, roots, agent.Addr)
		sameCreate, sameWake := sameBase.created, sameBase.woken
		srv.start(b)

		emptyWakes := wakeSamples(c, probe, samples)

		idle, _ := treeRSS(b, agentPID)
		roots[srv.running.cmd.Process.Pid] = "codehub server"
		cpu, profiled := phaseCPU(b, roots), profileAgent(b, agent.Addr, "create-codehub")
		beforeCreate := scrapeEngine(b, metrics)
		ids, created := c.wave(n-1, func(i int) (string, error) {
			var ws apiWorkspace
			code, err := c.try("POST", "/api/v1/workspaces", map[string]string{"name": fmt.Sprintf("scale-%d", i)}, &ws)
			if err == nil && code != http.StatusCreated {
				err = fmt.Errorf("create: %d", code)
			}
			return ws.ID, err
		}, "RUNNING")
		creating := scrapeEngine(b, metrics).since(beforeCreate)
		b.Logf("cpu, creating: codehub %s", cpu().report(n-1))
		profiled()
		busy, processes := treeRSS(b, agentPID)
		busyWakes := wakeSamples(c, probe, samples)

		half := ids[:len(ids)/2]
		c.each(half, func(id string) error { return c.trySetDesired(id, "STANDBY") })
		c.awaitAll(half, "STANDBY", time.Now(), 10*time.Minute)
		engineBefore := scrapeEngine(b, metrics)
		cpu = phaseCPU(b, roots)
		_, woken := c.wave(len(half), func(i int) (string, error) {
			return half[i], c.trySetDesired(half[i], "RUNNING")
		}, "RUNNING")
		engine := scrapeEngine(b, metrics).since(engineBefore)
		b.Logf("cpu, mass wake: codehub %s", cpu().report(len(half)))
		passes := engine.passes
		serverRSS := testenv.ResidentBytes(b, srv.running.cmd.Process.Pid)

		// The same wave again, with the server killed (SIGKILL) once a
		// third of it runs: every workspace runs in the end, none in
		// ERROR, each registered and placed once.
		c.each(half, func(id string) error { return c.trySetDesired(id, "STANDBY") })
		c.awaitAll(half, "STANDBY", time.Now(), 10*time.Minute)
		crashBegan := time.Now()
		c.each(half, func(id string) error { return c.trySetDesired(id, "RUNNING") })
		c.awaitCount(half, "RUNNING", len(half)/3, 10*time.Minute)
		srv.kill(b)
		srv.start(b)
		crashed := c.awaitAll(half, "RUNNING", crashBegan, 20*time.Minute)
		registrations, placements := startsSince(b, agent.Client, half, crashBegan)
		if registrations[1] != len(half) || placements[1] != len(half) {
			b.Errorf("after the kill, workspaces by registrations %v and by allocations %v; want each of the %d once", registrations, placements, len(half))
		}

		createRate := float64(n-1) / created.last().Seconds()
		baseRate := float64(n) / baseCreate.last().Seconds()
		sameRate := float64(n) / sameCreate.last().Seconds()
		wakeRate := float64(len(half)) / woken.last().Seconds()
		baseWakeRate := float64(n/2) / baseWake.last().Seconds()
		sameWakeRate := float64(n/2) / sameWake.last().Seconds()
		perWorkspace := busy.sub(idle).per(n - 1)
		b.ReportMetric(createRate/baseRate, "create-ratio")
		b.ReportMetric(wakeRate/baseWakeRate, "wake-ratio")
		b.ReportMetric(createRate/sameRate, "create-ratio-same-job")
		b.ReportMetric(wakeRate/sameWakeRate, "wake-ratio-same-job")
		b.ReportMetric(median(busyWakes).Seconds()/median(emptyWakes).Seconds(), "busy-wake-ratio")
		b.Logf("workspaces: %d; node: %d MiB per workspace (program %d KiB, executor %d KiB, logmon %d KiB, other %d KiB); processes beside the agent: %v",
			n, perWorkspace.total()>>10, perWorkspace["program"], perWorkspace["executor"], perWorkspace["logmon"], perWorkspace["other"], processes)
		b.Logf("create: direct %d in %v (%.1f/s); codehub %d in %v (%.1f/s); ratio %.2f",
			n, baseCreate.last().Round(time.Millisecond), baseRate, n-1, created.last().Round(time.Millisecond), createRate, createRate/baseRate)
		b.Logf("create, the same job: direct %d in %v (%.1f/s); ratio %.2f",
			n, sameCreate.last().Round(time.Millisecond), sameRate, createRate/sameRate)
		b.Logf("create waits: direct %s; the same job %s; codehub %s", baseCreate.summary(), sameCreate.summary(), created.summary())
		b.Logf("mass wake of %d: direct in %v (%.1f/s); codehub in %v (%.1f/s); ratio %.2f",
			len(half), baseWake.last().Round(time.Millisecond), baseWakeRate, woken.last().Round(time.Millisecond), wakeRate, wakeRate/baseWakeRate)
		b.Logf("mass wake, the same job: direct in %v (%.1f/s); ratio %.2f",
			sameWake.last().Round(time.Millisecond), sameWakeRate, wakeRate/sameWakeRate)
		// The same spread of Nomad's own, served without passes, in the
		// same unit: what serving the wave in order costs on this node.
		b.Logf("slowest wait − median, in codehub's mean passes: direct %.1f, the same job %.1f",
			(baseWake.last()-baseWake.p50()).Seconds()/passes.mean().Seconds(),
			(sameWake.last()-sameWake.p50()).Seconds()/passes.mean().Seconds())
		b.Logf("mass wake waits: direct %s; the same job %s; codehub %s; %d passes, mean %v; slowest wait − median = %.1f mean passes",
			baseWake.summary(), sameWake.summary(), woken.summary(), passes.count, passes.mean().Round(time.Millisecond),
			(woken.last()-woken.p50()).Seconds()/passes.mean().Seconds())
		b.Logf("one wake: empty cluster p50 %v %v; beside %d running p50 %v %v; ratio %.2f",
			median(emptyWakes).Round(time.Millisecond), emptyWakes, n-1, median(busyWakes).Round(time.Millisecond), busyWakes,
			median(busyWakes).Seconds()/median(emptyWakes).Seconds())
		for _, d := range []struct {
			name string
			base baseline
		}{{"direct", base}, {"the same job, direct", sameBase}} {
			b.Logf("one wake, %s: empty cluster p50 %v %v; beside %d running p50 %v %v; ratio %.2f", d.name,
				median(d.base.emptyWakes).Round(time.Millisecond), d.base.emptyWakes, n-1, median(d.base.busyWakes).Round(time.Millisecond), d.base.busyWakes,
				median(d.base.busyWakes).Seconds()/median(d.base.emptyWakes).Seconds())
		}
		b.Logf("creating: %v", creating)
		b.Logf("mass wake: %v", engine)
		b.Logf("mass wake with the server killed once a third ran: all %d RUNNING in %v (p50 %v); registrations per workspace %v, allocations per workspace %v",
			len(half), crashed.last().Round(time.Millisecond), crashed.p50().Round(time.Millisecond), registrations, placements)
		b.Logf("memory: server %d MiB, nomad agent %d MiB (idle %d MiB)", serverRSS>>20, busy["agent"]>>10, idle["agent"]>>10)
	}
}

// wakeSamples stops and wakes workspace id n times through the API and
// returns each wake's time to RUNNING.
func wakeSamples(c *apiClient, id string, n int) []time.Duration {
	var out []time.Duration
	for range n {
		c.setDesired(id, "STANDBY")
		c.settle(id, "STANDBY", time.Now())
		start := time.Now()
		c.setDesired(id, "RUNNING")
		out = append(out, c.settle(id, "RUNNING", start))
	}
	return out
}

// waits are how long each of a wave's workspaces took, from the wave's
// start, sorted.
type waits []time.Duration

func (w waits) last() time.Duration { return w[len(w)-1] }
func (w waits) p50() time.Duration  { return w[len(w)/2] }
func (w waits) p90() time.Duration  { return w[len(w)*9/10] }

func (w waits) summary() string {
	return fmt.Sprintf("first %v, p50 %v, p90 %v, last %v", w[0].Round(time.Millisecond), w.p50().Round(time.Millisecond),
		w.p90().Round(time.Millisecond), w.last().Round(time.Millisecond))
}

func (c *apiClient) trySetDesired(id, desired string) error {
	code, err := c.try("PATCH", "/api/v1/workspaces/"+id, map[string]string{"desired_state": desired}, nil)
	if err == nil && code != http.StatusOK {
		err = fmt.Errorf("set %s desired %s: %d", id, desired, code)
	}
	return err
}

// each runs fn for every id, scaleWorkers at a time, and fails the test
// on the first error.
func (c *apiClient) each(ids []string, fn func(string) error) {
	c.tb.Helper()
	if err := parallel(len(ids), func(i int) error { return fn(ids[i]) }); err != nil {
		c.tb.Fatal(err)
	}
}

// parallel runs fn(0..n-1), scaleWorkers at a time, and returns the first
// error.
func parallel(n int, fn func(int) error) error {
	next := make(chan int)
	errs := make(chan error, n)
	var wg sync.WaitGroup
	for range scaleWorkers {
		wg.Go(func() {
			for i := range next {
				if err := fn(i); err != nil {
					errs <- err
				}
			}
		})
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	close(errs)
	return <-errs
}

// wave issues n requests at once (start returns the workspace each
// concerns) and waits until every one shows phase: it returns the ids in
// request order and the sorted waits from the wave's first request.
func (c *apiClient) wave(n int, start func(int) (string, error), phase string) ([]string, waits) {
	c.tb.Helper()
	began := time.Now()
	ids := make([]string, n)
	if err := parallel(n, func(i int) error {
		id, err := start(i)
		ids[i] = id
		return err
	}); err != nil {
		c.tb.Fatal(err)
	}
	return ids, c.awaitAll(ids, phase, began, 20*time.Minute)
}

// awaitAll polls the listing until every id shows phase with no
// operation, and returns the sorted waits since began. A workspace in
// ERROR fails the test: none may fail because others were slow.
func (c *apiClient) awaitAll(ids []string, phase string, began time.Time, within time.Duration) waits {
	c.tb.Helper()
	pending := make(map[string]bool, len(ids))
	for _, id := range ids {
		pending[id] = true
	}
	var out waits
	for len(pending) > 0 {
		for _, ws := range c.listAll() {
			if !pending[ws.ID] {
				continue
			}
			if ws.Phase == "ERROR" {
				c.tb.Fatalf("workspace %s in ERROR during the wave: %+v", ws.ID, ws)
			}
			if ws.Phase == phase && ws.Operation == "NONE" {
				delete(pending, ws.ID)
				out = append(out, time.Since(began))
			}
		}
		if time.Since(began) > within {
			c.tb.Fatalf("%d of %d workspaces not %s after %v", len(pending), len(ids), phase, within)
		}
		time.Sleep(scalePoll)
	}
	slices.Sort(out)
	return out
}

// awaitCount polls the listing until at least k of ids show phase.
func (c *apiClient) awaitCount(ids []string, phase string, k int, within time.Duration) {
	c.tb.Helper()
	want := make(map[string]bool, len(ids))
	for _, id := range ids {
		want[id] = true
	}
	deadline := time.Now().Add(within)
	for {
		n := 0
		for _, ws := range c.listAll() {
			if want[ws.ID] && ws.Phase == phase && ws.Operation == "NONE" {
				n++
			}
		}
		if n >= k {
			return
		}
		if time.Now().After(deadline) {
			c.tb.Fatalf("%d of %d workspaces %s after %v, want %d", n, len(ids), phase, within, k)
		}
		time.Sleep(scalePoll)
	}
}

// startsSince counts, for each workspace of ids, the registrations of its
// job (versions submitted) and its allocations created since began, and
// returns how many workspaces had each count: one of each means every
// workspace was started exactly once.
func startsSince(tb testing.TB, client *api.Client, ids []string, began time.Time) (registrations, placements map[int]int) {
	tb.Helper()
	registrations, placements = map[int]int{}, map[int]int{}
	for _, id := range ids {
		job := "ws-" + id
		versions, _, _, err := client.Jobs().Versions(job, false, nil)
		if err != nil {
			tb.Fatalf("versions of %s: %v", job, err)
		}
		n := 0
		for _, v := range versions {
			if v.SubmitTime != nil && *v.SubmitTime >= began.UnixNano() && (v.Stop == nil || !*v.Stop) {
				n++
			}
		}
		registrations[n]++
		allocs, _, err := client.Jobs().Allocations(job, true, nil)
		if err != nil {
			tb.Fatalf("allocations of %s: %v", job, err)
		}
		n = 0
		for _, a := range allocs {
			if a.CreateTime >= began.UnixNano() {
				n++
			}
		}
		placements[n]++
	}
	return registrations, placements
}

// listAll reads every page of the user's workspaces.
func (c *apiClient) listAll() []apiWorkspace {
	c.tb.Helper()
	var all []apiWorkspace
	after := ""
	for {
		var page struct {
			Workspaces []apiWorkspace `json:"workspaces"`
			Next       *string        `json:"next"`
		}
		path := "/api/v1/workspaces?limit=200"
		if after != "" {
			path += "&after=" + after
		}
		if code := c.do("GET", path, nil, &page); code != http.StatusOK {
			c.tb.Fatalf("list workspaces: %d", code)
		}
		all = append(all, page.Workspaces...)
		if page.Next == nil {
			return all
		}
		after = *page.Next
	}
}

// directClient is the baseline: a plain Nomad API client registering a
// volume and a job of the given shape on it for each workspace, with
// none of codehub's work around them (no database, no pass, no probe of
// its own).
type directClient struct {
	tb     testing.TB
	client *api.Client
	// name names the baseline in the log and its jobs in Nomad.
	name  string
	shape jobShape
	jobs  []*api.Job
	// volumes and variables are what teardown deletes.
	volumes   []string
	variables []string
}

// jobShape is the job and the variables a direct start registers on a
// ready volume.
type jobShape func(name string, vol *api.HostVolume) (*api.Job, []*api.Variable, error)

// baseline is what a direct client measured: its creation and mass wake
// waves, and one job woken again and again beside n-1 running and alone.
type baseline struct {
	created, woken        waits
	busyWakes, emptyWakes []time.Duration
}

// measure creates n workspaces, wakes the first one samples times beside
// the others, then stops half of them and registers them again at once,
// logs the CPU each wave took, and deletes them all; then it wakes one
// workspace alone samples times. It takes a profile of the Nomad agent at
// addr during the creation when asked to (profileAgent).
func (d *directClient) measure(n, samples int, roots map[int]string, addr string) baseline {
	d.tb.Helper()
	var out baseline
	cpu, profiled := phaseCPU(d.tb, roots), profileAgent(d.tb, addr, "create-"+d.name)
	out.created = d.create(n)
	d.tb.Logf("cpu, creating: %s %s", d.name, cpu().report(n))
	profiled()
	out.busyWakes = d.wakeOne(samples)
	cpu = phaseCPU(d.tb, roots)
	out.woken = d.wake(d.jobs[:n/2])
	d.tb.Logf("cpu, stopping %d and waking them: %s %s", n/2, d.name, cpu().report(n/2))
	d.teardown()
	d.create(1)
	out.emptyWakes = d.wakeOne(samples)
	d.teardown()
	return out
}

// wakeOne wakes the first job samples times and returns each wake's wait.
func (d *directClient) wakeOne(samples int) []time.Duration {
	out := make([]time.Duration, samples)
	for i := range out {
		out[i] = d.wake(d.jobs[:1]).last()
	}
	return out
}

// create registers n volumes and jobs, scaleWorkers at a time, each job
// once its volume is ready, and returns the sorted waits until each
// program answers.
func (d *directClient) create(n int) waits {
	d.tb.Helper()
	began := time.Now()
	d.jobs, d.volumes = make([]*api.Job, n), make([]string, n)
	variables := make([][]string, n)
	if err := parallel(n, func(i int) error {
		name := fmt.Sprintf("scale-%s-%d", d.name, i)
		vol, err := d.volume(name + "-home")
		if err != nil {
			return err
		}
		d.volumes[i] = vol.ID
		job, vars, err := d.shape(name, vol)
		if err != nil {
			return err
		}
		for _, v := range vars {
			if _, _, err := d.client.Variables().Create(v, nil); err != nil {
				return fmt.Errorf("write variable %s: %w", v.Path, err)
			}
			variables[i] = append(variables[i], v.Path)
		}
		d.jobs[i] = job
		_, _, err = d.client.Jobs().Register(job, nil)
		return err
	}); err != nil {
		d.tb.Fatal(err)
	}
	d.variables = slices.Concat(variables...)
	return d.awaitReady(d.jobs, nil, began)
}

// wake stops jobs (their volumes stay), then registers them again at
// once, and returns the sorted waits until each answers.
func (d *directClient) wake(jobs []*api.Job) waits {
	d.tb.Helper()
	n := len(jobs)
	old := map[string]bool{}
	for _, a := range d.allocs() {
		old[a.ID] = true
	}
	if err := parallel(n, func(i int) error {
		_, _, err := d.client.Jobs().Deregister(*jobs[i].ID, false, nil)
		return err
	}); err != nil {
		d.tb.Fatal(err)
	}
	nomadtest.Eventually(d.tb, 5*time.Minute, "the stopped jobs' allocations ended", func() bool {
		stopping := map[string]bool{}
		for _, j := range jobs {
			stopping[*j.ID] = true
		}
		for _, a := range d.allocs() {
			// Pending too: a stopped allocation whose poststop task
			// (the same job's stop archive) has not started yet.
			if stopping[a.JobID] && !clientTerminal(a.ClientStatus) {
				return false
			}
		}
		return true
	})
	began := time.Now()
	if err := parallel(n, func(i int) error {
		jobs[i].Stop = new(false)
		_, _, err := d.client.Jobs().Register(jobs[i], nil)
		return err
	}); err != nil {
		d.tb.Fatal(err)
	}
	return d.awaitReady(jobs, old, began)
}

// teardown stops the jobs and waits until the client has ended every
// allocation, then purges them and deletes the volumes. A purge alone
// drops the allocations from the server at once while the client takes
// minutes to kill hundreds of tasks: codehub's measurements would begin
// on a node still busy with the baseline's.
func (d *directClient) teardown() {
	d.tb.Helper()
	deregister := func(purge bool) {
		if err := parallel(len(d.jobs), func(i int) error {
			_, _, err := d.client.Jobs().Deregister(*d.jobs[i].ID, purge, nil)
			return err
		}); err != nil {
			d.tb.Fatal(err)
		}
	}
	deregister(false)
	mine := map[string]bool{}
	for _, j := range d.jobs {
		mine[*j.ID] = true
	}
	nomadtest.Eventually(d.tb, 15*time.Minute, "the direct allocations ended", func() bool {
		for _, a := range d.allocs() {
			if mine[a.JobID] && !clientTerminal(a.ClientStatus) {
				return false
			}
		}
		return true
	})
	deregister(true)
	nomadtest.Eventually(d.tb, 5*time.Minute, "the direct volumes deleted", func() bool {
		left := 0
		for _, id := range d.volumes {
			if _, _, err := d.client.HostVolumes().Delete(&api.HostVolumeDeleteRequest{ID: id}, nil); err != nil {
				var e api.UnexpectedResponseError
				if !errors.As(err, &e) || e.StatusCode() != http.StatusNotFound {
					left++
				}
			}
		}
		return left == 0
	})
	for _, path := range d.variables {
		if _, err := d.client.Variables().Delete(path, nil); err != nil {
			d.tb.Errorf("delete variable %s: %v", path, err)
		}
	}
}

func (d *directClient) volume(name string) (*api.HostVolume, error) {
	vol := &api.HostVolume{
		Namespace: "default",
		Name:      name,
		PluginID:  "mkdir",
		NodePool:  "default",
		RequestedCapabilities: []*api.HostVolumeCapability{
			{AttachmentMode: api.HostVolumeAttachmentModeFilesystem, AccessMode: api.HostVolumeAccessModeSingleNodeWriter},
			{AttachmentMode: api.HostVolumeAttachmentModeFilesystem, AccessMode: api.HostVolumeAccessModeSingleNodeReader},
		},
		Parameters: map[string]string{"uid": strconv.Itoa(os.Getuid()), "gid": strconv.Itoa(os.Getgid()), "mode": "0700"},
	}
	resp, _, err := d.client.HostVolumes().Create(&api.HostVolumeCreateRequest{Volume: vol}, nil)
	if err != nil {
		return nil, err
	}
	id := resp.Volume.ID
	for deadline := time.Now().Add(5 * time.Minute); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		got, _, err := d.client.HostVolumes().Get(id, nil)
		if err != nil {
			return nil, err
		}
		if got.State == api.HostVolumeStateReady && got.HostPath != "" {
			return got, nil
		}
	}
	return nil, fmt.Errorf("volume %s never ready", name)
}

// plainJob is the first baseline's shape: a workspace job as the
// built-in template renders it under raw_exec (the same volume request,
// group, program, port, service check and resources), less what only
// codehub needs (no variables, no token, no workspace agent, no stop
// archive).
func plainJob(program string) jobShape {
	return func(name string, vol *api.HostVolume) (*api.Job, []*api.Variable, error) {
		job := api.NewServiceJob(name, name, "global", 50)
		job.Datacenters = []string{"dc1"}
		group := api.NewTaskGroup("workspace", 1)
		group.Volumes = map[string]*api.VolumeRequest{"home": {
			Name: "home", Type: "host", Source: vol.Name,
			AccessMode: "single-node-writer", AttachmentMode: "file-system",
		}}
		group.Networks = []*api.NetworkResource{{DynamicPorts: []api.Port{{Label: "http"}}}}
		group.Update = &api.UpdateStrategy{HealthCheck: new("checks"), MinHealthyTime: new(time.Duration(0)),
			HealthyDeadline: new(5 * time.Minute), ProgressDeadline: new(10 * time.Minute), AutoRevert: new(false)}
		group.RestartPolicy = &api.RestartPolicy{Attempts: new(1), Interval: new(5 * time.Minute), Delay: new(2 * time.Second), Mode: new("fail")}
		group.ReschedulePolicy = &api.ReschedulePolicy{Attempts: new(0), Unlimited: new(false)}
		group.Services = []*api.Service{{
			Name: name, PortLabel: "http", Provider: "nomad",
			Checks: []api.ServiceCheck{{Name: "healthz", Type: "http", Path: "/healthz", Interval: time.Second, Timeout: time.Second}},
		}}
		task := api.NewTask("workspace", "raw_exec")
		task.KillSignal, task.KillTimeout = "SIGKILL", new(time.Second)
		task.Config = map[string]any{"command": program, "args": []string{"-listen", "127.0.0.1:${NOMAD_PORT_http}", "-home", vol.HostPath}}
		task.Env = map[string]string{"HOME": vol.HostPath}
		task.Resources = &api.Resources{CPU: new(20), MemoryMB: new(32)}
		group.AddTask(task)
		job.AddTaskGroup(group)
		return job, nil, nil
	}
}

func (d *directClient) allocs() []*api.AllocationListStub {
	d.tb.Helper()
	list, _, err := d.client.Allocations().List(&api.QueryOptions{Params: map[string]string{"resources": "true"}})
	if err != nil {
		d.tb.Fatal(err)
	}
	return list
}

// awaitReady polls Nomad's allocations and probes each running one of
// jobs not in old until its program answers, as codehub's probe does.
func (d *directClient) awaitReady(jobs []*api.Job, old map[string]bool, began time.Time) waits {
	d.tb.Helper()
	pending := map[string]bool{}
	for _, j := range jobs {
		pending[*j.ID] = true
	}
	probe := &http.Client{Timeout: 300 * time.Millisecond}
	var out waits
	for len(pending) > 0 {
		var addrs []string
		var owners []string
		for _, a := range d.allocs() {
			if !pending[a.JobID] || old[a.ID] || a.ClientStatus != api.AllocClientStatusRunning || a.AllocatedResources == nil {
				continue
			}
			for _, p := range a.AllocatedResources.Shared.Ports {
				if p.Label == "http" {
					addrs = append(addrs, fmt.Sprintf("127.0.0.1:%d", p.Value))
					owners = append(owners, a.JobID)
				}
			}
		}
		answered := make([]bool, len(addrs))
		_ = parallel(len(addrs), func(i int) error {
			resp, err := probe.Get("http://" + addrs[i] + "/healthz")
			if err == nil {
				resp.Body.Close()
				answered[i] = resp.StatusCode == http.StatusOK
			}
			return nil
		})
		for i, ok := range answered {
			if ok && pending[owners[i]] {
				delete(pending, owners[i])
				out = append(out, time.Since(began))
			}
		}
		if time.Since(began) > 20*time.Minute {
			d.tb.Fatalf("%d direct jobs never answered", len(pending))
		}
		time.Sleep(scalePoll)
	}
	slices.Sort(out)
	return out
}

// deleteAll deletes every workspace of c's user and waits, for up to ten
// minutes, until the server has purged all their jobs from Nomad (a
// deleted workspace leaves the listing at once, its jobs later). What is
// left then is logged, not failed: the measurements are taken by then.
func deleteAll(c *apiClient, nomad *api.Client) {
	var ids []string
	for _, ws := range c.listAll() {
		ids = append(ids, ws.ID)
	}
	if err := parallel(len(ids), func(i int) error {
		code, err := c.try("DELETE", "/api/v1/workspaces/"+ids[i], nil, nil)
		if err == nil && code != http.StatusNoContent && code != http.StatusNotFound {
			err = fmt.Errorf("delete %s: %d", ids[i], code)
		}
		return err
	}); err != nil {
		c.tb.Logf("delete the workspaces: %v", err)
	}
	left := 0
	for deadline := time.Now().Add(10 * time.Minute); time.Now().Before(deadline); time.Sleep(time.Second) {
		jobs, _, err := nomad.Jobs().PrefixList("ws-")
		if err != nil {
			continue
		}
		if left = len(jobs); left == 0 {
			c.tb.Logf("deleted %d workspaces, and their jobs are gone", len(ids))
			return
		}
	}
	c.tb.Logf("%d jobs of the %d deleted workspaces left after ten minutes", left, len(ids))
}

// stopAllJobs stops every job and waits, for up to fifteen minutes, until the
// client has ended every allocation (a purge would drop them from the
// server's state at once, before the client kills their tasks). What still
// runs then is logged, not failed: the measurements are taken by then.
func stopAllJobs(tb testing.TB, client *api.Client) {
	jobs, _, err := client.Jobs().List(nil)
	if err != nil {
		tb.Errorf("list jobs: %v", err)
		return
	}
	if err := parallel(len(jobs), func(i int) error {
		_, _, err := client.Jobs().Deregister(jobs[i].ID, false, nil)
		return err
	}); err != nil {
		tb.Errorf("stop jobs: %v", err)
		return
	}
	var live []string
	// Five minutes were not enough for 300 tasks on a busy two-core
	// machine, and the next run then failed on their ports.
	for deadline := time.Now().Add(15 * time.Minute); time.Now().Before(deadline); time.Sleep(time.Second) {
		allocs, _, err := client.Allocations().List(nil)
		if err != nil {
			continue
		}
		live = live[:0]
		for _, a := range allocs {
			if !clientTerminal(a.ClientStatus) {
				live = append(live, a.JobID+" "+a.ClientStatus)
			}
		}
		if len(live) == 0 {
			return
		}
	}
	tb.Logf("clean-up: %d allocations still not ended after their jobs were stopped: %v", len(live), live)
}

func clientTerminal(status string) bool {
	switch status {
	case api.AllocClientStatusComplete, api.AllocClientStatusFailed, api.AllocClientStatusLost:
		return true
	}
	return false
}

// tally is a histogram's count and sum.
type tally struct {
	count int
	sum   float64
}

func (t tally) since(before tally) tally {
	return tally{count: t.count - before.count, sum: t.sum - before.sum}
}

func (t tally) mean() time.Duration {
	if t.count == 0 {
		return 0
	}
	return time.Duration(t.sum / float64(t.count) * float64(time.Second))
}

// engineMetrics is what the server's metrics say of its controller passes
// and of its requests to Nomad.
type engineMetrics struct {
	passes, observes tally
	stale            float64
	calls            map[string]tally // Nomad requests by call
}

func (m engineMetrics) since(before engineMetrics) engineMetrics {
	out := engineMetrics{
		passes:   m.passes.since(before.passes),
		observes: m.observes.since(before.observes),
		stale:    m.stale - before.stale,
		calls:    make(map[string]tally),
	}
	for c, t := range m.calls {
		if d := t.since(before.calls[c]); d.count > 0 {
			out.calls[c] = d
		}
	}
	return out
}

// String names the passes, the observations and the Nomad calls made most.
func (m engineMetrics) String() string {
	calls := slices.Collect(maps.Keys(m.calls))
	slices.SortFunc(calls, func(a, b string) int { return m.calls[b].count - m.calls[a].count })
	var top []string
	for _, c := range calls[:min(len(calls), 8)] {
		top = append(top, fmt.Sprintf("%s ×%d (mean %v)", c, m.calls[c].count, m.calls[c].mean().Round(100*time.Microsecond)))
	}
	return fmt.Sprintf("%d passes (mean %v), observing mean %v, %v stale; Nomad calls: %s",
		m.passes.count, m.passes.mean().Round(time.Millisecond), m.observes.mean().Round(time.Millisecond), m.stale, strings.Join(top, ", "))
}

// scrapeEngine reads the server's metrics.
func scrapeEngine(tb testing.TB, url string) engineMetrics {
	tb.Helper()
	resp, err := http.Get(url)
	if err != nil {
		tb.Fatal(err)
	}
	defer resp.Body.Close()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		tb.Fatal(err)
	}
	hist := func(m *dto.Metric) tally {
		return tally{count: int(m.GetHistogram().GetSampleCount()), sum: m.GetHistogram().GetSampleSum()}
	}
	out := engineMetrics{calls: make(map[string]tally)}
	for name, f := range families {
		for _, m := range f.GetMetric() {
			switch name {
			case "codehub_controller_pass_duration_seconds":
				out.passes = hist(m)
			case "codehub_controller_observe_duration_seconds":
				out.observes = hist(m)
			case "codehub_controller_stale_passes_total":
				out.stale = m.GetCounter().GetValue()
			case "codehub_nomad_request_duration_seconds":
				for _, l := range m.GetLabel() {
					if l.GetName() == "call" {
						out.calls[l.GetValue()] = hist(m)
					}
				}
			}
		}
	}
	return out
}

// rss is proportional resident memory (Pss) in KiB by kind of process:
// "agent" (the Nomad agent), "executor" and "logmon" (Nomad's per-task
// helpers), "program" (the workspaces' programs) and "other".
type rss map[string]int64

func (r rss) sub(o rss) rss {
	out := rss{}
	for k, v := range r {
		out[k] = v - o[k]
	}
	return out
}

func (r rss) per(n int) rss {
	out := rss{}
	for k, v := range r {
		if k != "agent" {
			out[k] = v / int64(n)
		}
	}
	return out
}

func (r rss) total() int64 {
	var t int64
	for k, v := range r {
		if k != "agent" {
			t += v
		}
	}
	return t
}

// eachProcess calls fn with every process's pid and /proc directory. A
// process may end while fn reads it: fn skips what it cannot read.
func eachProcess(tb testing.TB, fn func(pid int, dir string)) {
	tb.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		tb.Fatal(err)
	}
	for _, e := range entries {
		if pid, err := strconv.Atoi(e.Name()); err == nil {
			fn(pid, filepath.Join("/proc", e.Name()))
		}
	}
}

// treeRSS sums the proportional resident memory of root and every process
// below it, by kind, and counts those processes by kind.
func treeRSS(tb testing.TB, root int) (rss, map[string]int) {
	tb.Helper()
	parent, kind, kib := map[int]int{}, map[int]string{}, map[int]int64{}
	eachProcess(tb, func(pid int, dir string) {
		status, err := os.ReadFile(filepath.Join(dir, "status"))
		if err != nil {
			return
		}
		cmdline, _ := os.ReadFile(filepath.Join(dir, "cmdline"))
		args := strings.Split(string(cmdline), "\x00")
		switch {
		case pid == root:
			kind[pid] = "agent"
		case len(args) > 1 && filepath.Base(args[0]) == "nomad" && (args[1] == "executor" || args[1] == "logmon"):
			kind[pid] = args[1]
		case filepath.Base(args[0]) == "wsserver":
			kind[pid] = "program"
		default:
			kind[pid] = "other"
		}
		if v, ok := testenv.Field(status, "PPid:"); ok {
			parent[pid], _ = strconv.Atoi(v)
		}
		// Pss shares each page among the processes mapping it: the
		// nomad binary's pages count once across all its helpers.
		if rollup, err := os.ReadFile(filepath.Join(dir, "smaps_rollup")); err == nil {
			if v, ok := testenv.Field(rollup, "Pss:"); ok {
				kib[pid], _ = strconv.ParseInt(strings.TrimSuffix(v, " kB"), 10, 64)
			}
		}
	})
	out, count := rss{}, map[string]int{}
	for pid := range kind {
		for p := pid; p > 1; p = parent[p] {
			if p == root {
				out[kind[pid]] += kib[pid]
				count[kind[pid]]++
				break
			}
		}
	}
	return out, count
}

// TestScrapeEngine: the scale harness reads what a server exports.
func TestScrapeEngine(t *testing.T) {
	reg := prometheus.NewRegistry()
	if _, err := controller.NewMetrics(reg); err != nil {
		t.Fatal(err)
	}
	requests := nomad.NewRequests()
	reg.MustRegister(requests.Collectors()...)
	nomadAPI := httptest.NewServer(http.NotFoundHandler())
	defer nomadAPI.Close()
	c, err := nomad.NewClient(&config.NomadBackend{Address: nomadAPI.URL}, requests)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := c.Jobs().List(nil); err == nil {
		t.Fatal("listing jobs of a server that has none: no error")
	}
	srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	defer srv.Close()
	m := scrapeEngine(t, srv.URL)
	if got := m.calls["GET /v1/jobs"].count; got != 1 {
		t.Errorf("GET /v1/jobs counted %d times, want 1 (%v)", got, m)
	}
	if m.passes.count != 0 || m.observes.count != 0 || m.stale != 0 {
		t.Errorf("a fresh server: %v", m)
	}
}
