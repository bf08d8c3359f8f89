package proxy_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/codehub-io/codehub/api/apitest"
	"github.com/codehub-io/codehub/workspace"
)

// The benchmarks compare three ways to the same workspace process: direct,
// through a bare httputil.ReverseProxy ("stdlib", what the standard
// library gives for free) and through CodeHub's /w/{id}/ with a session
// (owner check, route cache, activity marks, metrics, header rewriting,
// upstream token).
// The load comes from proxy/testdata/load, a process of its own, so this
// process's CPU time is the proxies'. With CODEHUB_BENCH_LOAD_CPUS set
// (a taskset CPU list) the load generator and the workspace run on those
// CPUs; run the benchmark itself on the others (`taskset -c 1 go test`) to
// give the proxy cores of its own, as it has when CodeHub and the
// workspaces run on different Nomad nodes.
const loadCPUsEnv = "CODEHUB_BENCH_LOAD_CPUS"

// command starts bin, on the load CPUs when they are set.
func command(bin string) *exec.Cmd {
	if cpus := os.Getenv(loadCPUsEnv); cpus != "" {
		return exec.Command("taskset", "-c", cpus, bin)
	}
	return exec.Command(bin)
}

var buildLoad = sync.OnceValues(func() (string, error) {
	bin := filepath.Join(filepath.Dir(upstreamBin), "load")
	out, err := exec.Command("go", "build", "-o", bin, "./testdata/load").CombinedOutput()
	if err != nil {
		return "", &exec.Error{Name: "go build ./testdata/load: " + string(out), Err: err}
	}
	return bin, nil
})

// loadTarget and loadCommand mirror the generator's protocol.
type loadTarget struct {
	URL    string      `json:"url"`
	Header http.Header `json:"header,omitempty"`
}

type loadCommand struct {
	Op      string       `json:"op"`
	Targets []loadTarget `json:"targets"`
	Conns   int          `json:"conns,omitempty"`
	N       int          `json:"n"`
	Size    int          `json:"size,omitempty"`
}

type loadResult struct {
	WallNS    int64     `json:"wall_ns"`
	CPUNS     int64     `json:"cpu_ns"`
	LatencyNS [][]int64 `json:"latency_ns"`
	Error     string    `json:"error"`
}

type loadProc struct {
	in  *json.Encoder
	out *json.Decoder
}

func startLoad(b *testing.B) *loadProc {
	b.Helper()
	bin, err := buildLoad()
	if err != nil {
		b.Fatal(err)
	}
	cmd := command(bin)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		b.Fatalf("start load generator: %v", err)
	}
	b.Cleanup(func() {
		stdin.Close()
		_ = cmd.Wait()
	})
	return &loadProc{in: json.NewEncoder(stdin), out: json.NewDecoder(bufio.NewReader(stdout))}
}

// side is one way to the workspace and the time it took.
type side struct {
	target    loadTarget
	wall, cpu time.Duration // of the generator
	ownCPU    time.Duration // of this process: the proxy's
}

func (l *loadProc) run(b *testing.B, c loadCommand) loadResult {
	b.Helper()
	if err := l.in.Encode(c); err != nil {
		b.Fatalf("send load command: %v", err)
	}
	var res loadResult
	if err := l.out.Decode(&res); err != nil {
		b.Fatalf("read load result: %v", err)
	}
	if res.Error != "" {
		b.Fatalf("load %s: %s", c.Op, res.Error)
	}
	return res
}

// processCPU is the CPU time this process has used (user + system).
func processCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// benchTarget is one workspace reachable three ways.
type benchTarget struct {
	load   *loadProc
	sides  []*side // direct, stdlib, codehub
	origin []string
}

func newBenchTarget(b *testing.B) *benchTarget {
	b.Helper()
	checkPinning(b)
	// As deployed by default: the proxy derives and sends each request's
	// upstream token.
	tokens, err := workspace.NewUpstreamTokens(bytes.Repeat([]byte{0x5a}, 32))
	if err != nil {
		b.Fatal(err)
	}
	env := apitest.New(b, apitest.Config{UpstreamToken: tokens.For})
	alice := env.CreateUser("alice", false)
	addr := startUpstream(b)
	w := runningWorkspace(b, env, alice, "bench", addr)
	c := env.Login(alice)
	up, _ := url.Parse("http://" + addr)
	bare := httputil.NewSingleHostReverseProxy(up)
	bare.Transport = &http.Transport{MaxIdleConns: 1024, MaxIdleConnsPerHost: 256, DisableCompression: true}
	stdlib := httptest.NewServer(bare)
	b.Cleanup(stdlib.Close)
	proxied := env.URL + "/w/" + w.ID
	return &benchTarget{
		load: startLoad(b),
		sides: []*side{
			{target: loadTarget{URL: "http://" + addr}},
			{target: loadTarget{URL: stdlib.URL}},
			{target: loadTarget{URL: proxied, Header: dialHeaders(b, c, env.URL, "")}},
		},
		origin: []string{"", "", env.URL},
	}
}

