package proxy_test

import (
	"context"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
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

// BenchmarkHTTPThroughput: 64 concurrent keep-alive connections doing
// small GETs, straight to the workspace and through /w/{id}/.
func BenchmarkHTTPThroughput(b *testing.B) {
	tg := newBenchTarget(b)
	for _, side := range []struct{ name, url string }{{"direct", tg.direct + "/ok"}, {"proxied", tg.proxied + "/ok"}} {
		b.Run(side.name, func(b *testing.B) {
			fetch(b, tg.client, side.url)
			const conns = 64
			var next sync.WaitGroup
			work := make(chan struct{}, b.N)
			for range b.N {
				work <- struct{}{}
			}
			close(work)
			b.ResetTimer()
			start := time.Now()
			for range conns {
				next.Add(1)
				go func() {
					defer next.Done()
					for range work {
						fetch(b, tg.client, side.url)
					}
				}()
			}
			next.Wait()
			b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "req/s")
		})
	}
}

// BenchmarkHTTPLatency: one request at a time; reports the median.
func BenchmarkHTTPLatency(b *testing.B) {
	tg := newBenchTarget(b)
	for _, side := range []struct{ name, url string }{{"direct", tg.direct + "/ok"}, {"proxied", tg.proxied + "/ok"}} {
		b.Run(side.name, func(b *testing.B) {
			fetch(b, tg.client, side.url)
			lat := make([]time.Duration, 0, b.N)
			b.ResetTimer()
			for range b.N {
				t0 := time.Now()
				fetch(b, tg.client, side.url)
				lat = append(lat, time.Since(t0))
			}
			slices.Sort(lat)
			b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
			b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
		})
	}
}

// BenchmarkWebSocketEcho: 8 connections echoing 1 KiB messages.
func BenchmarkWebSocketEcho(b *testing.B) {
	tg := newBenchTarget(b)
	ws := func(u string) string { return "ws" + strings.TrimPrefix(u, "http") + "/ws" }
	for _, side := range []struct{ name, url, origin string }{
		{"direct", ws(tg.direct), ""},
		{"proxied", ws(tg.proxied), tg.env.URL},
	} {
		b.Run(side.name, func(b *testing.B) {
			ctx := context.Background()
			const conns = 8
			msg := []byte(strings.Repeat("x", 1024))
			var wg sync.WaitGroup
			work := make(chan struct{}, b.N)
			for range b.N {
				work <- struct{}{}
			}
			close(work)
			cs := make([]*websocket.Conn, conns)
			for i := range cs {
				c, _, err := websocket.Dial(ctx, side.url, &websocket.DialOptions{HTTPHeader: dialHeaders(b, tg.client, tg.env.URL, side.origin)})
				if err != nil {
					b.Fatal(err)
				}
				defer c.CloseNow()
				cs[i] = c
			}
			b.ResetTimer()
			start := time.Now()
			for _, c := range cs {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for range work {
						if err := c.Write(ctx, websocket.MessageBinary, msg); err != nil {
							b.Error(err)
							return
						}
						if _, _, err := c.Read(ctx); err != nil {
							b.Error(err)
							return
						}
					}
				}()
			}
			wg.Wait()
			b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "msg/s")
		})
	}
}
