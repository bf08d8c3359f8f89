package nomad

import (
	"context"
	"fmt"
	"net"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	consulapi "github.com/hashicorp/consul/api"
	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/nomad/api"

	"github.com/codehub-io/codehub/controller"
)

// ResolverOptions scopes the Nomad service resolver.
type ResolverOptions struct {
	Namespace string
	Region    string
	// CacheTTL is how long a healthy address is reused without asking
	// Nomad again; the proxy resolves on every request.
	CacheTTL time.Duration
}

// ServiceResolver finds workspace upstreams among Nomad native service
// registrations. Any job in the namespace may register a service named
// ws-{id}, and the proxy sends the workspace's traffic and upstream token to
// whatever it resolves, so only registrations of job ws-{id} from its
// running allocation count. Registration happens before the program
// listens, so an instance counts once its allocation's checks pass or,
// before the first check result, once its program answers /healthz.
type ServiceResolver struct {
	logger hclog.Logger
	client *api.Client
	opts   ResolverOptions
	allocs *allocVerifier

	mu    sync.Mutex
	cache map[string]cachedAddr
	// answered: when the program of a starting allocation first answered
	// a direct probe, by allocation id.
	answered map[string]time.Time
}

type cachedAddr struct {
	addr    string
	expires time.Time
}

var _ controller.Upstreams = (*ServiceResolver)(nil)

// NewServiceResolver returns a resolver over Nomad's service API.
func NewServiceResolver(logger hclog.Logger, client *api.Client, opts ResolverOptions) *ServiceResolver {
	if opts.CacheTTL <= 0 {
		opts.CacheTTL = 2 * time.Second
	}
	return &ServiceResolver{
		logger:   logger,
		client:   client,
		opts:     opts,
		allocs:   newAllocVerifier(logger, client, opts.Namespace, opts.Region),
		cache:    make(map[string]cachedAddr),
		answered: make(map[string]time.Time),
	}
}

// Resolve returns host:port of a registration of ws-{id} whose checks pass.
func (r *ServiceResolver) Resolve(ctx context.Context, wsID string) (string, error) {
	name := serviceName(wsID)
	r.mu.Lock()
	c, ok := r.cache[name]
	r.mu.Unlock()
	if ok && time.Now().Before(c.expires) {
		return c.addr, nil
	}

	q := (&api.QueryOptions{Namespace: r.opts.Namespace, Region: r.opts.Region}).WithContext(ctx)
	regs, _, err := r.client.Services().Get(name, q)
	if err != nil && !isNotFound(err) {
		return "", fmt.Errorf("resolve %s: %w", name, classify("read service", err))
	}
	sort.Slice(regs, func(i, k int) bool { return regs[i].ID < regs[k].ID })
	for _, reg := range regs {
		if reg.JobID != jobID(wsID) || !r.allocs.current(ctx, reg.AllocID, wsID) {
			continue
		}
		checks, err := r.client.Allocations().Checks(reg.AllocID, q)
		if err != nil {
			r.logger.Debug("read allocation checks", "alloc_id", reg.AllocID, "error", err)
			continue
		}
		addr := net.JoinHostPort(reg.Address, strconv.Itoa(reg.Port))
		// Until its checks pass, the program answering its health path
		// directly counts, as it does for the controller, unless a check
		// failed since.
		if !servicePassing(checks, name) && !r.answers(ctx, reg.AllocID, addr, checks, name) {
			continue
		}
		r.mu.Lock()
		r.cache[name] = cachedAddr{addr: addr, expires: time.Now().Add(r.opts.CacheTTL)}
		r.mu.Unlock()
		return addr, nil
	}
	r.mu.Lock()
	delete(r.cache, name)
	r.mu.Unlock()
	return "", fmt.Errorf("%s: %w", name, controller.ErrNoUpstream)
}

// Forget drops the cached address of workspace wsID: the proxy found it
// dead (the workspace stopped, or started again elsewhere within the
// cache's life), so the next Resolve asks Nomad.
func (r *ServiceResolver) Forget(wsID string) {
	r.mu.Lock()
	delete(r.cache, serviceName(wsID))
	r.mu.Unlock()
}

// servicePassing: the service has checks in this allocation and all pass.
func servicePassing(checks api.AllocCheckStatuses, service string) bool {
	n := 0
	for _, c := range checks {
		if c.Service != service {
			continue
		}
		if c.Status != "success" {
			return false
		}
		n++
	}
	return n > 0
}

// answers reports whether the program of allocation allocID answered a
// direct probe, now or before, that no failed check of service followed.
// A first answer is kept for the probe window, so a check that fails
// later refuses the instance.
func (r *ServiceResolver) answers(ctx context.Context, allocID, addr string, checks api.AllocCheckStatuses, service string) bool {
	now := time.Now()
	r.mu.Lock()
	at, ok := r.answered[allocID]
	for id, t := range r.answered {
		if now.Sub(t) > probeWindow {
			delete(r.answered, id)
		}
	}
	r.mu.Unlock()
	if !ok {
		if !programAnswers(ctx, addr) {
			return false
		}
		at = now
		r.mu.Lock()
		r.answered[allocID] = at
		r.mu.Unlock()
	}
	return !failedSince(checks, service, at)
}

