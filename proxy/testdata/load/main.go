// Command load is the load generator of the proxy benchmarks, run as a
// process of its own so that the CPU it spends is not the proxy's and the
// benchmark can place it on other cores. It reads one JSON command per
// line on stdin, runs it, and answers one JSON line on stdout.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/coder/websocket"
)

// command is one measurement. Op is "http" (N GETs of Targets[0] over
// Conns keep-alive connections), "latency" (N rounds of one GET to each
// target in turn) or "ws" (N echo round trips of Size bytes over Conns
// WebSocket connections to Targets[0]).
type command struct {
	Op      string   `json:"op"`
	Targets []target `json:"targets"`
	Conns   int      `json:"conns"`
	N       int      `json:"n"`
	Size    int      `json:"size"`
}

type target struct {
	URL    string      `json:"url"`
	Header http.Header `json:"header"`
}

type result struct {
	WallNS    int64     `json:"wall_ns"`
	CPUNS     int64     `json:"cpu_ns"`
	LatencyNS [][]int64 `json:"latency_ns,omitempty"`
	Error     string    `json:"error,omitempty"`
}

func main() {
	g := &generator{
		client: &http.Client{Transport: &http.Transport{
			MaxIdleConns: 1024, MaxIdleConnsPerHost: 256, DisableCompression: true,
		}},
		sockets: map[string][]*websocket.Conn{},
	}
	in := bufio.NewScanner(os.Stdin)
	out := json.NewEncoder(os.Stdout)
	for in.Scan() {
		var c command
		var res result
		if err := json.Unmarshal(in.Bytes(), &c); err != nil {
			res.Error = err.Error()
		} else {
			res = g.run(c)
		}
		if err := out.Encode(res); err != nil {
			os.Exit(1)
		}
	}
}

type generator struct {
	client  *http.Client
	sockets map[string][]*websocket.Conn
}

func (g *generator) run(c command) result {
	if len(c.Targets) == 0 || c.N <= 0 {
		return result{Error: "a command needs targets and n > 0"}
	}
	cpu := processCPU()
	start := time.Now()
	var res result
	var err error
	switch c.Op {
	case "http":
		err = g.parallel(c.N, max(c.Conns, 1), func(int) error { return g.get(c.Targets[0]) })
	case "latency":
		res.LatencyNS, err = g.latency(c.Targets, c.N)
	case "ws":
		err = g.echo(c)
	default:
		err = fmt.Errorf("unknown op %q", c.Op)
	}
	res.WallNS = time.Since(start).Nanoseconds()
	res.CPUNS = (processCPU() - cpu).Nanoseconds()
	if err != nil {
		res.Error = err.Error()
	}
	return res
}

func (g *generator) get(t target) error {
	req, err := http.NewRequest(http.MethodGet, t.URL, nil)
	if err != nil {
		return err
	}
	req.Header = t.Header.Clone()
	res, err := g.client.Do(req)
	if err != nil {
		return err
	}
	_, err = io.Copy(io.Discard, res.Body)
	res.Body.Close()
	if err != nil {
		return err
	}
	if res.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: status %d", t.URL, res.StatusCode)
	}
	return nil
}

// parallel runs n calls of do over workers goroutines and returns the
// first error.
func (g *generator) parallel(n, workers int, do func(worker int) error) error {
	var next atomic.Int64
	var first atomic.Pointer[error]
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for next.Add(1) <= int64(n) {
				if err := do(w); err != nil {
					first.CompareAndSwap(nil, &err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if err := first.Load(); err != nil {
		return *err
	}
	return nil
}

func (g *generator) latency(targets []target, n int) ([][]int64, error) {
	lat := make([][]int64, len(targets))
	for range n {
		for i, t := range targets {
			start := time.Now()
			if err := g.get(t); err != nil {
				return nil, err
			}
			lat[i] = append(lat[i], time.Since(start).Nanoseconds())
		}
	}
	return lat, nil
}

// echo sends messages over connections it keeps between commands, so only
// the first command to a target pays for the handshakes.
func (g *generator) echo(c command) error {
	ctx := context.Background()
	t := c.Targets[0]
	key := fmt.Sprint(t.URL, t.Header)
	conns := g.sockets[key]
	for len(conns) < c.Conns {
		ws, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(t.URL, "http"), &websocket.DialOptions{HTTPHeader: t.Header})
		if err != nil {
			return fmt.Errorf("dial %s: %w", t.URL, err)
		}
		ws.SetReadLimit(int64(c.Size) + 1024)
		conns = append(conns, ws)
	}
	g.sockets[key] = conns
	msg := []byte(strings.Repeat("x", max(c.Size, 1)))
	return g.parallel(c.N, c.Conns, func(w int) error {
		if err := conns[w].Write(ctx, websocket.MessageBinary, msg); err != nil {
			return err
		}
		_, got, err := conns[w].Read(ctx)
		if err != nil {
			return err
		}
		if len(got) != len(msg) {
			return errors.New("echo came back with another length")
		}
		return nil
	})
}

// processCPU is the CPU time this process has used (user + system).
func processCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
