// Package api is CodeHub's HTTP surface: the REST API under /api/v1 (login
// and sessions, personal API tokens, workspaces, admin recovery, the SSE
// event stream and the OpenAPI document), /metrics, and the mounting of the workspace proxy at
// /w/{id}/ or on workspace subdomains. It changes workspaces only through
// the workspace service layer and never talks to the backend directly.
package api

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/go-redis/v9"
	"golang.org/x/sync/singleflight"

	"github.com/codehub-io/codehub/activity"
	"github.com/codehub-io/codehub/agent"
	"github.com/codehub-io/codehub/audit"
	"github.com/codehub-io/codehub/controller"
	"github.com/codehub-io/codehub/identity"
	"github.com/codehub-io/codehub/ports"
	"github.com/codehub-io/codehub/proxy"
)

// Options configures the HTTP surface.
type Options struct {
	// PublicURL is where users reach CodeHub; it makes workspace URLs, the
	// origin state-changing requests must come from, and (https) Secure
	// cookies.
	PublicURL string
	// SubdomainBase enables subdomain mode: workspace {id} is served at
	// {id}.{SubdomainBase} (host, optional port). Empty serves /w/{id}/.
	SubdomainBase string
	// CookieDomain is the session cookie's Domain attribute. Subdomain mode
	// needs a domain covering the dashboard and the workspace hosts; empty
	// means a host-only cookie.
	CookieDomain string
	// SessionTTL is how long a login lasts; 0 means 24 h.
	SessionTTL time.Duration
	// TrustedProxies are peers whose X-Forwarded-* headers are believed.
	TrustedProxies []netip.Prefix
	// HeartbeatInterval of event streams; 0 means HeartbeatInterval.
	HeartbeatInterval time.Duration
	// StreamWriteTimeout bounds each write to an event stream: a client
	// that stops reading is dropped then, instead of holding its stream
	// and goroutine forever. 0 means StreamWriteTimeout.
	StreamWriteTimeout time.Duration
	// BodyReadTimeout bounds reading a request body the API decodes; 0
	// means BodyReadTimeout.
	BodyReadTimeout time.Duration
	// RouteTTL is how long the proxy reuses a running workspace's owner
	// and upstream; 0 means 1 s.
	RouteTTL time.Duration
	// UpstreamToken, when set, gives the upstream token of a workspace's
	// run, which the proxy sends as code-server's session cookie.
	UpstreamToken func(workspaceID, runID string) string
	// Registry receives every metric of the API and the proxy; nil creates
	// a private one. Pass the registry the controller registers with to
	// serve all of CodeHub's metrics together.
	Registry *prometheus.Registry
	// MetricsToken, when set, serves the registry at /metrics to requests
	// carrying it as a bearer token; empty serves no /metrics here.
	MetricsToken string
	// Dashboard, when set, serves every path the API and proxy do not.
	Dashboard http.Handler
	// AuditRetention is how long audit events are kept; 0 means
	// DefaultAuditRetention.
	AuditRetention time.Duration
	// NoPasswordLogin turns the login with a local password off.
	NoPasswordLogin bool
	// OIDC, when set, offers single sign-on through an OpenID Provider.
	OIDC *OIDCOptions
	// MaxPortShare is the widest share level an owner may give a port;
	// empty means ports.Owner. Path mode allows ports.Owner only.
	MaxPortShare ports.Level
	// Routes are served beside the API's own, by ServeMux pattern: the
	// server's health check and binary download. They share the API's
	// route table rather than sit in one of their own in front of every
	// proxied request.
	Routes map[string]http.Handler
}

// Deps are the systems the HTTP surface works with.
type Deps struct {
	Pool       *pgxpool.Pool
	Redis      *redis.Client
	Workspaces WorkspaceService
	Upstreams  controller.Upstreams
	// Progress, when set, reads the progress of archives and restores.
	Progress ProgressReader
	// Fleet lists the nodes of a backend that has several (nil: the
	// admin node endpoints answer 404).
	Fleet controller.Fleet
	// Agents, when set, reaches the agents of running workspaces (SSH, the
	// workspaces' ports); nil when the backend runs none.
	Agents *agent.Connector
	// Ports, when set, connects to the ports of running workspaces in
	// place of Agents (nil with no Agents either: port addresses answer
	// 404).
	Ports proxy.PortDialer
}

