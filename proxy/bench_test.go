package proxy_test

import (
	"context"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/codehub-io/codehub/api/apitest"
)

// benchTarget is one workspace reachable directly and through the proxy.
type benchTarget struct {
	env     *apitest.Env
	client  *http.Client
	direct  string // http://upstream
	proxied string // http://codehub/w/{id}
}

func newBenchTarget(b *testing.B) benchTarget {
	b.Helper()
	env := apitest.New(b, apitest.Config{})
	alice := env.CreateUser("alice", false)
	addr := startUpstream(b)
	w := runningWorkspace(b, env, alice, "bench", addr)
	c := env.Login(alice)
	// One pool big enough for 64 concurrent connections to each side.
	c.Transport = &http.Transport{MaxIdleConns: 256, MaxIdleConnsPerHost: 128, MaxConnsPerHost: 128}
	return benchTarget{env: env, client: c, direct: "http://" + addr, proxied: env.URL + "/w/" + w.ID}
}

func fetch(b *testing.B, c *http.Client, url string) {
	res, err := c.Get(url)
	if err != nil {
		b.Error(err)
		return
	}
	_, _ = io.Copy(io.Discard, res.Body)
	res.Body.Close()
	if res.StatusCode != 200 {
		b.Errorf("GET %s: %d", url, res.StatusCode)
	}
}

// rounds alternates direct and proxied load so both see the same machine
// load; each returns the time its share of the work took.
const rounds = 10

// processCPU is the CPU time this process has used (user + system).
func processCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// phase is the wall and CPU time of one side's share of the work.
type phase struct{ wall, cpu time.Duration }

func (p *phase) add(q phase) { p.wall += q.wall; p.cpu += q.cpu }

// measure runs n calls of do over conns workers.
func measure(n, conns int, do func(worker int)) phase {
	cpu := processCPU()
	wall := runParallel(n, conns, do)
	return phase{wall: wall, cpu: processCPU() - cpu}
}

// runParallel performs n calls of do spread over conns workers.
func runParallel(n, conns int, do func(worker int)) time.Duration {
	work := make(chan struct{}, n)
	for range n {
		work <- struct{}{}
	}
	close(work)
	var wg sync.WaitGroup
	start := time.Now()
	for i := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range work {
				do(i)
			}
		}()
	}
	wg.Wait()
	return time.Since(start)
}

// reportRatio reports both rates, proxied/direct, and the CPU the proxy
// spent per call: this process runs the load generator on both sides and
// the proxy only on the proxied one, so the difference is the proxy's.
func reportRatio(b *testing.B, unit string, n int, direct, proxied phase) {
	dr, pr := float64(n)/direct.wall.Seconds(), float64(n)/proxied.wall.Seconds()
	b.ReportMetric(dr, "direct-"+unit)
	b.ReportMetric(pr, "proxied-"+unit)
	b.ReportMetric(pr/dr, "ratio")
	b.ReportMetric(float64((proxied.cpu-direct.cpu).Microseconds())/float64(n), "proxy-cpu-µs/op")
}

// BenchmarkHTTPThroughput: 64 concurrent keep-alive connections doing
// small GETs, straight to the workspace and through /w/{id}/; b.N requests
// on each side.
func BenchmarkHTTPThroughput(b *testing.B) {
	tg := newBenchTarget(b)
	const conns = 64
	direct, proxied := tg.direct+"/ok", tg.proxied+"/ok"
	// Open the connections of both sides first.
	runParallel(conns, conns, func(int) { fetch(b, tg.client, direct) })
	runParallel(conns, conns, func(int) { fetch(b, tg.client, proxied) })
	per := max(b.N/rounds, 1)
	var d, p phase
	b.ResetTimer()
	for range rounds {
		d.add(measure(per, conns, func(int) { fetch(b, tg.client, direct) }))
		p.add(measure(per, conns, func(int) { fetch(b, tg.client, proxied) }))
	}
	b.StopTimer()
	reportRatio(b, "req/s", per*rounds, d, p)
}

// BenchmarkHTTPLatency: one request at a time, alternating direct and
// proxied so both see the same machine load; reports both medians and the
// median of the per-pair difference (the latency the proxy adds).
func BenchmarkHTTPLatency(b *testing.B) {
	tg := newBenchTarget(b)
	direct, proxied := tg.direct+"/ok", tg.proxied+"/ok"
	fetch(b, tg.client, direct)
	fetch(b, tg.client, proxied)
	d := make([]time.Duration, 0, b.N)
	p := make([]time.Duration, 0, b.N)
	added := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for range b.N {
		t0 := time.Now()
		fetch(b, tg.client, direct)
		t1 := time.Now()
		fetch(b, tg.client, proxied)
		t2 := time.Now()
		d = append(d, t1.Sub(t0))
		p = append(p, t2.Sub(t1))
		added = append(added, t2.Sub(t1)-t1.Sub(t0))
	}
	b.StopTimer()
	for _, s := range [][]time.Duration{d, p, added} {
		slices.Sort(s)
	}
	b.ReportMetric(float64(d[len(d)/2].Microseconds()), "direct-p50-µs")
	b.ReportMetric(float64(p[len(p)/2].Microseconds()), "proxied-p50-µs")
	b.ReportMetric(float64(added[len(added)/2].Microseconds()), "added-p50-µs")
}

// BenchmarkWebSocketEcho: 8 connections per side echoing 1 KiB messages;
// b.N round trips on each side.
func BenchmarkWebSocketEcho(b *testing.B) {
	tg := newBenchTarget(b)
	ctx := context.Background()
	const conns = 8
	msg := []byte(strings.Repeat("x", 1024))
	dial := func(u, origin string) []*websocket.Conn {
		cs := make([]*websocket.Conn, conns)
		for i := range cs {
			c, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(u, "http")+"/ws",
				&websocket.DialOptions{HTTPHeader: dialHeaders(b, tg.client, tg.env.URL, origin)})
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { c.CloseNow() })
			cs[i] = c
		}
		return cs
	}
	echo := func(cs []*websocket.Conn) func(int) {
		return func(i int) {
			if err := cs[i].Write(ctx, websocket.MessageBinary, msg); err != nil {
				b.Error(err)
				return
			}
			if _, _, err := cs[i].Read(ctx); err != nil {
				b.Error(err)
			}
		}
	}
	direct, proxied := echo(dial(tg.direct, "")), echo(dial(tg.proxied, tg.env.URL))
	per := max(b.N/rounds, 1)
	var d, p phase
	b.ResetTimer()
	for range rounds {
		d.add(measure(per, conns, direct))
		p.add(measure(per, conns, proxied))
	}
	b.StopTimer()
	reportRatio(b, "msg/s", per*rounds, d, p)
}
