package nomad

import (
	"context"
	"fmt"
	"net"
	"sort"
	"strconv"
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
// registrations. Registration happens before the program listens, so only
// instances whose allocation checks pass count.
type ServiceResolver struct {
	logger hclog.Logger
	client *api.Client
	opts   ResolverOptions

	mu    sync.Mutex
	cache map[string]cachedAddr
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
	return &ServiceResolver{logger: logger, client: client, opts: opts, cache: make(map[string]cachedAddr)}
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
		checks, err := r.client.Allocations().Checks(reg.AllocID, q)
		if err != nil {
			r.logger.Debug("read allocation checks", "alloc_id", reg.AllocID, "error", err)
			continue
		}
		if !servicePassing(checks, name) {
			continue
		}
		addr := net.JoinHostPort(reg.Address, strconv.Itoa(reg.Port))
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
// resolving is a map lookup.
type ConsulResolver struct {
	logger hclog.Logger
	health *consulapi.Health
	opts   ConsulResolverOptions

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu      sync.Mutex
	entries map[string]*consulEntry
}

type consulEntry struct {
	ready    chan struct{} // closed after the first answer
	addrs    []string
	err      error
	lastUsed time.Time
}

var _ controller.Upstreams = (*ConsulResolver)(nil)

// NewConsulResolver returns a resolver over client; Close stops its watches.
func NewConsulResolver(logger hclog.Logger, client *consulapi.Client, opts ConsulResolverOptions) *ConsulResolver {
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
	addrs, err := e.addrs, e.err
	r.mu.Unlock()
	if len(addrs) > 0 {
		return addrs[0], nil
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
			e.addrs, e.err = consulAddrs(entries), nil
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

// consulAddrs turns health entries into sorted host:port strings; the
// service address wins over the node address, as in Consul's DNS.
func consulAddrs(entries []*consulapi.ServiceEntry) []string {
	var out []string
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
		out = append(out, net.JoinHostPort(host, strconv.Itoa(e.Service.Port)))
	}
	sort.Strings(out)
	return out
}