// Server is the http.Handler of CodeHub's HTTP surface. Run must run on
// every replica while it serves.
type Server struct {
	logger        hclog.Logger
	opts          Options
	pool          *pgxpool.Pool
	workspaces    WorkspaceService
	sites         proxy.Sites
	identity      *identity.Service
	hub           *hub
	activity      *activity.Recorder
	proxy         *proxy.Proxy
	metrics       *metrics
	mux           *http.ServeMux
	allowed       []string
	progress      ProgressReader
	progressReads singleflight.Group
	audit         *audit.Log
	oidc          *oidcLogin
	fleet         controller.Fleet
	agents        *agent.Connector
	// agentPorts lists and reaches workspace ports through the agents.
	agentPorts *agentPorts
	// portDialer reaches workspace ports (nil: none are reached).
	portDialer proxy.PortDialer
}

// New builds the HTTP surface.
func New(logger hclog.Logger, opts Options, deps Deps) (*Server, error) {
	if opts.SessionTTL == 0 {
		opts.SessionTTL = 24 * time.Hour
	}
	if opts.HeartbeatInterval == 0 {
		opts.HeartbeatInterval = HeartbeatInterval
	}
	if opts.StreamWriteTimeout == 0 {
		opts.StreamWriteTimeout = StreamWriteTimeout
	}
	if opts.BodyReadTimeout == 0 {
		opts.BodyReadTimeout = BodyReadTimeout
	}
	if opts.Registry == nil {
		opts.Registry = prometheus.NewRegistry()
	}
	if opts.AuditRetention == 0 {
		opts.AuditRetention = DefaultAuditRetention
	}
	sites, err := proxy.NewSites(opts.PublicURL, opts.SubdomainBase)
	if err != nil {
		return nil, err
	}
	m, err := newMetrics(opts.Registry, logger, deps.Pool)
	if err != nil {
		return nil, fmt.Errorf("register api metrics: %w", err)
	}
	s := &Server{
		logger: logger, opts: opts, pool: deps.Pool, workspaces: deps.Workspaces, sites: sites, fleet: deps.Fleet, agents: deps.Agents,
		identity: identity.New(logger.Named("identity"), deps.Pool, identity.Options{
			SessionTTL: opts.SessionTTL, Secure: sites.Secure(), CookieDomain: opts.CookieDomain, OIDC: opts.OIDC.rules(),
		}),
		hub:      newHub(logger.Named("events"), deps.Redis),
		activity: activity.NewRecorder(logger.Named("activity"), deps.Redis),
		metrics:  m,
		allowed:  []string{sites.PublicOrigin()},
		progress: deps.Progress,
		audit:    audit.New(logger.Named("audit"), deps.Pool),
	}
	if opts.OIDC != nil {
		s.oidc = newOIDCLogin(logger.Named("oidc"), *opts.OIDC, sites.PublicOrigin())
	}
	portDialer := deps.Ports
	if deps.Agents != nil {
		s.agentPorts = &agentPorts{agents: deps.Agents, workspaces: deps.Workspaces}
		if portDialer == nil {
			portDialer = s.agentPorts
		}
	}
	s.portDialer = portDialer
	s.proxy, err = proxy.New(logger.Named("proxy"), proxy.Options{
		Sites: sites, SessionCookie: SessionCookie, TrustedProxies: opts.TrustedProxies, Registerer: opts.Registry,
		RouteTTL: opts.RouteTTL, UpstreamToken: opts.UpstreamToken, Audit: s.audit,
		Ports: portDialer, Shares: portShares{deps.Pool}, MaxPortShare: opts.MaxPortShare,
	}, s.identity, deps.Workspaces, deps.Upstreams, s.activity)
	if err != nil {
		return nil, err
	}
	s.mux = s.routes()
	return s, nil
}