// checkPinning refuses a pinned run whose proxy shares CPUs with the load.
func checkPinning(b *testing.B) {
	cpus := os.Getenv(loadCPUsEnv)
	if cpus == "" {
		return
	}
	var mine unix.CPUSet
	if err := unix.SchedGetaffinity(0, &mine); err != nil {
		b.Fatal(err)
	}
	for _, part := range strings.Split(cpus, ",") {
		lo, hi, _ := strings.Cut(part, "-")
		first, err1 := strconv.Atoi(lo)
		last, err2 := strconv.Atoi(hi)
		if hi == "" {
			last, err2 = first, nil
		}
		if err1 != nil || err2 != nil {
			b.Fatalf("%s=%q: want a CPU list such as 0 or 0-1", loadCPUsEnv, cpus)
		}
		for cpu := first; cpu <= last; cpu++ {
			if mine.IsSet(cpu) {
				b.Fatalf("%s=%s but this process may run on CPU %d too: start it with taskset on the other CPUs", loadCPUsEnv, cpus, cpu)
			}
		}
	}
}

// rounds alternates the sides so that each sees the same machine load.
const rounds = 10

// measure runs c against every side in turn, rounds times, with n
// operations per side and round.
func (tg *benchTarget) measure(b *testing.B, c loadCommand) {
	for range rounds {
		for _, s := range tg.sides {
			c.Targets = []loadTarget{s.target}
			own := processCPU()
			res := tg.load.run(b, c)
			s.ownCPU += processCPU() - own
			s.wall += time.Duration(res.WallNS)
			s.cpu += time.Duration(res.CPUNS)
		}
	}
}

// report gives each side's rate and the proxies' ratios to direct and
// their CPU per operation.
func (tg *benchTarget) report(b *testing.B, unit string, n int) {
	direct, stdlib, codehub := tg.sides[0], tg.sides[1], tg.sides[2]
	rate := func(s *side) float64 { return float64(n) / s.wall.Seconds() }
	perOp := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 / float64(n) }
	b.ReportMetric(rate(direct), "direct-"+unit)
	b.ReportMetric(rate(stdlib), "stdlib-"+unit)
	b.ReportMetric(rate(codehub), "proxied-"+unit)
	b.ReportMetric(rate(codehub)/rate(direct), "ratio")
	b.ReportMetric(rate(stdlib)/rate(direct), "stdlib-ratio")
	b.ReportMetric(perOp(codehub.ownCPU), "proxy-cpu-µs/op")
	b.ReportMetric(perOp(stdlib.ownCPU), "stdlib-cpu-µs/op")
	b.ReportMetric(perOp(direct.cpu), "load-cpu-µs/op")
}

// BenchmarkHTTPThroughput: 64 concurrent keep-alive connections doing
// GETs of a tiny response (the proxy's per-request cost at its worst) and
// of a 64 KiB one (a typical editor asset); b.N requests on each side.
func BenchmarkHTTPThroughput(b *testing.B) {
	for _, size := range []struct {
		name, path string
	}{{"3B", "/ok"}, {"64KiB", "/bytes/65536"}} {
		b.Run(size.name, func(b *testing.B) {
			tg := newBenchTarget(b)
			const conns = 64
			per := max(b.N/rounds, conns)
			for _, s := range tg.sides {
				s.target.URL += size.path
				// Open the connections first.
				tg.load.run(b, loadCommand{Op: "http", Targets: []loadTarget{s.target}, Conns: conns, N: conns})
			}
			b.ResetTimer()
			tg.measure(b, loadCommand{Op: "http", Conns: conns, N: per})
			b.StopTimer()
			tg.report(b, "req/s", per*rounds)
		})
	}
}