// allocVerifier tells whether an allocation is the running allocation of a
// workspace's job in codehub's namespace. Answers are kept a while, so a
// resolve on every proxied request costs no Nomad call: an allocation never
// changes job, one that stops fails its checks (which both resolvers require
// too), and a refused one is not asked about again at every request.
type allocVerifier struct {
	logger            hclog.Logger
	client            *api.Client
	namespace, region string

	mu    sync.Mutex
	known map[string]allocVerdict // by allocation id and workspace id
}

type allocVerdict struct {
	current bool
	expires time.Time
}

const (
	currentAllocTTL = 30 * time.Second
	refusedAllocTTL = 5 * time.Second
)

func newAllocVerifier(logger hclog.Logger, client *api.Client, namespace, region string) *allocVerifier {
	return &allocVerifier{logger: logger, client: client, namespace: namespace, region: region, known: make(map[string]allocVerdict)}
}

func (v *allocVerifier) current(ctx context.Context, allocID, wsID string) bool {
	key := allocID + "/" + wsID
	now := time.Now()
	v.mu.Lock()
	k, ok := v.known[key]
	v.mu.Unlock()
	if ok && now.Before(k.expires) {
		return k.current
	}
	q := (&api.QueryOptions{Namespace: v.namespace, Region: v.region}).WithContext(ctx)
	a, _, err := v.client.Allocations().Info(allocID, q)
	if err != nil && ctx.Err() != nil {
		return false
	}
	verdict := allocVerdict{current: true, expires: now.Add(currentAllocTTL)}
	if err != nil || !workspaceAlloc(a, v.namespace, wsID) {
		verdict = allocVerdict{expires: now.Add(refusedAllocTTL)}
		v.logger.Warn("ignored a workspace service registration that is not its running allocation's",
			"workspace_id", wsID, "alloc_id", allocID, "error", err)
	}
	v.mu.Lock()
	for id, k := range v.known {
		if now.After(k.expires) {
			delete(v.known, id)
		}
	}
	v.known[key] = verdict
	v.mu.Unlock()
	return verdict.current
}

// workspaceAlloc: a is the running allocation of codehub's job ws-{wsID}
// in namespace.
func workspaceAlloc(a *api.Allocation, namespace, wsID string) bool {
	if namespace == "" {
		namespace = "default"
	}
	return a != nil && a.Namespace == namespace && a.JobID == jobID(wsID) &&
		a.DesiredStatus == api.AllocDesiredStatusRun && a.ClientStatus == api.AllocClientStatusRunning &&
		a.Job != nil && a.Job.Meta[MetaManaged] == "true" && a.Job.Meta[MetaWorkspaceID] == wsID
}

// consulServiceAlloc returns the allocation that registered a Consul service
// of workspace wsID, read from the service id Nomad assigns to group
// services: "_nomad-task-" + alloc id + "-group-workspace-" + name + "-http".
// Anything else (a registration Nomad did not make for that group and port)
// gives ok false.
func consulServiceAlloc(serviceID, wsID string) (allocID string, ok bool) {
	const prefix, uuidLen = "_nomad-task-", 36
	rest, found := strings.CutPrefix(serviceID, prefix)
	if !found || len(rest) <= uuidLen {
		return "", false
	}
	allocID, suffix := rest[:uuidLen], rest[uuidLen:]
	if suffix != "-group-workspace-"+serviceName(wsID)+"-http" || strings.Count(allocID, "-") != 4 {
		return "", false
	}
	return allocID, true
}

// ConsulResolverOptions scopes the Consul resolver.
type ConsulResolverOptions struct {
	Namespace  string
	Datacenter string
	// WaitTime bounds each blocking query.
	WaitTime time.Duration
	// IdleTimeout stops watching a service nobody resolved for this long.
	IdleTimeout time.Duration
}

// ConsulResolver finds workspace upstreams through Consul's health API,
// passing instances only. The first Resolve of a service reads it at once;
// from then on a blocking query per service keeps the answer current, so
// resolving is a map lookup. Anyone with a Consul token that may register
// services can register ws-{id}, so an instance counts only when its
// service id is the one Nomad gives the workspace group's service and names
// the running allocation of job ws-{id}, which Nomad confirms.
type ConsulResolver struct {
	logger hclog.Logger
	health *consulapi.Health
	opts   ConsulResolverOptions
	allocs *allocVerifier

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu      sync.Mutex
	entries map[string]*consulEntry
}

