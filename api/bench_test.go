package api_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/codehub-io/codehub/api/apitest"
	"github.com/codehub-io/codehub/workspace"
)

// BenchmarkSSEStateChange measures how long a state change takes from the
// committing UPDATE to the event on a client of another replica: trigger ->
// NOTIFY -> EventListener -> Redis PUBLISH -> SSE handler -> client.
func BenchmarkSSEStateChange(b *testing.B) {
	r := newSSEBench(b)
	stream := openStream(b, r.env.Login(r.user), r.url, "")
	// The initial state.
	stream.next(b)
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := range b.N {
		start := time.Now()
		want := r.change(b, i)
		for {
			ev := stream.next(b)
			if ev.ID == want {
				break
			}
			if !strings.HasPrefix(ev.ID, r.ws.ID+":") {
				b.Fatalf("unexpected event %s %s", ev.Name, ev.ID)
			}
		}
		lat = append(lat, time.Since(start))
	}
	b.StopTimer()
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99-ms")
}

// BenchmarkSSEFanout measures a state change reaching 1,000 open
// dashboards (event streams of one user on another replica): from the
// committing UPDATE until the last of them has the event, and the
// replica's heap per open stream.
func BenchmarkSSEFanout(b *testing.B) {
	const dashboards = 1000
	r := newSSEBench(b)
	// The session's cookie, without the test client's 30 s limit on a
	// whole request: opening a thousand streams takes longer than that.
	client := &http.Client{Jar: r.env.Login(r.user).Jar}

	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	streams := make([]*sseStream, dashboards)
	for i := range streams {
		streams[i] = openStream(b, client, r.url, "")
		streams[i].next(b) // the initial state
	}
	runtime.GC()
	runtime.ReadMemStats(&after)

	var all []time.Duration
	b.ResetTimer()
	for i := range b.N {
		start := time.Now()
		want := r.change(b, i)
		var wg sync.WaitGroup
		lat := make([]time.Duration, dashboards)
		for k, s := range streams {
			wg.Go(func() {
				for s.next(b).ID != want {
				}
				lat[k] = time.Since(start)
			})
		}
		wg.Wait()
		all = append(all, slices.Max(lat))
	}
	b.StopTimer()
	slices.Sort(all)
	b.ReportMetric(float64(all[len(all)/2].Microseconds())/1000, "last-of-1000-p50-ms")
	b.ReportMetric(float64(all[len(all)*99/100].Microseconds())/1000, "last-of-1000-p99-ms")
	// Both ends live in this process: the heap holds the replica's
	// streams and the test's clients.
	b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/dashboards/1024, "heap-KiB/stream")
}

// sseBench is a user with one workspace, whose changes reach clients of
// another replica than the one changing it.
type sseBench struct {
	env  *apitest.Env
	user apitest.User
	ws   workspace.Workspace
	url  string // the other replica
}

func newSSEBench(b *testing.B) *sseBench {
	env := apitest.New(b, apitest.Config{})
	user := env.CreateUser("alice", false)
	w := env.CreateWorkspace(user, "bench")
	env.StartListener()
	replica := env.NewReplica(apitest.Config{})
	env.RunServer(replica)
	srv := httptest.NewServer(replica)
	b.Cleanup(srv.Close)
	return &sseBench{env: env, user: user, ws: w, url: srv.URL}
}

// change commits the i-th change of the workspace and returns the event
// id that reports it.
func (r *sseBench) change(b *testing.B, i int) string {
	desc := fmt.Sprintf("change %d", i)
	updated, err := r.env.Service.Update(context.Background(), r.ws.ID, workspace.UpdateRequest{Description: &desc})
	if err != nil {
		b.Fatal(err)
	}
	return fmt.Sprintf("%s:%d", r.ws.ID, updated.Version)
}