// Route patterns, also the "route" label of the HTTP metrics.
const (
	routeLogin        = "POST /api/v1/login"
	routeLogout       = "POST /api/v1/logout"
	routeSession      = "GET /api/v1/session"
	routeList         = "GET /api/v1/workspaces"
	routeCreate       = "POST /api/v1/workspaces"
	routeGet          = "GET /api/v1/workspaces/{id}"
	routePatch        = "PATCH /api/v1/workspaces/{id}"
	routeDelete       = "DELETE /api/v1/workspaces/{id}"
	routeExtend       = "POST /api/v1/workspaces/{id}/extend"
	routeArchives     = "GET /api/v1/workspaces/{id}/archives"
	routePorts        = "GET /api/v1/workspaces/{id}/ports"
	routePortShare    = "PUT /api/v1/workspaces/{id}/ports/{port}"
	routePortForward  = "POST /api/v1/workspaces/{id}/ports/{port}/forward"
	routeProgress     = "GET /api/v1/workspaces/{id}/progress"
	routeSSH          = "GET /api/v1/workspaces/{id}/ssh"
	routeSSHTunnel    = "GET /api/v1/workspaces/{id}/ssh/tunnel"
	routeArchive      = "GET /api/v1/workspaces/{id}/archives/{archive}/home.tar.zst"
	routeImages       = "GET /api/v1/images"
	routeAdminList    = "GET /api/v1/admin/workspaces"
	routeAdminRecover = "POST /api/v1/admin/workspaces/{id}/recover"
	routeAdminDesired = "PATCH /api/v1/admin/workspaces/{id}"
	routeAdminNodes   = "GET /api/v1/admin/nodes"
	routeEvacuate     = "POST /api/v1/admin/nodes/{node}/evacuate"
	routeEvacuateStop = "DELETE /api/v1/admin/nodes/{node}/evacuate"
	routeElsewhere    = "POST /api/v1/admin/workspaces/{id}/restore-elsewhere"
	routeEvents       = "GET /api/v1/events"
	routeOpenAPI      = "GET /api/v1/openapi.json"
	routeTokens       = "GET /api/v1/tokens"
	routeTokenCreate  = "POST /api/v1/tokens"
	routeTokenRevoke  = "DELETE /api/v1/tokens/{id}"
	routeTokenGrant   = "POST /api/v1/token-grants"
	routeTokenRedeem  = "POST /api/v1/token-grants/redeem"
	routePassword     = "POST /api/v1/password"

	routeAuthMethods    = "GET /api/v1/auth/methods"
	routeOIDCLogin      = "GET /api/v1/auth/oidc/login"
	routeOIDCCallback   = "GET /api/v1/auth/oidc/callback"
	routeLoginNext      = "GET /api/v1/auth/next"
	routeOIDCLogoutAsk  = "GET /api/v1/auth/oidc/logout"
	routeOIDCLogout     = "POST /api/v1/auth/oidc/logout"
	routeAdminUsers     = "GET /api/v1/admin/users"
	routeAdminAddUser   = "POST /api/v1/admin/users"
	routeAdminPatchUser = "PATCH /api/v1/admin/users/{id}"
	routeAdminAudit     = "GET /api/v1/admin/audit"
	routeTemplates      = "GET /api/v1/templates"
	routeAdminUsage     = "GET /api/v1/admin/templates"
	routePrebuild       = "POST /api/v1/admin/templates/{name}/prebuilds"
	routeSettings       = "GET /api/v1/settings"
	routePatchSettings  = "PATCH /api/v1/settings"
)

func (s *Server) routes() *http.ServeMux {
	mux := http.NewServeMux()
	handlers := map[string]http.HandlerFunc{
		routeLogin: s.login, routeLogout: s.logout, routeSession: s.session,
		routeList: s.listWorkspaces, routeCreate: s.createWorkspace,
		routeGet: s.getWorkspace, routePatch: s.patchWorkspace, routeDelete: s.deleteWorkspace,
		routeExtend: s.extendWorkspace, routeArchives: s.listArchives, routeImages: s.listImages,
		routeProgress: s.getProgress,
		routePorts:    s.listPorts, routePortShare: s.setPortShare, routePortForward: s.forwardPort,
		routeSSH: s.getSSH, routeSSHTunnel: s.sshTunnel,
		routeArchive:   s.downloadArchive,
		routeAdminList: s.adminListWorkspaces, routeAdminRecover: s.recoverWorkspace,
		routeAdminDesired: s.adminSetDesired,
		routeAdminNodes:   s.listNodes, routeEvacuate: s.evacuateNode, routeEvacuateStop: s.cancelEvacuation,
		routeElsewhere: s.restoreElsewhere,
		routeEvents:    s.events, routeOpenAPI: serveOpenAPI,
		routeTokens: s.listTokens, routeTokenCreate: s.createToken, routeTokenRevoke: s.revokeToken,
		routeTokenGrant: s.createGrant, routeTokenRedeem: s.redeemGrant, routePassword: s.changePassword,
		routeAuthMethods: s.authMethods, routeOIDCLogin: s.oidcStart, routeOIDCCallback: s.oidcCallback,
		routeLoginNext: s.getLoginNext, routeOIDCLogoutAsk: s.oidcLogoutOffer, routeOIDCLogout: s.oidcLogout,
		routeAdminUsers: s.adminListUsers, routeAdminAddUser: s.adminCreateUser, routeAdminPatchUser: s.adminPatchUser,
		routeAdminAudit: s.listAudit,
		routeTemplates:  s.listTemplates, routeAdminUsage: s.adminTemplateUsage, routePrebuild: s.requestPrebuild,
		routeSettings: s.getSettings, routePatchSettings: s.patchSettings,
	}
	allow := map[string][]string{}
	for pattern, h := range handlers {
		mux.Handle(pattern, s.metrics.instrument(pattern, s.guard(h)))
		method, path, _ := strings.Cut(pattern, " ")
		allow[path] = append(allow[path], method)
	}
	// Paths known with another method answer 405 in the error envelope
	// (ServeMux prefers the method-specific patterns above).
	for path, methods := range allow {
		mux.Handle(path, methodNotAllowed(methods))
	}
	if s.opts.MetricsToken != "" {
		mux.Handle("GET /metrics", requireBearer(s.opts.MetricsToken, promhttp.HandlerFor(s.opts.Registry, promhttp.HandlerOpts{})))
	}
	for pattern, h := range s.opts.Routes {
		mux.Handle(pattern, h)
	}
	mux.Handle(s.sites.PathPrefix(""), s.proxy)
	mux.HandleFunc("/api/", func(w http.ResponseWriter, _ *http.Request) {
		WriteError(w, newError(http.StatusNotFound, CodeNotFound, "no such endpoint"))
	})
	if s.opts.Dashboard != nil {
		mux.Handle("/", s.opts.Dashboard)
	}
	return mux
}

