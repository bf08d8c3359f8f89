package nomad

import (
	"context"
	"strings"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/codehub-io/codehub/controller"
)

// msgStreamEnded is what Watch logs each time Nomad's event stream ends.
const msgStreamEnded = "event stream ended, reconnecting"

// topicHostVolume is Nomad's event topic for host volumes (>= 1.10), which
// the api package has no constant for.
const topicHostVolume api.Topic = "HostVolume"

// watchTopics are the event topics that can change an observation.
var watchTopics = map[api.Topic][]string{
	api.TopicJob:        {"*"},
	api.TopicAllocation: {"*"},
	api.TopicDeployment: {"*"},
	api.TopicService:    {"*"},
	topicHostVolume:     {"*"},
}

// Watch follows Nomad's event stream and calls wake for events about
// codehub's objects. It resumes after the last index it saw; events lost
// while disconnected only delay the controller until its next periodic
// pass, so correctness never depends on this.
//
// With Nomad's service discovery it also probes starting workspaces (see
// probe.go) and wakes the controller the moment one answers.
func (b *Backend) Watch(ctx context.Context, wake func()) error {
	if b.opts.ServiceProvider == ProviderNomad && !b.opts.CheckOnly {
		p := &prober{logger: b.logger.Named("probe"), backend: b, wake: wake, queue: make(chan probeOffer, probeQueue)}
		ctx, cancel := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() {
			defer close(done)
			p.run(ctx)
		}()
		b.prober.Store(p)
		defer func() {
			b.prober.CompareAndSwap(p, nil)
			cancel()
			<-done
			b.answered.dropOffers()
		}()
	}
	var index uint64
	backoff := time.Second
	for {
		next, err := b.stream(ctx, index, wake)
		if ctx.Err() != nil {
			return nil
		}
		if next > index {
			index = next
			backoff = time.Second
		}
		b.logger.Debug(msgStreamEnded, "index", index, "error", err)
		// A reconnect may have missed events: one early pass covers them.
		wake()
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 30*time.Second)
	}
}

// stream consumes one connection and returns the index to resume from.
func (b *Backend) stream(ctx context.Context, index uint64, wake func()) (uint64, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	start := index
	if start > 0 {
		start++
	}
	ch, err := b.client.EventStream().Stream(ctx, watchTopics, start, b.query(ctx))
	if err != nil {
		return index, err
	}
	conn := b.mirror.connected()
	defer b.mirror.disconnected(conn)
	for events := range ch {
		if events.Err != nil {
			return index, events.Err
		}
		if events.IsHeartbeat() {
			continue
		}
		b.mirror.apply(conn, events.Events)
		if relevant(events.Events) {
			wake()
		}
		if p := b.prober.Load(); p != nil {
			for _, ev := range events.Events {
				if a, ok := startingAlloc(ev); ok {
					p.offer(a.ID, a)
				}
			}
		}
		index = max(index, events.Index)
	}
	return index, nil
}

// relevant reports whether any event concerns a codehub-named object.
func relevant(events []api.Event) bool {
	for _, ev := range events {
		// Volume keys are ids; there are few volume events, so all count.
		if ev.Topic == topicHostVolume || strings.HasPrefix(ev.Key, controller.NamePrefix) {
			return true
		}
		for _, k := range ev.FilterKeys {
			if strings.HasPrefix(k, controller.NamePrefix) {
				return true
			}
		}
	}
	return false
}
