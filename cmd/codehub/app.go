package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/codehub-io/codehub/agent"
	"github.com/codehub-io/codehub/api"
	"github.com/codehub-io/codehub/archive"
	"github.com/codehub-io/codehub/config"
	"github.com/codehub-io/codehub/controller"
	"github.com/codehub-io/codehub/events"
	"github.com/codehub-io/codehub/jobspecs"
	"github.com/codehub-io/codehub/local"
	"github.com/codehub-io/codehub/nomad"
	"github.com/codehub-io/codehub/ports"
	"github.com/codehub-io/codehub/proxy"
	"github.com/codehub-io/codehub/store"
	"github.com/codehub-io/codehub/web"
	"github.com/codehub-io/codehub/workspace"
)

// loop is a goroutine the server owns for its whole life.
type loop struct {
	name string
	run  func(ctx context.Context) error
}

// app is everything a server replica runs besides the listener.
type app struct {
	handler http.Handler
	// listen wraps the server's listener (api.Server.Listen).
	listen func(ln net.Listener, idle, header time.Duration) *proxy.Listener
	// metrics serves every metric of the server, for metrics.listen.
	metrics http.Handler
	loops   []loop
	closers []func()
}

func (a *app) close() {
	for i := len(a.closers) - 1; i >= 0; i-- {
		a.closers[i]()
	}
}

// backendParts is what the configured backend provides.
type backendParts struct {
	backend   controller.Backend
	upstreams controller.Upstreams
	// fleet lists nodes for the admin API (nil for one machine).
	fleet controller.Fleet
	// agents resolves workspace agents (nil: the backend runs none).
	agents agent.Resolver
	// metrics are the backend's own series, for the server's registry.
	metrics []prometheus.Collector
	close   func()
}

// aclPatience is how long a starting server asks a Nomad cluster that
// does not answer whether it enforces ACLs before it gives up.
const aclPatience = 30 * time.Second

func newBackend(ctx context.Context, logger hclog.Logger, cfg *config.Config, self *selfBinary, token func(workspaceID, runID string) string, agentKeys *agent.Keys) (backendParts, error) {
	switch cfg.Backend.Kind {
	case config.BackendLocal:
		opts, err := local.OptionsFromConfig(cfg)
		if err != nil {
			return backendParts{}, err
		}
		opts.UpstreamToken = token
		opts.Agent = agentKeys
		b, err := local.New(logger.Named("local"), opts)
		if err != nil {
			return backendParts{}, err
		}
		return backendParts{backend: b, upstreams: b, agents: b, close: func() {}}, nil
	case config.BackendNomad:
		// Every workspace can reach its node's Nomad agent: without ACLs
		// it could read every variable and register jobs.
		if err := nomad.RequireACLs(ctx, logger.Named("nomad"), cfg.Backend.Nomad, aclPatience); err != nil {
			return backendParts{}, err
		}
		requests := nomad.NewRequests()
		client, err := nomad.NewClient(cfg.Backend.Nomad, requests)
		if err != nil {
			return backendParts{}, err
		}
		opts, err := nomad.OptionsFromConfig(cfg, self.checksum)
		if err != nil {
			return backendParts{}, err
		}
		opts.UpstreamToken = token
		opts.Agent = agentKeys
		opts.AgentArchiveURL = strings.TrimSuffix(cfg.PublicURL, "/") + "/dl/codehub.tar"
		opts.AgentArchiveChecksum = self.tarChecksum
		renderer, err := jobspecs.NewRenderer(cfg.Jobspecs.Dir)
		if err != nil {
			return backendParts{}, err
		}
		ups, stop, err := nomad.NewUpstreams(logger, cfg, client)
		if err != nil {
			return backendParts{}, err
		}
		b := nomad.New(logger.Named("nomad"), client, opts, renderer)
		agents := nomad.NewAgentResolver(logger.Named("agents"), client, nomad.ResolverOptions{Namespace: cfg.Backend.Nomad.Namespace, Region: cfg.Backend.Nomad.Region})
		return backendParts{backend: b, upstreams: ups, fleet: b, agents: agents, metrics: requests.Collectors(), close: stop}, nil
	}
	return backendParts{}, fmt.Errorf("unknown backend %q", cfg.Backend.Kind)
}

