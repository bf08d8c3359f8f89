package nomad

import (
	"context"
	"net"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/nomad/api"

	"github.com/codehub-io/codehub/controller"
)

// Probing a starting workspace's program directly: Nomad runs its check
// once per check interval (1 s by default), so the first passing result
// comes up to that long after the program answers. A probe of the
// allocation's own port, from the moment Nomad reports the task running,
// lets the upstream count as ready as soon as it answers; Nomad's check
// stays the authority on failure.
const (
	// probers bounds the allocations probed at once.
	probers = 8
	// probeQueue bounds allocations waiting for a prober; an allocation
	// that does not fit is offered again by the next observation.
	probeQueue = 256
	// probeFirst and probeMax pace the probes of one allocation: quick at
	// first, when the program is about to answer, slower for one that
	// takes long.
	probeFirst = 25 * time.Millisecond
	probeMax   = 500 * time.Millisecond
	// probeWindow bounds how long one allocation is probed; past it only
	// Nomad's check decides.
	probeWindow = 2 * time.Minute
	// probeTimeout bounds one probe.
	probeTimeout = time.Second
)

// probeClient is the HTTP client of probes: no proxy from the environment,
// no connection kept (one allocation answers once).
var probeClient = &http.Client{
	Transport: &http.Transport{DisableKeepAlives: true, Proxy: nil},
	CheckRedirect: func(*http.Request, []*http.Request) error {
		return http.ErrUseLastResponse
	},
}

// programAnswers reports whether the program at addr answers its health
// path as Nomad's check asks it (GET /healthz, 200).
func programAnswers(ctx context.Context, addr string) bool {
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/healthz", nil)
	if err != nil {
		return false
	}
	resp, err := probeClient.Do(req)
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// answer is a starting allocation's program answering a probe: when, and
// the run the allocation's job version names.
type answer struct {
	run string
	at  time.Time
}

// answered holds the allocations whose program answered a probe, and the
// allocations offered to the prober already (probed or being probed), so
// each is probed once.
type answered struct {
	mu      sync.Mutex
	answers map[string]answer // by alloc id
	offered map[string]bool
}

func newAnswered() *answered {
	return &answered{answers: make(map[string]answer), offered: make(map[string]bool)}
}

// snapshot returns the answers, dropping what concerns allocations that are
// no longer starting (keep): their readiness is Nomad's deployment health
// now, or they are gone.
func (s *answered) snapshot(keep map[string]bool) map[string]answer {
	s.mu.Lock()
	defer s.mu.Unlock()
	for id := range s.offered {
		if !keep[id] {
			delete(s.offered, id)
			delete(s.answers, id)
		}
	}
	out := make(map[string]answer, len(s.answers))
	for id, a := range s.answers {
		out[id] = a
	}
	return out
}

// dropOffers forgets the offers no probe answered, once the prober that
// took them stopped: a later prober takes them again.
func (s *answered) dropOffers() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for id := range s.offered {
		if _, ok := s.answers[id]; !ok {
			delete(s.offered, id)
		}
	}
}

// failedSince: a check has run and not passed after t. Nomad stamps check
// results in whole seconds, so a failure within t's second counts as
// before it: the next result, one check interval later, is surely after.
// The check that runs as the task starts, before the program listens,
// thus never outweighs a later answer.
func failedSince(checks api.AllocCheckStatuses, service string, t time.Time) bool {
	for _, c := range checks {
		if service != "" && c.Service != service {
			continue
		}
		if c.Status != "success" && c.Status != "pending" && c.Timestamp > t.Unix() {
			return true
		}
	}
	return false
}

// prober probes starting workspace allocations, a few at a time, and wakes
// the controller when one answers. Watch owns it: it runs while Watch does.
type prober struct {
	logger  hclog.Logger
	backend *Backend
	wake    func()
	queue   chan probeOffer
}

// probeOffer is an allocation to probe: its id, and the allocation as an
// event carried it (nil when an observation offers it).
type probeOffer struct {
	id    string
	alloc *api.Allocation
}

// offer queues allocation allocID for probing unless it was offered
// before; a is the allocation as an event carried it, or nil.
func (p *prober) offer(allocID string, a *api.Allocation) {
	s := p.backend.answered
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.offered[allocID] {
		return
	}
	select {
	case p.queue <- probeOffer{id: allocID, alloc: a}:
		s.offered[allocID] = true
	default:
	}
}