func methodNotAllowed(methods []string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		for _, m := range methods {
			w.Header().Add("Allow", m)
		}
		WriteError(w, newError(http.StatusMethodNotAllowed, CodeMethodNotAllowed, r.Method+" is not allowed here"))
	})
}

// guard refuses state-changing requests from other origins. A request
// with an Authorization header is judged by that header alone, never by
// cookies, and no page can make a browser send one to another origin
// (that needs a CORS preflight the API never grants), so it needs no such
// check.
func (s *Server) guard(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		_, bearer := identity.BearerToken(r.Header)
		if !bearer && !safeMethod(r.Method) && crossOrigin(r.Header, s.allowed) {
			WriteError(w, newError(http.StatusForbidden, CodeCrossOrigin, "cross-origin request refused"))
			return
		}
		h(w, r)
	}
}

// ServeHTTP routes workspace subdomains and paths to the proxy and
// everything else through the API's routes. Taking workspace paths
// straight to the proxy skips matching them against every API pattern,
// which cost more CPU and allocations per proxied request than CodeHub's
// own proxy logic.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if s.sites.Proxies(r) {
		s.proxy.ServeHTTP(w, r)
		return
	}
	s.mux.ServeHTTP(w, r)
}

// Listen wraps the server's listener so that the proxy may serve plain
// workspace requests on connections it takes over (proxy.Listener); idle
// and header are the HTTP server's IdleTimeout and ReadHeaderTimeout.
func (s *Server) Listen(ln net.Listener, idle, header time.Duration) *proxy.Listener {
	return s.proxy.Listen(ln, idle, header)
}

// WorkspaceURL is where the user opens workspace id.
func (s *Server) WorkspaceURL(id string) string { return s.sites.WorkspaceURL(id) }

// sessionSweepInterval is how often expired sessions and tokens are
// deleted.
const sessionSweepInterval = time.Hour

// Run keeps the replica's background work going until ctx ends: the
// subscription feeding event streams, the activity flush, the proxy's
// checks of the sessions of open workspace connections, the sweep of
// expired sessions and tokens and the pruning of the audit log. It runs on
// every replica, leader or not.
func (s *Server) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	pruneAudit := func(ctx context.Context) error { return s.audit.RunPruner(ctx, s.opts.AuditRetention) }
	loops := []func(context.Context) error{s.hub.run, s.activity.Run, s.proxy.Run, s.sweepSessions, pruneAudit}
	errs := make([]error, len(loops))
	for i, loop := range loops {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = loop(ctx)
		}()
	}
	wg.Wait()
	err := errors.Join(errs...)
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return err
}

func (s *Server) sweepSessions(ctx context.Context) error {
	t := time.NewTicker(sessionSweepInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
			s.identity.SweepExpired(ctx)
		}
	}
}