func newApp(ctx context.Context, logger hclog.Logger, cfg *config.Config, d *deps) (*app, error) {
	self, err := newSelfBinary()
	if err != nil {
		return nil, err
	}
	token, err := upstreamTokens(ctx, cfg, d)
	if err != nil {
		return nil, err
	}
	agentKeys, err := newAgentKeys(ctx, d)
	if err != nil {
		return nil, err
	}
	parts, err := newBackend(ctx, logger, cfg, self, token, agentKeys)
	if err != nil {
		return nil, fmt.Errorf("backend: %w", err)
	}
	var agents *agent.Connector
	if parts.agents != nil {
		agents = agent.NewConnector(parts.agents, agentKeys)
	}
	a := &app{closers: []func(){parts.close}}

	archives := archive.NewStore(logger.Named("archive"), d.s3, d.bucket)
	svc := workspace.NewService(logger.Named("workspace"), d.pool, workspace.Options{
		MaxRunningPerUser: cfg.Limits.MaxRunningPerUser,
		MaxRunningGlobal:  cfg.Limits.MaxRunningGlobal,
		DefaultImage:      cfg.Workspace.Image,
		AllowedImages:     cfg.Workspace.AllowedImages,
		Policy: workspace.Policy{
			StandbyTTL:    cfg.Workspace.StandbyTTL,
			ArchiveTTL:    cfg.Workspace.ArchiveTTL,
			MaxStandbyTTL: cfg.Workspace.MaxStandbyTTL,
			MaxArchiveTTL: cfg.Workspace.MaxArchiveTTL,
			MaxExtend:     cfg.Workspace.MaxExtend,
			AutostartLead: cfg.Workspace.AutostartLead,
		},
		Archives:  archives,
		Templates: cfg,
	})
	if err := bootstrapAdmin(ctx, logger, cfg, d); err != nil {
		a.close()
		return nil, err
	}

	registry := prometheus.NewRegistry()
	registry.MustRegister(prometheus.NewGoCollector(), prometheus.NewProcessCollector(prometheus.ProcessCollectorOpts{}), d.s3Requests.requests)
	registry.MustRegister(parts.metrics...)
	srv, err := api.New(logger.Named("api"), api.Options{
		PublicURL:       cfg.PublicURL,
		SubdomainBase:   cfg.Proxy.SubdomainBase,
		CookieDomain:    cfg.Proxy.CookieDomain,
		SessionTTL:      cfg.Auth.SessionTTL,
		TrustedProxies:  cfg.Proxy.TrustedProxyPrefixes,
		MaxPortShare:    ports.Level(cfg.Proxy.MaxPortShare),
		Registry:        registry,
		MetricsToken:    cfg.Metrics.Token.Reveal(),
		Dashboard:       web.Handler(),
		UpstreamToken:   token,
		AuditRetention:  cfg.Audit.Retention,
		NoPasswordLogin: !cfg.Auth.PasswordLogin,
		OIDC:            oidcOptions(cfg.Auth.OIDC),
		Routes: map[string]http.Handler{
			"GET /api/v1/health":  healthHandler(d.healthChecks()),
			"GET /dl/codehub":     self,
			"GET /dl/codehub.tar": self.tarHandler(),
		},
	}, api.Deps{Pool: d.pool, Redis: d.redis, Workspaces: svc, Upstreams: parts.upstreams, Progress: progressOf(parts.backend), Fleet: parts.fleet, Agents: agents})
	if err != nil {
		a.close()
		return nil, err
	}
	a.handler = srv
	a.listen = srv.Listen
	a.metrics = promhttp.HandlerFor(registry, promhttp.HandlerOpts{})
	a.loops = append(a.loops, loop{"api", srv.Run})

	engineMetrics, err := controller.NewMetrics(registry)
	if err != nil {
		a.close()
		return nil, fmt.Errorf("controller metrics: %w", err)
	}
	ctlConfig := controller.ConfigFrom(cfg)
	ctlConfig.Metrics = engineMetrics
	ctl := controller.NewWorkspaceController(logger.Named("controller"), d.pool, parts.backend, archives, ctlConfig)
	ccfg := controller.CoordinatorConfigFrom(cfg, holderName())
	ccfg.Metrics = engineMetrics

	// The listener and the backend watcher wake the coordinator that runs
	// them, so they reach it through this indirection.
	var coord *controller.Coordinator
	prebuilds := controller.NewPrebuildRunner(logger.Named("prebuild"), d.pool, svc, cfg, controller.PrebuildConfig{
		Interval: cfg.Coordinator.IdleInterval,
		Metrics:  engineMetrics,
	})
	// A workspace change may be a builder done or a warm home ready: the
	// prebuild runner looks then too, not only at its interval.
	wake := func() { coord.Wake(); prebuilds.Wake() }
	leaderLoops := []controller.Loop{
		events.NewListener(logger.Named("events"), cfg.Database.URL.Reveal(), d.redis, wake),
		controller.NewTTLRunner(logger.Named("ttl"), svc, d.redis, controller.TTLConfig{
			Interval:   cfg.Coordinator.TTLInterval,
			StandbyTTL: cfg.Workspace.StandbyTTL,
			ArchiveTTL: cfg.Workspace.ArchiveTTL,
			Metrics:    engineMetrics,
		}),
		prebuilds,
		controller.NewGCRunner(logger.Named("gc"), svc, archives, controller.GCConfig{
			Interval:     cfg.GC.Interval,
			KeepArchives: cfg.GC.KeepArchives,
			DeletedGrace: cfg.GC.DeletedGrace,
			DryRun:       cfg.GC.DryRun,
			Metrics:      engineMetrics,
		}),
	}
	if n, ok := parts.backend.(controller.Notifier); ok {
		leaderLoops = append(leaderLoops, controller.LoopFunc(func(ctx context.Context) error { return n.Watch(ctx, wake) }))
	}
	if agents != nil {
		leaderLoops = append(leaderLoops, controller.NewSnapshotRunner(logger.Named("snapshot"), svc, archives,
			snapshotSource(agents), controller.SnapshotConfig{
				Interval: cfg.Workspace.SnapshotInterval,
				Timeout:  cfg.Coordinator.ArchiveTimeout,
				Epoch:    func() int64 { return coord.Epoch() },
				Metrics:  engineMetrics,
			}))
	}
	coord = controller.NewCoordinator(logger.Named("coordinator"), ccfg, ctl, leaderLoops...)
	a.loops = append(a.loops, loop{"coordinator", coord.Run})
	return a, nil
}

