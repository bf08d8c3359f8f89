package nomad

import (
	"context"
	"fmt"
	"net/http"
	"sync/atomic"
	"testing"
)

func TestWatchWakesAndResumes(t *testing.T) {
	f := newFakeNomad(t)
	var connections atomic.Int32
	f.handle("GET /v1/event/stream", func(w http.ResponseWriter, r *http.Request) {
		if connections.Add(1) > 1 {
			<-r.Context().Done()
			return
		}
		fmt.Fprintln(w, `{}`)
		fmt.Fprintln(w, `{"Index":7,"Events":[{"Topic":"Node","Key":"node-1","Index":7}]}`)
		fmt.Fprintln(w, `{"Index":9,"Events":[{"Topic":"Allocation","Key":"8c1b","FilterKeys":["ws-`+testWS+`"],"Index":9}]}`)
		// The stream ends: Watch must reconnect after index 9.
	})
	b := newTestBackend(t, f, testOptions())

	ctx, cancel := context.WithCancel(t.Context())
	var wakes atomic.Int32
	done := make(chan error, 1)
	go func() { done <- b.Watch(ctx, func() { wakes.Add(1) }) }()

	waitFor(t, func() bool { return connections.Load() >= 2 })
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	calls := f.calls("GET /v1/event/stream")
	if got := calls[0].Query.Get("index"); got != "0" && got != "" {
		t.Errorf("first connection index = %q, want none", got)
	}
	if got := calls[1].Query.Get("index"); got != "10" {
		t.Errorf("reconnect index = %q, want 10 (after the last event seen)", got)
	}
	if topics := calls[0].Query["topic"]; len(topics) != len(watchTopics) {
		t.Errorf("topics = %v", topics)
	}
	// One wake for the workspace event, one for the reconnect; none for
	// the heartbeat or the foreign node event.
	if n := wakes.Load(); n != 2 {
		t.Errorf("wake called %d times, want 2", n)
	}
}