// run probes queued allocations until ctx ends, and waits for its probes.
func (p *prober) run(ctx context.Context) {
	sem := make(chan struct{}, probers)
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		var o probeOffer
		select {
		case <-ctx.Done():
			return
		case o = <-p.queue:
		}
		select {
		case <-ctx.Done():
			return
		case sem <- struct{}{}:
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			p.probe(ctx, o)
		}()
	}
}

// probe finds the allocation's address and run, from the event that
// offered it and the job the mirror holds or else by reading it, then
// probes its program until it answers, an observation finds the
// allocation no longer starting, or the window ends.
func (p *prober) probe(ctx context.Context, o probeOffer) {
	ctx, cancel := context.WithTimeout(ctx, probeWindow)
	defer cancel()
	allocID := o.id
	target, ok := p.eventTarget(o.alloc)
	if !ok {
		a, _, err := p.backend.client.Allocations().Info(allocID, p.backend.query(ctx))
		if err != nil {
			p.logger.Debug("read allocation to probe", "alloc_id", allocID, "error", err)
			return
		}
		if target, ok = probeTarget(a, p.backend.opts.Namespace); !ok {
			return
		}
	}
	wait := probeFirst
	for {
		if programAnswers(ctx, target.addr) {
			s := p.backend.answered
			s.mu.Lock()
			if s.offered[allocID] {
				s.answers[allocID] = answer{run: target.run, at: time.Now()}
			}
			s.mu.Unlock()
			p.logger.Debug("workspace program answered its probe", "alloc_id", allocID, "workspace_id", target.wsID)
			p.wake()
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		wait = min(wait*3/2, probeMax)
		if !p.wanted(allocID) {
			return
		}
	}
}

// wanted: allocID is still offered, that is an observation since the offer
// has not found it done starting (ready by its checks, failed or gone).
func (p *prober) wanted(allocID string) bool {
	s := p.backend.answered
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.offered[allocID]
}

// eventTarget is what to probe of allocation a as an event carried it,
// which has no job: the run is the job's the mirror holds, when a was
// created by that registration (an allocation of an earlier one, updated
// in place since, is read instead).
func (p *prober) eventTarget(a *api.Allocation) (probeAddr, bool) {
	if a == nil {
		return probeAddr{}, false
	}
	j := p.backend.mirror.job(a.JobID, time.Now())
	if j == nil || j.Stop || j.JobModifyIndex > a.CreateIndex {
		return probeAddr{}, false
	}
	withJob := *a
	withJob.Job = &api.Job{ID: &j.ID, Meta: j.Meta}
	return probeTarget(&withJob, p.backend.opts.Namespace)
}

type probeAddr struct {
	wsID, run, addr string
}

// probeTarget is what to probe of allocation a: the host address of its
// "http" port, and the run its job version names. Only a running
// allocation of a codehub workspace job with a run qualifies.
func probeTarget(a *api.Allocation, namespace string) (probeAddr, bool) {
	if a == nil || a.Job == nil || a.AllocatedResources == nil {
		return probeAddr{}, false
	}
	wsID := a.Job.Meta[MetaWorkspaceID]
	run := a.Job.Meta[MetaRunID]
	if run == "" || !workspaceAlloc(a, namespace, wsID) {
		return probeAddr{}, false
	}
	for _, port := range a.AllocatedResources.Shared.Ports {
		if port.Label == "http" && port.HostIP != "" && port.Value > 0 {
			return probeAddr{wsID: wsID, run: run, addr: net.JoinHostPort(port.HostIP, strconv.Itoa(port.Value))}, true
		}
	}
	return probeAddr{}, false
}

// startingAlloc reports an allocation event's allocation that is worth
// probing: a workspace job's, running, meant to run, health unknown.
func startingAlloc(ev api.Event) (*api.Allocation, bool) {
	if ev.Topic != api.TopicAllocation || !slices.ContainsFunc(ev.FilterKeys, isWorkspaceJob) {
		return nil, false
	}
	a, err := ev.Allocation()
	if err != nil || a == nil || !isWorkspaceJob(a.JobID) {
		return nil, false
	}
	if a.ClientStatus != api.AllocClientStatusRunning || a.DesiredStatus != api.AllocDesiredStatusRun ||
		a.DeploymentStatus != nil && a.DeploymentStatus.Healthy != nil {
		return nil, false
	}
	return a, true
}

// isWorkspaceJob: id names a workspace job. An allocation event's filter
// keys hold its job id, so the payload is decoded for workspaces only.
func isWorkspaceJob(id string) bool {
	_, kind, ok := controller.ParseJobName(id)
	return ok && kind == controller.JobWorkspace
}