// upstreamTokens gives each workspace's upstream token when workspace
// programs demand one, from the key every replica shares; nil otherwise.
func upstreamTokens(ctx context.Context, cfg *config.Config, d *deps) (func(workspaceID, runID string) string, error) {
	if cfg.Workspace.UpstreamAuth != config.UpstreamAuthCodeServer {
		return nil, nil
	}
	key, err := store.DeploymentKey(ctx, d.pool, "upstream")
	if err != nil {
		return nil, err
	}
	tokens, err := workspace.NewUpstreamTokens(key)
	if err != nil {
		return nil, err
	}
	return tokens.For, nil
}

// newAgentKeys derives the workspace agents' tokens and SSH host keys from
// the key every replica shares.
func newAgentKeys(ctx context.Context, d *deps) (*agent.Keys, error) {
	key, err := store.DeploymentKey(ctx, d.pool, "agent")
	if err != nil {
		return nil, err
	}
	return agent.NewKeys(key)
}

// snapshotSource reaches the agent of a workspace run for a snapshot of
// its home.
func snapshotSource(agents *agent.Connector) controller.SnapshotSource {
	return func(ctx context.Context, wsID, runID string, req archive.SnapshotRequest) (io.ReadCloser, error) {
		c, err := agents.Client(ctx, wsID, runID)
		if errors.Is(err, agent.ErrNoAgent) {
			return nil, fmt.Errorf("%w: %w", controller.ErrSnapshotUnsupported, err)
		}
		if err != nil {
			return nil, err
		}
		return c.Snapshot(ctx, req)
	}
}

// progressOf is the backend's reader of job progress, if it has one.
func progressOf(b controller.Backend) api.ProgressReader {
	if p, ok := b.(api.ProgressReader); ok {
		return p
	}
	return nil
}

// oidcOptions is the API's single sign-on setting; nil when it is off.
func oidcOptions(o *config.OIDC) *api.OIDCOptions {
	if !o.Enabled() {
		return nil
	}
	return &api.OIDCOptions{
		Issuer: o.Issuer, ClientID: o.ClientID, ClientSecret: o.ClientSecret.Reveal(), Scopes: o.Scopes,
		UsernameClaim: o.UsernameClaim, GroupsClaim: o.GroupsClaim,
		AllowedGroups: o.AllowedGroups, AdminGroups: o.AdminGroups, Label: o.Label,
	}
}

// holderName names this replica as the leader it may become, in
// coordinator_epoch and the log: host:pid, and under Nomad its allocation,
// since replicas in containers share a pid (1) and, on the host's
// network, the host's name.
func holderName() string {
	host, _ := os.Hostname()
	name := host + ":" + strconv.Itoa(os.Getpid())
	if alloc := os.Getenv("NOMAD_ALLOC_ID"); alloc != "" {
		name += " alloc " + alloc
	}
	return name
}
