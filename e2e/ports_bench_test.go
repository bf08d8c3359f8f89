package e2e

import (
	"cmp"
	"fmt"
	"net/http"
	"net/url"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/codehub-io/codehub/internal/nomadtest"
	"github.com/codehub-io/codehub/internal/testenv"
)

// BenchmarkNomadPorts is scripts/bench-ports.sh on real Nomad under
// raw_exec: the workspace program is the proxy tests' upstream, a second
// copy of it runs inside the workspace as a dev server (started over
// `codehub ssh`), and wrk (one thread, 64 connections, 10 s) loads GET /ok
// at the workbench's path and at the port's path in turn, alternating
// which goes first. On Nomad the agent relays a port's bytes (the server
// may be on another machine), so this measures that relay against the
// proxy's direct path. Reports the median of the rounds' port/workbench
// ratios and each path's median requests per second.
//
//	PATH=/path/to/nomad:$PATH CODEHUB_TEST_CODE_SERVER=… scripts/with-services.sh go test -run XXX \
//	  -bench BenchmarkNomadPorts -benchtime 5x ./e2e/
func BenchmarkNomadPorts(b *testing.B) {
	wrk, err := exec.LookPath("wrk")
	if err != nil {
		b.Skip("no wrk on PATH")
	}
	agent := nomadtest.Start(b, "")
	upstream := devServer(b)
	srv := startServer(b, nomadProgram(localConfig(b), agent, upstream, `args = ["--bind-addr", "127.0.0.1:%PORT%"]`))
	c := login(b, srv)
	ws := createRunning(b, c, "bench")
	me := newSSHUser(b, srv, c)
	run := shellIn(b, srv, me, ws, volumePath(b, agent, ws.ID), true)
	dev := testenv.FreePort(b)
	run(fmt.Sprintf(`sh -c 'trap "" HUP; exec %s --bind-addr 127.0.0.1:%d' </dev/null >/dev/null 2>&1 & echo $! > dev.pid`, upstream, dev), "")

	base, _ := url.Parse(srv.url)
	var session string
	for _, ck := range c.http.Jar.Cookies(base) {
		if ck.Name == "codehub_session" {
			session = ck.Value
		}
	}
	urls := map[string]string{
		"workbench": srv.url + "/w/" + ws.ID + "/ok",
		"port":      fmt.Sprintf("%s/w/%d--%s/ok", srv.url, dev, ws.ID),
	}
	waitFor(b, time.Minute, "the dev server through its port's path", func() bool {
		req, _ := http.NewRequest("GET", urls["port"], nil)
		req.AddCookie(&http.Cookie{Name: "codehub_session", Value: session})
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})

	rps := regexp.MustCompile(`Requests/sec:\s+([0-9.]+)`)
	measure := func(name string) float64 {
		out, err := exec.Command(wrk, "-t1", "-c64", "-d10s", "-H", "Cookie: codehub_session="+session, urls[name]).CombinedOutput()
		m := rps.FindSubmatch(out)
		if err != nil || m == nil || regexp.MustCompile(`Non-2xx|Socket errors`).Match(out) {
			b.Fatalf("wrk %s: %v\n%s", name, err, out)
		}
		v, _ := strconv.ParseFloat(string(m[1]), 64)
		return v
	}
	var ratios, work, port []float64
	b.ResetTimer()
	for i := range b.N {
		order := []string{"workbench", "port"}
		if i%2 == 1 {
			order = []string{"port", "workbench"}
		}
		got := map[string]float64{}
		for _, name := range order {
			got[name] = measure(name)
		}
		b.Logf("round %d: workbench %.0f req/s, port %.0f req/s, port/workbench %.2f", i+1, got["workbench"], got["port"], got["port"]/got["workbench"])
		ratios = append(ratios, got["port"]/got["workbench"])
		work, port = append(work, got["workbench"]), append(port, got["port"])
	}
	b.StopTimer()
	b.ReportMetric(median(ratios), "port/workbench")
	b.ReportMetric(median(work), "workbench-req/s")
	b.ReportMetric(median(port), "port-req/s")
}

func median[T cmp.Ordered](v []T) T {
	s := slices.Clone(v)
	slices.Sort(s)
	return s[len(s)/2]
}