// BenchmarkHTTPLatency: one request at a time to each side in turn;
// reports each side's median and the median of the per-round difference
// between a proxy and direct (the latency the proxy adds).
func BenchmarkHTTPLatency(b *testing.B) {
	tg := newBenchTarget(b)
	targets := make([]loadTarget, len(tg.sides))
	for i, s := range tg.sides {
		targets[i] = s.target
		targets[i].URL += "/ok"
	}
	tg.load.run(b, loadCommand{Op: "latency", Targets: targets, N: 10})
	b.ResetTimer()
	res := tg.load.run(b, loadCommand{Op: "latency", Targets: targets, N: b.N})
	b.StopTimer()
	p50 := func(ns []int64) float64 {
		s := slices.Clone(ns)
		slices.Sort(s)
		return float64(s[len(s)/2]) / 1e3
	}
	added := func(i int) float64 {
		d := make([]int64, len(res.LatencyNS[0]))
		for j := range d {
			d[j] = res.LatencyNS[i][j] - res.LatencyNS[0][j]
		}
		return p50(d)
	}
	b.ReportMetric(p50(res.LatencyNS[0]), "direct-p50-µs")
	b.ReportMetric(p50(res.LatencyNS[1]), "stdlib-p50-µs")
	b.ReportMetric(p50(res.LatencyNS[2]), "proxied-p50-µs")
	b.ReportMetric(added(1), "stdlib-added-p50-µs")
	b.ReportMetric(added(2), "added-p50-µs")
}

// BenchmarkWebSocketEcho: 8 connections per side echoing messages of
// 1 KiB and of 64 KiB; b.N round trips on each side.
func BenchmarkWebSocketEcho(b *testing.B) {
	for _, size := range []int{1 << 10, 64 << 10} {
		b.Run(fmt.Sprintf("%dKiB", size>>10), func(b *testing.B) {
			tg := newBenchTarget(b)
			const conns = 8
			for i, s := range tg.sides {
				s.target.URL += "/ws"
				if tg.origin[i] != "" {
					s.target.Header.Set("Origin", tg.origin[i])
				}
				tg.load.run(b, loadCommand{Op: "ws", Targets: []loadTarget{s.target}, Conns: conns, N: conns, Size: size})
			}
			per := max(b.N/rounds, conns)
			b.ResetTimer()
			tg.measure(b, loadCommand{Op: "ws", Conns: conns, N: per, Size: size})
			b.StopTimer()
			tg.report(b, "msg/s", per*rounds)
		})
	}
}

// BenchmarkProxiedRequest: one keep-alive connection sending GETs of a
// 3-byte response through CodeHub's /w/{id}/, one at a time. The client
// writes the request bytes itself and reads the answer with one reused
// reader, so the allocations reported are nearly all the server's: those
// of net/http's server side and of the proxy path.
func BenchmarkProxiedRequest(b *testing.B) {
	tokens, err := workspace.NewUpstreamTokens(bytes.Repeat([]byte{0x5a}, 32))
	if err != nil {
		b.Fatal(err)
	}
	env := apitest.New(b, apitest.Config{UpstreamToken: tokens.For})
	alice := env.CreateUser("alice", false)
	w := runningWorkspace(b, env, alice, "bench", startUpstream(b))
	c := env.Login(alice)
	u, _ := url.Parse(env.URL)
	var req bytes.Buffer
	fmt.Fprintf(&req, "GET /w/%s/ok HTTP/1.1\r\nHost: %s\r\n", w.ID, u.Host)
	for _, ck := range c.Jar.Cookies(u) {
		fmt.Fprintf(&req, "Cookie: %s=%s\r\n", ck.Name, ck.Value)
	}
	req.WriteString("\r\n")
	conn, err := net.Dial("tcp", u.Host)
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	br := bufio.NewReader(conn)
	body := make([]byte, 3)
	roundTrip := func() {
		if _, err := conn.Write(req.Bytes()); err != nil {
			b.Fatal(err)
		}
		res, err := http.ReadResponse(br, nil)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := io.ReadFull(res.Body, body); err != nil || res.StatusCode != http.StatusOK {
			b.Fatalf("status %d, body %q: %v", res.StatusCode, body, err)
		}
		res.Body.Close()
	}
	roundTrip()
	b.ReportAllocs()
	for b.Loop() {
		roundTrip()
	}
}
