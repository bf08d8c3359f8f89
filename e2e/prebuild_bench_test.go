package e2e

import (
	"fmt"
	"net/http"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/codehub-io/codehub/internal/nomadtest"
	"github.com/codehub-io/codehub/internal/testenv"
)

// BenchmarkNomadStarts measures create-to-RUNNING through the REST API of
// a server on a real Nomad agent (raw_exec, code-server, S3 on this
// machine) for the four ways a workspace of a real project starts: a cold
// first start (clone and init), a start from a prebuilt home restored
// from S3, a claim of a warm home, and, as the baseline, a wake of a
// stopped workspace. The project is this repository, cloned from a local
// bare copy; its init builds every package, downloading the modules the
// build needs from this machine's module cache (GOPROXY=file://…, nothing
// leaves the machine), with the module and build caches in the home.
// CODEHUB_BENCH_SAMPLES (10) and CODEHUB_BENCH_COLD (3) set the samples.
func BenchmarkNomadStarts(b *testing.B) {
	modcache, err := exec.Command("go", "env", "GOMODCACHE").Output()
	if err != nil {
		b.Fatal(err)
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		b.Fatal(err)
	}
	repo := filepath.Join(b.TempDir(), "codehub.git")
	if out, err := exec.Command("git", "clone", "--quiet", "--bare", "..", repo).CombinedOutput(); err != nil {
		b.Fatalf("bare copy of the repository: %v\n%s", err, out)
	}
	agent := nomadtest.Start(b, "")
	cfg := localConfig(b)
	cfg = nomadProgram(cfg, agent, cfg.codeServer, codeServerWorkspace)
	cfg.maxRunning = 50
	proxy := "file://" + filepath.Join(strings.TrimSpace(string(modcache)), "cache", "download")
	template := func(name string, warm int) string {
		return fmt.Sprintf(`template %q {
  repository_parameter = "repo"
  parameter "repo" {
    default = "file://%s"
  }
  env = {
    PATH        = "%s:/usr/bin:/bin"
    GOPROXY     = %q
    GOSUMDB     = "off"
    GOFLAGS     = "-mod=mod"
    GOTOOLCHAIN = "local"
  }
  # go build needs more than code-server's 1 GiB.
  memory = 4096
  warm   = %d
  prebuild {
    init = ["go build ./..."]
  }
}
`, name, repo, filepath.Dir(goBin), proxy, warm)
	}
	cfg.workspace += template("project", 0) + template("project-warm", 1)
	cfg.coordinator = "  start_timeout = \"15m\"\n"
	srv := startServer(b, cfg)
	c := login(b, srv)

	began := time.Now()
	for _, name := range []string{"project", "project-warm"} {
		if p := awaitPrebuild(b, c, name, "", 20*time.Minute); p.Status != "READY" {
			b.Fatalf("prebuild of %s: %+v", name, p)
		}
	}
	b.Logf("both prebuilds ready after %s", time.Since(began).Round(time.Second))

	n, cold := testenv.Count(b, "CODEHUB_BENCH_SAMPLES", 10), testenv.Count(b, "CODEHUB_BENCH_COLD", 3)
	measure := func(name string, count int, one func(i int) time.Duration) []time.Duration {
		var ds []time.Duration
		for i := range count {
			d := one(i)
			ds = append(ds, d)
			b.Logf("%s %d: %s", name, i+1, d.Round(time.Millisecond))
		}
		slices.Sort(ds)
		return ds
	}
	create := func(name, template string, params map[string]any) (string, time.Duration) {
		start := time.Now()
		ws := c.createFrom(name, template, params)
		return ws.ID, c.settleWithin(ws.ID, "RUNNING", start, 20*time.Minute)
	}
	remove := func(id string) {
		if code := c.do("DELETE", "/api/v1/workspaces/"+id, nil, nil); code != http.StatusNoContent {
			b.Fatalf("delete %s: %d", id, code)
		}
	}
	for b.Loop() {
		// Another spelling of the same repository: other parameters, so
		// the first start clones and runs init.
		coldRuns := measure("cold", cold, func(i int) time.Duration {
			id, d := create(fmt.Sprintf("cold-%d", i), "project", map[string]any{"repo": "file://" + repo + "/"})
			remove(id)
			return d
		})
		prebuilt := measure("prebuilt", n, func(i int) time.Duration {
			id, d := create(fmt.Sprintf("prebuilt-%d", i), "project", nil)
			remove(id)
			return d
		})
		warm := measure("warm", n, func(i int) time.Duration {
			nomadtest.Eventually(b, 10*time.Minute, "a warm home ready", func() bool { return c.pool("project-warm").Ready == 1 })
			id, d := create(fmt.Sprintf("warm-%d", i), "project-warm", nil)
			remove(id)
			return d
		})
		id, _ := create("woken", "project", nil)
		wakes := measure("wake", n, func(int) time.Duration {
			c.setDesired(id, "STANDBY")
			c.settleWithin(id, "STANDBY", time.Now(), 5*time.Minute)
			start := time.Now()
			c.setDesired(id, "RUNNING")
			return c.settleWithin(id, "RUNNING", start, 5*time.Minute)
		})
		remove(id)
		b.ReportMetric(median(coldRuns).Seconds(), "cold-p50-s")
		b.ReportMetric(median(prebuilt).Seconds(), "prebuilt-p50-s")
		b.ReportMetric(median(warm).Seconds(), "warm-p50-s")
		b.ReportMetric(median(wakes).Seconds(), "wake-p50-s")
		b.Logf("cold %v\nprebuilt %v\nwarm %v\nwake %v", coldRuns, prebuilt, warm, wakes)
		home, err := exec.Command("du", "-sh", volumePath(b, agent, id)).CombinedOutput()
		b.Logf("a prebuilt home's size: %s (%v)", strings.TrimSpace(string(home)), err)
	}
}

// settleWithin polls the workspace until it shows phase with no
// operation, for at most within from start, and returns how long that
// took.
func (c *apiClient) settleWithin(id, phase string, start time.Time, within time.Duration) time.Duration {
	c.tb.Helper()
	for {
		var ws apiWorkspace
		if code := c.do("GET", "/api/v1/workspaces/"+id, nil, &ws); code != http.StatusOK {
			c.tb.Fatalf("get workspace: %d", code)
		}
		if ws.Phase == phase && ws.Operation == "NONE" {
			return time.Since(start)
		}
		if ws.Phase == "ERROR" || time.Since(start) > within {
			c.tb.Fatalf("workspace never settled in %s: %+v", phase, ws)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
