package api_test

import (
	"context"
	"fmt"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/codehub-io/codehub/api/apitest"
	"github.com/codehub-io/codehub/workspace"
)

// BenchmarkSSEStateChange measures how long a state change takes from the
// committing UPDATE to the event on a client of another replica: trigger ->
// NOTIFY -> EventListener -> Redis PUBLISH -> SSE handler -> client.
func BenchmarkSSEStateChange(b *testing.B) {
	env := apitest.New(b, apitest.Config{})
	alice := env.CreateUser("alice", false)
	w := env.CreateWorkspace(alice, "bench")
	env.StartListener()
	replica := env.NewReplica(apitest.Config{})
	env.RunServer(replica)
	srv := httptest.NewServer(replica)
	b.Cleanup(srv.Close)
	stream := openStream(b, env.Login(alice), srv.URL, "")
	// The initial state.
	stream.next(b)
	ctx := context.Background()
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := range b.N {
		desc := fmt.Sprintf("change %d", i)
		start := time.Now()
		updated, err := env.Service.Update(ctx, w.ID, workspace.UpdateRequest{Description: &desc})
		if err != nil {
			b.Fatal(err)
		}
		want := fmt.Sprintf("%s:%d", w.ID, updated.Version)
		for {
			ev := stream.next(b)
			if ev.ID == want {
				break
			}
			if !strings.HasPrefix(ev.ID, w.ID+":") {
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