type consulEntry struct {
	ready     chan struct{} // closed after the first answer
	instances []consulInstance
	err       error
	lastUsed  time.Time
}

// consulInstance is one passing instance of a workspace service whose id is
// the one Nomad gives the workspace group's service.
type consulInstance struct {
	addr    string
	allocID string // the allocation the service id names
}

var _ controller.Upstreams = (*ConsulResolver)(nil)

// NewConsulResolver returns a resolver over client that checks each
// instance's allocation with nomad (in nomadNamespace and nomadRegion);
// Close stops its watches.
func NewConsulResolver(logger hclog.Logger, client *consulapi.Client, nomad *api.Client, nomadNamespace, nomadRegion string, opts ConsulResolverOptions) *ConsulResolver {
	if opts.WaitTime <= 0 {
		opts.WaitTime = 5 * time.Minute
	}
	if opts.IdleTimeout <= 0 {
		opts.IdleTimeout = 10 * time.Minute
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &ConsulResolver{
		logger:  logger,
		health:  client.Health(),
		opts:    opts,
		allocs:  newAllocVerifier(logger, nomad, nomadNamespace, nomadRegion),
		ctx:     ctx,
		cancel:  cancel,
		entries: make(map[string]*consulEntry),
	}
}

// Close stops every watch and waits for them.
func (r *ConsulResolver) Close() {
	r.cancel()
	r.wg.Wait()
}

// Resolve returns host:port of a passing instance of ws-{id}.
func (r *ConsulResolver) Resolve(ctx context.Context, wsID string) (string, error) {
	name := serviceName(wsID)
	r.mu.Lock()
	e, ok := r.entries[name]
	if !ok {
		e = &consulEntry{ready: make(chan struct{})}
		r.entries[name] = e
		r.wg.Add(1)
		go r.watch(name, e)
	}
	e.lastUsed = time.Now()
	r.mu.Unlock()

	select {
	case <-e.ready:
	case <-ctx.Done():
		return "", ctx.Err()
	}
	r.mu.Lock()
	instances, err := e.instances, e.err
	r.mu.Unlock()
	for _, in := range instances {
		if r.allocs.current(ctx, in.allocID, wsID) {
			return in.addr, nil
		}
	}
	if err != nil {
		return "", fmt.Errorf("resolve %s: %w", name, err)
	}
	return "", fmt.Errorf("%s: %w", name, controller.ErrNoUpstream)
}

// watch keeps one service's passing instances current with blocking
// queries until the resolver closes or nobody asked for it for a while.
func (r *ConsulResolver) watch(name string, e *consulEntry) {
	defer r.wg.Done()
	var index uint64
	first := true
	for {
		q := &consulapi.QueryOptions{
			Namespace:  r.opts.Namespace,
			Datacenter: r.opts.Datacenter,
			WaitIndex:  index,
			WaitTime:   r.opts.WaitTime,
		}
		entries, meta, err := r.health.Service(name, "", true, q.WithContext(r.ctx))
		if r.ctx.Err() != nil {
			return
		}
		r.mu.Lock()
		if err != nil {
			e.err = err
		} else {
			e.instances, e.err = r.consulInstances(entries, name), nil
			// An index that goes backwards means Consul's state was reset:
			// start over, as its blocking query docs advise.
			index = meta.LastIndex
			if index < q.WaitIndex {
				index = 0
			}
		}
		idle := time.Since(e.lastUsed) > r.opts.IdleTimeout
		if idle {
			delete(r.entries, name)
		}
		r.mu.Unlock()
		if first {
			close(e.ready)
			first = false
		}
		if idle {
			return
		}
		if err != nil && !r.sleep(time.Second) {
			return
		}
	}
}

func (r *ConsulResolver) sleep(d time.Duration) bool {
	select {
	case <-r.ctx.Done():
		return false
	case <-time.After(d):
		return true
	}
}

// consulInstances turns health entries of service name into instances
// sorted by address; the service address wins over the node address, as in
// Consul's DNS.
func (r *ConsulResolver) consulInstances(entries []*consulapi.ServiceEntry, name string) []consulInstance {
	wsID := strings.TrimPrefix(name, controller.NamePrefix)
	var out []consulInstance
	for _, e := range entries {
		if e.Service == nil {
			continue
		}
		host := e.Service.Address
		if host == "" && e.Node != nil {
			host = e.Node.Address
		}
		if host == "" {
			continue
		}
		allocID, ok := consulServiceAlloc(e.Service.ID, wsID)
		if !ok {
			r.logger.Warn("ignored a workspace service registration Nomad did not make", "service", name, "service_id", e.Service.ID)
			continue
		}
		out = append(out, consulInstance{addr: net.JoinHostPort(host, strconv.Itoa(e.Service.Port)), allocID: allocID})
	}
	sort.Slice(out, func(i, k int) bool { return out[i].addr < out[k].addr })
	return out
}
