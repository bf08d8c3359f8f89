package nomad

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/nomad/api"

	"github.com/codehub-io/codehub/agent"
	"github.com/codehub-io/codehub/controller"
)

// AgentResolver finds the workspace agent of a running workspace: the
// "agent" port of the running allocation of job ws-{id}, read from Nomad
// itself whatever provider registers the program's service. The agent
// answers only its run's token, so an address that went stale opens
// nothing.
type AgentResolver struct {
	logger hclog.Logger
	client *api.Client
	opts   ResolverOptions

	mu    sync.Mutex
	cache map[string]cachedAddr
}

var _ agent.Resolver = (*AgentResolver)(nil)

// NewAgentResolver returns a resolver over Nomad's allocations API.
func NewAgentResolver(logger hclog.Logger, client *api.Client, opts ResolverOptions) *AgentResolver {
	if opts.CacheTTL <= 0 {
		opts.CacheTTL = 2 * time.Second
	}
	return &AgentResolver{logger: logger, client: client, opts: opts, cache: make(map[string]cachedAddr)}
}

// ResolveAgent returns host:port of the agent of workspace wsID;
// controller.ErrNoUpstream when no allocation of it runs, agent.ErrNoAgent
// when the running one has no agent port.
func (r *AgentResolver) ResolveAgent(ctx context.Context, wsID string) (string, error) {
	r.mu.Lock()
	c, ok := r.cache[wsID]
	r.mu.Unlock()
	if ok && time.Now().Before(c.expires) {
		return c.addr, nil
	}
	q := (&api.QueryOptions{Namespace: r.opts.Namespace, Region: r.opts.Region}).WithContext(ctx)
	stubs, _, err := r.client.Jobs().Allocations(jobID(wsID), false, q)
	if err != nil && !isNotFound(err) {
		return "", fmt.Errorf("resolve agent of %s: %w", wsID, classify("list allocations", err))
	}
	for _, s := range stubs {
		if s.DesiredStatus != api.AllocDesiredStatusRun || s.ClientStatus != api.AllocClientStatusRunning {
			continue
		}
		a, _, err := r.client.Allocations().Info(s.ID, q)
		if err != nil {
			r.logger.Debug("read allocation", "alloc_id", s.ID, "error", err)
			continue
		}
		if !workspaceAlloc(a, r.opts.Namespace, wsID) {
			continue
		}
		addr, ok := agentAddr(a, r.opts.Namespace, wsID)
		if !ok {
			return "", fmt.Errorf("%s: %w", wsID, agent.ErrNoAgent)
		}
		r.mu.Lock()
		r.cache[wsID] = cachedAddr{addr: addr, expires: time.Now().Add(r.opts.CacheTTL)}
		r.mu.Unlock()
		return addr, nil
	}
	r.mu.Lock()
	delete(r.cache, wsID)
	r.mu.Unlock()
	return "", fmt.Errorf("agent of %s: %w", wsID, controller.ErrNoUpstream)
}

// agentAddr is the agent port of a, the running allocation of codehub's
// job ws-{wsID}.
func agentAddr(a *api.Allocation, namespace, wsID string) (string, bool) {
	if !workspaceAlloc(a, namespace, wsID) || a.AllocatedResources == nil {
		return "", false
	}
	for _, p := range a.AllocatedResources.Shared.Ports {
		if p.Label == "agent" && p.HostIP != "" && p.Value > 0 {
			return net.JoinHostPort(p.HostIP, strconv.Itoa(p.Value)), true
		}
	}
	return "", false
}
