// Package proxy serves workspaces at /w/{id}/… (or at {id}.{subdomain_base}
// in subdomain mode): it authenticates the session, checks that the user
// owns the workspace, answers by display phase, wakes a standby workspace
// through the service layer, and forwards HTTP and WebSocket traffic to the
// upstream the backend resolves. It never writes workspace state other than
// through the service layer, and never forwards CodeHub's own credentials.
package proxy

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httputil"
	"net/netip"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/singleflight"

	"github.com/codehub-io/codehub/audit"
	"github.com/codehub-io/codehub/controller"
	"github.com/codehub-io/codehub/ports"
	"github.com/codehub-io/codehub/workspace"
)

// Authenticator tells who sent a request and, in subdomain mode, carries a
// dashboard session over to a workspace's own host. ok is false without a
// valid session (or ticket); err is reserved for failures to find out.
type Authenticator interface {
	// SessionUser is the user of the request's session. workspaceID is set
	// on a workspace's own host: a session handed over to it counts there.
	SessionUser(r *http.Request, workspaceID string) (userID string, ok bool, err error)
	// Handoff makes a one-time ticket that hands the request's dashboard
	// session over to workspaceID's host.
	Handoff(r *http.Request, workspaceID string) (ticket string, ok bool, err error)
	// Redeem uses up a ticket on workspaceID's host and returns the cookie
	// of the session it hands over.
	Redeem(ctx context.Context, ticket, workspaceID string) (cookie *http.Cookie, ok bool, err error)
}

// Workspaces is the part of the workspace service layer the proxy uses.
type Workspaces interface {
	Get(ctx context.Context, id string) (workspace.Workspace, error)
	SetDesired(ctx context.Context, id string, desired workspace.DesiredState, by workspace.Cause) (workspace.Workspace, error)
	Running(ctx context.Context, ownerID string) ([]workspace.Workspace, error)
}

// ActivityMarker records that a workspace is in use.
type ActivityMarker interface {
	Mark(workspaceID string)
}

// Options configures the proxy.
type Options struct {
	Sites Sites
	// SessionCookie is the name of CodeHub's session cookie, never forwarded.
	SessionCookie string
	// TrustedProxies are the peers whose X-Forwarded-* headers are kept.
	TrustedProxies []netip.Prefix
	// UpstreamToken, when set, gives the upstream token of a workspace's
	// run, sent as code-server's session cookie in place of any the client
	// sent.
	UpstreamToken func(workspaceID, runID string) string
	// RouteTTL is how long a running workspace's owner and upstream are
	// reused without asking the database and the backend again; 0 means 1 s.
	RouteTTL time.Duration
	// Registerer receives the proxy's metrics.
	Registerer prometheus.Registerer
	// Audit, when set, records the long-lived connections the proxy ends
	// because their session ended.
	Audit audit.Recorder
	// RecheckInterval is how often Run checks the sessions of long-lived
	// connections again; 0 means DefaultRecheckInterval.
	RecheckInterval time.Duration
	// Ports, when set with Shares, connects to the ports of running
	// workspaces; without them port addresses answer 404.
	Ports PortDialer
	// Shares reads the share levels of ports.
	Shares PortShares
	// MaxPortShare is the widest share level a port may have in force;
	// empty means ports.Owner (see PortShareCap).
	MaxPortShare ports.Level
}

// Proxy is the http.Handler for workspace traffic.
type Proxy struct {
	logger     hclog.Logger
	opts       Options
	auth       Authenticator
	workspaces Workspaces
	upstreams  controller.Upstreams
	activity   ActivityMarker
	metrics    *metrics
	routes     routeCache
	reads      singleflight.Group
	rp         *httputil.ReverseProxy
	portProxy  *httputil.ReverseProxy
	// portTransport carries the port proxy's requests.
	portTransport *upstreamTransport
	transport     *upstreamTransport
	buffers       *bufferPool
	// conns is the server's listener, when the proxy may take plain
	// connections over (Listen).
	conns *Listener
	// watch holds the long-lived connections whose sessions Run checks.
	watch watch
}

// New builds the proxy with one shared transport for every upstream.
func New(logger hclog.Logger, opts Options, auth Authenticator, ws Workspaces, ups controller.Upstreams, act ActivityMarker) (*Proxy, error) {
	if opts.RouteTTL == 0 {
		opts.RouteTTL = time.Second
	}
	if opts.RecheckInterval == 0 {
		opts.RecheckInterval = DefaultRecheckInterval
	}
	if opts.Registerer == nil {
		opts.Registerer = prometheus.NewRegistry()
	}
	m, err := newMetrics(opts.Registerer)
	if err != nil {
		return nil, fmt.Errorf("register proxy metrics: %w", err)
	}
	p := &Proxy{
		logger: logger, opts: opts, auth: auth, workspaces: ws, upstreams: ups, activity: act,
		metrics: m, routes: routeCache{ttl: opts.RouteTTL, entries: map[string]route{}},
		transport: newUpstreamTransport(), buffers: &bufferPool{},
		watch: watch{groups: map[string]*credentialGroup{}},
	}
	p.rp = &httputil.ReverseProxy{
		Rewrite:        p.rewrite,
		Transport:      p.transport,
		ModifyResponse: p.modifyResponse,
		ErrorHandler:   p.upstreamError,
		BufferPool:     p.buffers,
		ErrorLog:       logger.StandardLogger(&hclog.StandardLoggerOptions{ForceLevel: hclog.Debug}),
	}
	p.portProxy = p.newPortProxy()
	return p, nil
}

// bufferPool reuses the copy buffers of response bodies; without it every
// proxied response allocates (and zeroes) 32 KiB. The pool holds array
// pointers, which an interface holds without allocating, so that a Put
// costs no allocation either.
type bufferPool struct{ pool sync.Pool }

const copyBufferSize = 32 << 10

func (b *bufferPool) Get() []byte {
	if buf, ok := b.pool.Get().(*[copyBufferSize]byte); ok {
		return buf[:]
	}
	return new([copyBufferSize]byte)[:]
}

func (b *bufferPool) Put(buf []byte) {
	if cap(buf) == copyBufferSize {
		b.pool.Put((*[copyBufferSize]byte)(buf[:copyBufferSize]))
	}
}

// target is where one request goes, carried from ServeHTTP to Rewrite.
type target struct {
	id string
	// port is set for a port's address ({port}--{id}): the request goes
	// to that port of the workspace, through the agent.
	port     int
	hostport string
	// token is the upstream token to send; empty without upstream auth.
	token   string
	path    string
	rawPath string
	prefix  string
	// onHost: the request came to the workspace's own host (subdomain
	// mode), where sessions handed over to that host count.
	onHost bool
	// user is the authenticated owner the request is served for.
	user string
	// name is the workspace's name, which a branded workbench shows.
	name string
	// tunnel: a connection the API serves with an API token (HoldTunnel).
	tunnel bool
	// brand: the answer may be a workbench page, to be branded.
	brand bool
	// share is a port's stored share level.
	share ports.Level
	// rejudged is set once a failed upstream sent the request back to the
	// workspace's state.
	rejudged bool
	// in, rec and cancel are set on ReverseProxy's path: the request as
	// it came, its recorder, and what ends its exchange with the
	// workspace, for an answer that turns out to be long-lived.
	in     *http.Request
	rec    *responseRecorder
	cancel context.CancelFunc
}

type targetKey struct{}

// site is what the request's host or path names: the workspace id, or
// the PortLabel of a port. Sessions handed over to a host are bound to it.
func (t target) site() string {
	if t.port != 0 {
		return PortLabel(t.id, t.port)
	}
	return t.id
}

// ServeHTTP answers a request addressed to a workspace.
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	rec := &responseRecorder{ResponseWriter: w, start: start}
	defer func() {
		if rec.kept {
			return
		}
		p.metrics.requests.inc(rec.status)
		// A WebSocket's duration is its session's, not a response time.
		if !rec.upgraded {
			p.metrics.duration.Observe(time.Since(start).Seconds())
		}
	}()
	t, ok := p.locate(rec, r)
	if !ok {
		return
	}
	if p.signOut(rec, r, t) {
		return
	}
	if t.onHost && t.path == HandoffPath {
		p.redeem(rec, r, t)
		return
	}
	if t.port != 0 {
		p.servePort(rec, r, t)
		return
	}
	rec.activity, rec.workspaceID = p.activity, t.id
	p.serve(rec, r, t)
}

// signOut sends code-server's own "Sign out" (shown under password auth)
// to the dashboard's sign-out page. code-server would clear a cookie the
// browser never holds and land back in the workbench, so the click would
// do nothing visible.
func (p *Proxy) signOut(w http.ResponseWriter, r *http.Request, t target) bool {
	if !p.isSignOut(r, t) {
		return false
	}
	http.Redirect(w, r, p.opts.Sites.DashboardURL()+"logout", http.StatusSeeOther)
	return true
}

// isSignOut reports code-server's own "Sign out", which signOut answers.
func (p *Proxy) isSignOut(r *http.Request, t target) bool {
	return p.opts.UpstreamToken != nil && t.port == 0 && t.path == "/logout" && r.Method == http.MethodGet
}

// placement is what where makes of a request's address.
type placement int

const (
	// placed: the request goes to the target's workspace.
	placed placement = iota
	// unplaced: no workspace is named.
	unplaced
	// elsewhere: subdomain mode serves the workspace on its own host.
	elsewhere
	// slashless: the workspace root lacks its trailing slash.
	slashless
)

// where finds the workspace id and the upstream path of a request.
func (p *Proxy) where(r *http.Request) (target, placement) {
	if id, ok := p.opts.Sites.WorkspaceFromHost(r.Host); ok {
		return target{id: id, path: r.URL.Path, rawPath: r.URL.RawPath, onHost: true}, placed
	}
	if id, port, ok := p.opts.Sites.PortFromHost(r.Host); ok {
		return target{id: id, port: port, path: r.URL.Path, rawPath: r.URL.RawPath, onHost: true}, placed
	}
	prefix := p.opts.Sites.PathPrefix("")
	rest, ok := strings.CutPrefix(r.URL.Path, prefix)
	if !ok {
		return target{}, unplaced
	}
	label, tail, hasSlash := strings.Cut(rest, "/")
	id, port := label, 0
	if !ValidID(id) {
		if id, port, ok = ParsePortLabel(label); !ok {
			return target{}, unplaced
		}
	}
	switch {
	case p.opts.Sites.SubdomainMode():
		// Served here, the workspace's pages would share the dashboard's
		// origin, which subdomain mode exists to keep them from.
		return target{id: id, port: port, path: "/" + tail}, elsewhere
	case !hasSlash:
		return target{id: id, port: port}, slashless
	}
	// Both are slices of the request's path: no copies on every request.
	t := target{id: id, port: port, path: rest[len(label):], prefix: r.URL.Path[:len(prefix)+len(label)]}
	if r.URL.RawPath != "" {
		t.rawPath = strings.TrimPrefix(r.URL.RawPath, t.prefix)
	}
	return t, placed
}

// locate finds the workspace id and the upstream path of a request; it
// answers the request itself when there is nothing to proxy.
func (p *Proxy) locate(w http.ResponseWriter, r *http.Request) (target, bool) {
	t, pl := p.where(r)
	switch pl {
	case unplaced:
		p.notFound(w, r)
	case elsewhere:
		p.handoff(w, r, t.site(), t.path)
	case slashless:
		// code-server resolves its assets relative to the page: the
		// workspace root must end in a slash.
		u := *r.URL
		u.Path += "/"
		u.RawPath = ""
		http.Redirect(w, r, u.RequestURI(), http.StatusPermanentRedirect)
	}
	return t, pl == placed
}

func (p *Proxy) serve(w *responseRecorder, r *http.Request, t target) {
	ctx := r.Context()
	hostOf := ""
	if t.onHost {
		hostOf = t.id
	}
	userID, ok, err := p.auth.SessionUser(r, hostOf)
	if err != nil {
		p.internal(w, r, "authenticate", err)
		return
	}
	if !ok {
		p.unauthenticated(w, r, t.id)
		return
	}
	t.user = userID
	if strings.HasPrefix(t.path, ownPrefix) {
		p.own(w, r, t)
		return
	}
	if rt, ok := p.routes.get(t.id); ok {
		if rt.owner != userID {
			p.forbidden(w, r)
			return
		}
		t.hostport, t.token, t.name = rt.upstream, rt.token, rt.name
		p.forward(w, r, t)
		return
	}
	ws, err := p.lookup(ctx, t.id)
	if errors.Is(err, workspace.ErrNotFound) {
		p.notFound(w, r)
		return
	}
	if err != nil {
		p.internal(w, r, "get workspace", err)
		return
	}
	if ws.OwnerID != userID {
		p.forbidden(w, r)
		return
	}
	v := decideFor(ws, isNavigation(r))
	if r.Method == http.MethodPost && (v == verdictArchived || v == verdictNotStarted) && p.startRequested(r, t.id) {
		p.startFromPage(w, r, ws)
		return
	}
	p.answer(w, r, t, ws, v)
}

// lookup reads a workspace, sharing one read among the concurrent requests
// for it: when a route expires, a page's burst of requests costs one query.
func (p *Proxy) lookup(ctx context.Context, id string) (workspace.Workspace, error) {
	v, err, _ := p.reads.Do(id, func() (any, error) {
		// The read outlives a single caller going away.
		return p.workspaces.Get(context.WithoutCancel(ctx), id)
	})
	if err != nil {
		return workspace.Workspace{}, err
	}
	return v.(workspace.Workspace), nil
}

func (p *Proxy) answer(w *responseRecorder, r *http.Request, t target, ws workspace.Workspace, v verdict) {
	if t.port == 0 && v != verdictProxy && v != verdictWakeAndProxy && p.refuseWorkbench(w, r, ws, v) {
		return
	}
	switch v {
	case verdictProxy:
		p.resolveAndForward(w, r, t, ws)
	case verdictWakeAndProxy:
		if !p.wake(w, r, ws) {
			return
		}
		p.resolveAndForward(w, r, t, ws)
	case verdictWake:
		if !p.wake(w, r, ws) {
			return
		}
		why := stoppedWords(ws, time.Now())
		ws.DesiredState = workspace.DesiredRunning
		if !p.unavailable(w, r, ws) {
			pg := p.startingPage(ws)
			pg.Detail = why
			render(w, r, pg)
		}
	case verdictStarting:
		if !p.unavailable(w, r, ws) {
			render(w, r, p.startingPage(ws))
		}
	case verdictArchived:
		render(w, r, page{Status: http.StatusServiceUnavailable, Code: CodeArchived,
			Title: ws.Name + " is archived", Message: stoppedWords(ws, time.Now()),
			Detail:      "Its home directory is stored in the archive. Restoring it takes a moment.",
			StartButton: "Restore and start", Dashboard: p.opts.Sites.DashboardURL()})
	case verdictNotStarted:
		render(w, r, page{Status: http.StatusServiceUnavailable, Code: CodeNotStarted,
			Title: ws.Name + " is not running", Message: stoppedWords(ws, time.Now()),
			StartButton: "Start", Dashboard: p.opts.Sites.DashboardURL()})
	case verdictError:
		render(w, r, p.errorPage(ws))
	default:
		p.notFound(w, r)
	}
}

// unavailable answers with the unavailable page, and returns true, when the
// workspace's home sits on a node that cannot serve it: starting would
// only wait, and the user should know for what.
func (p *Proxy) unavailable(w http.ResponseWriter, r *http.Request, ws workspace.Workspace) bool {
	msg, away := workspace.Unavailable(ws)
	if _, moving := workspace.Moving(ws); !away || moving && ws.ErrorReason == nil {
		// A home leaving its node shows the moving page instead.
		return false
	}
	render(w, r, page{Status: http.StatusServiceUnavailable, Code: CodeUnavailable,
		Title:   ws.Name + " is unavailable",
		Message: "Its files are on a machine that cannot serve them right now. Nothing is lost: the workspace opens again once the machine is back, or an administrator moves it.",
		Detail:  msg, Dashboard: p.opts.Sites.DashboardURL()})
	return true
}

func (p *Proxy) errorPage(ws workspace.Workspace) page {
	detail := "reason: unknown"
	if ws.ErrorReason != nil {
		detail = "reason: " + *ws.ErrorReason
	}
	if ws.ErrorMessage != nil && *ws.ErrorMessage != "" {
		detail += " — " + *ws.ErrorMessage
	}
	return page{Status: http.StatusServiceUnavailable, Code: CodeWorkspaceError,
		Title:   ws.Name + " failed",
		Message: "This workspace is in an error state and needs an administrator to recover it (" + detail + ").",
		Detail:  detail, Dashboard: p.opts.Sites.DashboardURL()}
}

func (p *Proxy) startingPage(ws workspace.Workspace) page {
	if move, ok := workspace.Moving(ws); ok && ws.ErrorReason == nil {
		// A move (an evacuated node) is a start that takes longer; the
		// user did nothing wrong and loses nothing.
		return page{Status: http.StatusServiceUnavailable, Code: CodeStarting,
			Title:   ws.Name + " is moving to another machine",
			Message: "Its files are being moved to another machine. This page opens the workspace when it is ready.",
			Detail:  move, Poll: true, Dashboard: p.opts.Sites.DashboardURL()}
	}
	msg, failure := startingWords(ws)
	return page{Status: http.StatusServiceUnavailable, Code: CodeStarting,
		Title: "Starting " + ws.Name, Message: msg, Failure: failure,
		Poll: true, Dashboard: p.opts.Sites.DashboardURL()}
}

// wake asks for the workspace to run. It answers the request itself and
// returns false when the wake could not be recorded.
func (p *Proxy) wake(w *responseRecorder, r *http.Request, ws workspace.Workspace) bool {
	_, err := p.workspaces.SetDesired(r.Context(), ws.ID, workspace.DesiredRunning, workspace.CauseUser)
	switch {
	case err == nil:
		p.metrics.wakes.WithLabelValues("started").Inc()
		return true
	case errors.Is(err, workspace.ErrLimitExceeded):
		p.metrics.wakes.WithLabelValues("limit").Inc()
		p.limitPage(w, r, ws)
		return false
	case errors.Is(err, workspace.ErrInvalidState):
		// An operation began between our read and the write; it will be
		// followed by the starting page.
		p.metrics.wakes.WithLabelValues("conflict").Inc()
		render(w, r, p.startingPage(ws))
		return false
	}
	p.metrics.wakes.WithLabelValues("error").Inc()
	p.internal(w, r, "wake workspace", err)
	return false
}

func (p *Proxy) limitPage(w http.ResponseWriter, r *http.Request, ws workspace.Workspace) {
	running, err := p.workspaces.Running(r.Context(), ws.OwnerID)
	if err != nil {
		p.logger.Warn("list running workspaces", "error", err)
	}
	links := make([]runningLink, 0, len(running))
	for _, o := range running {
		// Stop leads to the dashboard, which asks before it stops: a form
		// here could not reach the API, whose CSRF check (api/csrf.go)
		// refuses posts from a workspace's origin in subdomain mode, and a
		// stop the proxy took itself would let any page on one
		// workspace's origin stop the owner's others.
		stop := p.opts.Sites.DashboardURL() + "?" + url.Values{"stop": {o.ID}, "open": {ws.ID}}.Encode()
		links = append(links, runningLink{Name: o.Name, URL: p.opts.Sites.WorkspaceURL(o.ID), StopURL: stop})
	}
	render(w, r, page{Status: http.StatusTooManyRequests, Code: CodeLimitExceeded,
		Title:   "Too many running workspaces",
		Message: "Starting " + ws.Name + " would exceed the running limit. Stop one of your running workspaces first:",
		Running: links, Dashboard: p.opts.Sites.DashboardURL()})
}

// startRequested reports a same-origin form post of the start button.
func (p *Proxy) startRequested(r *http.Request, id string) bool {
	if !strings.EqualFold(r.Header.Get("Origin"), p.opts.Sites.WorkspaceOrigin(id)) {
		return false
	}
	r.Body = http.MaxBytesReader(nil, r.Body, 1024)
	return r.PostFormValue(startAction) == "start"
}

func (p *Proxy) startFromPage(w *responseRecorder, r *http.Request, ws workspace.Workspace) {
	if !p.wake(w, r, ws) {
		return
	}
	http.Redirect(w, r, r.URL.RequestURI(), http.StatusSeeOther)
}

func (p *Proxy) resolveAndForward(w *responseRecorder, r *http.Request, t target, ws workspace.Workspace) {
	hostport, err := p.upstreams.Resolve(r.Context(), ws.ID)
	if err != nil {
		p.logger.Debug("resolve upstream", "workspace_id", ws.ID, "error", err)
		p.badGateway(w, r)
		return
	}
	rt := route{owner: ws.OwnerID, upstream: hostport, name: ws.Name}
	if p.opts.UpstreamToken != nil {
		rt.token = p.opts.UpstreamToken(ws.ID, ws.RunID)
	}
	p.routes.put(ws.ID, rt)
	t.hostport, t.token, t.name = rt.upstream, rt.token, rt.name
	p.forward(w, r, t)
}

func (p *Proxy) forward(w *responseRecorder, r *http.Request, t target) {
	if isWebSocketUpgrade(r) {
		if !p.sameOrigin(r, t.id) {
			render(w, r, page{Status: http.StatusForbidden, Code: CodeForbidden, Title: "Forbidden",
				Message: "WebSocket connections from another origin are refused.", Dashboard: p.opts.Sites.DashboardURL()})
			return
		}
		w.watchSocket(r)
		p.metrics.websockets.Inc()
		defer p.metrics.websockets.Dec()
	}
	// A GET is activity only as a page load, which is what brand tells:
	// the hot path reads the Fetch Metadata headers once.
	t.brand = isWorkbenchLoad(r)
	if t.brand || (r.Method != http.MethodGet && isActivity(r)) {
		w.mark()
	}
	if isPlain(r) && !t.brand {
		p.forwardPlain(w, r, &t)
		return
	}
	// t travels to rewrite and, on failure, to upstreamError.
	p.serveHeld(p.rp, w, r, t)
}

// serveHeld proxies r to t through rp while the watch holds it: the watch
// ends a long-lived answer through the request's context, the workspace's
// side closes, and with it the client's.
func (p *Proxy) serveHeld(rp http.Handler, w *responseRecorder, r *http.Request, t target) {
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	defer func() { p.release(w.held) }()
	t.in, t.rec, t.cancel = r, w, cancel
	if r.Body != nil && r.Body != http.NoBody {
		// A workspace may answer before it has read the body (an upload
		// reporting progress); without this, the server would stop
		// reading the client's body at the answer's first flush.
		_ = http.NewResponseController(w).EnableFullDuplex()
	}
	rp.ServeHTTP(w, r.WithContext(context.WithValue(ctx, targetKey{}, t)))
}

func (p *Proxy) rewrite(pr *httputil.ProxyRequest) {
	t := pr.In.Context().Value(targetKey{}).(target)
	pr.Out.URL.Scheme = "http"
	pr.Out.URL.Host = t.hostport
	pr.Out.URL.Path = t.path
	pr.Out.URL.RawPath = t.rawPath
	// The workspace sees the host the browser used, so absolute links and
	// its own Origin checks match what the user sees.
	pr.Out.Host = pr.In.Host
	setForwarded(pr, p.opts.TrustedProxies)
	if t.prefix != "" {
		pr.Out.Header.Set("X-Forwarded-Prefix", t.prefix)
	}
	stripCredentials(pr.Out.Header, p.isCredentialCookie)
	if t.brand {
		// A page to brand must come uncompressed.
		pr.Out.Header.Del("Accept-Encoding")
	}
	if p.opts.UpstreamToken == nil {
		return
	}
	// One Cookie header, as browsers send it (RFC 6265 §5.4).
	cookie := CodeServerCookie + "=" + t.token
	if kept := pr.Out.Header.Get("Cookie"); kept != "" {
		cookie = kept + "; " + cookie
	}
	pr.Out.Header.Set("Cookie", cookie)
}

// modifyResponse brands a workbench page a person opened (brandResponse),
// and drops any attempt of a workspace to set CodeHub's session cookie,
// which in path mode would share the dashboard's cookie jar, or
// code-server's, which only the proxy holds.
func (p *Proxy) modifyResponse(res *http.Response) error {
	if res.StatusCode == http.StatusSwitchingProtocols && !switchAsked(res) {
		// ReverseProxy refuses the switch too, but only an error here
		// makes it close the connection, which would otherwise stay open.
		return fmt.Errorf("workspace switched to %q unasked", res.Header.Get("Upgrade"))
	}
	t, _ := res.Request.Context().Value(targetKey{}).(target)
	if t.brand {
		if err := brandResponse(res, t); err != nil {
			return err
		}
	}
	if t.rec != nil && (res.StatusCode == http.StatusSwitchingProtocols || streams(res)) {
		rec, cancel := t.rec, t.cancel
		rec.held = p.hold(t.in, &t, func(reason endReason) {
			rec.ended.Store(uint32(reason))
			cancel()
		})
	}
	cookies := res.Header.Values("Set-Cookie")
	if len(cookies) == 0 {
		return nil
	}
	kept := p.keptCookies(cookies)
	res.Header["Set-Cookie"] = kept
	if len(kept) == 0 {
		res.Header.Del("Set-Cookie")
	}
	return nil
}

// keptCookies is the Set-Cookie values of a workspace's answer less those
// of credential cookies; it returns cookies itself when all are kept.
func (p *Proxy) keptCookies(cookies []string) []string {
	var kept []string
	for i, c := range cookies {
		// A pair without "=" is a nameless cookie whose value browsers
		// send alone, where servers read it as a cookie of that name.
		pair, _, _ := strings.Cut(c, ";")
		name, _, _ := strings.Cut(pair, "=")
		if !p.isCredentialCookie(strings.TrimSpace(name)) {
			if kept != nil {
				kept = append(kept, c)
			}
			continue
		}
		if kept == nil {
			kept = append(make([]string, 0, len(cookies)), cookies[:i]...)
		}
	}
	if kept == nil {
		return cookies
	}
	return kept
}

func (p *Proxy) upstreamError(w http.ResponseWriter, r *http.Request, err error) {
	t, _ := r.Context().Value(targetKey{}).(target)
	p.failed(w, r, t, err)
}

// failed answers a request the workspace did not answer. r is the
// request as it went to the workspace or, on the plain path, as it came:
// same context, method and headers, less CodeHub's credentials on the
// first; its URL is not used again.
func (p *Proxy) failed(w http.ResponseWriter, r *http.Request, t target, err error) {
	p.routes.forget(t.id)
	p.transport.forget(t.hostport)
	if f, ok := p.upstreams.(forgetter); ok {
		f.Forget(t.id)
	}
	if errors.Is(err, context.Canceled) {
		// The client went away; nobody reads an answer.
		w.WriteHeader(499)
		return
	}
	p.logger.Debug("upstream failed", "workspace_id", t.id, "error", err)
	p.metrics.upstreamErrors.Inc()
	rec, ok := w.(*responseRecorder)
	if !ok || t.rejudged || (r.Method != http.MethodGet && r.Method != http.MethodHead) {
		p.badGateway(w, r)
		return
	}
	// The route came from the cache and the workspace may have stopped
	// since: answer from its current state (a stopped workspace wakes and
	// shows the starting page) rather than with a dead end. Nothing of the
	// response is written yet, and the request has no body to replay.
	ws, err := p.lookup(r.Context(), t.id)
	switch {
	case errors.Is(err, workspace.ErrNotFound):
		p.notFound(w, r)
		return
	case err != nil:
		p.badGateway(w, r)
		return
	case ws.OwnerID != t.user:
		p.forbidden(w, r)
		return
	}
	t.rejudged = true
	p.answer(rec, r, t, ws, decideFor(ws, isNavigation(r)))
}

// forgetter is a resolver that caches addresses: a dead one is dropped, so
// that a workspace started again since is found at its new address rather
// than the cached one until it expires.
type forgetter interface{ Forget(wsID string) }

func (p *Proxy) badGateway(w http.ResponseWriter, r *http.Request) {
	render(w, r, page{Status: http.StatusBadGateway, Code: CodeUpstreamUnavailable,
		Title:     "Workspace not reachable",
		Message:   "The workspace is running but did not answer. It may still be starting up or have just stopped; try again in a few seconds.",
		Dashboard: p.opts.Sites.DashboardURL()})
}

func (p *Proxy) unauthenticated(w http.ResponseWriter, r *http.Request, id string) {
	if wantsHTML(r) && (r.Method == http.MethodGet || r.Method == http.MethodHead) {
		w.Header().Set("Cache-Control", "no-store")
		if p.opts.Sites.SubdomainMode() {
			// The dashboard's host hands the session over, after a login
			// if there is none.
			p.askHandoff(w, r, id)
			return
		}
		http.Redirect(w, r, p.opts.Sites.LoginURL(r.URL.RequestURI()), http.StatusFound)
		return
	}
	render(w, r, page{Status: http.StatusUnauthorized, Code: CodeUnauthenticated, Title: "Log in",
		Message: "Log in to open this workspace.", Dashboard: p.opts.Sites.DashboardURL()})
}

func (p *Proxy) forbidden(w http.ResponseWriter, r *http.Request) {
	render(w, r, page{Status: http.StatusForbidden, Code: CodeForbidden, Title: "Forbidden",
		Message: "This workspace belongs to another user.", Dashboard: p.opts.Sites.DashboardURL()})
}

func (p *Proxy) notFound(w http.ResponseWriter, r *http.Request) {
	render(w, r, page{Status: http.StatusNotFound, Code: CodeNotFound, Title: "Not found",
		Message: "There is no such workspace.", Dashboard: p.opts.Sites.DashboardURL()})
}

func (p *Proxy) internal(w http.ResponseWriter, r *http.Request, what string, err error) {
	// A request whose client went away (its context ended) is no fault.
	level := hclog.Error
	if errors.Is(err, context.Canceled) {
		level = hclog.Debug
	}
	p.logger.Log(level, "proxy request failed", "step", what, "error", err)
	render(w, r, page{Status: http.StatusInternalServerError, Code: CodeInternal, Title: "Something went wrong",
		Message: "CodeHub could not handle this request. Try again shortly.", Dashboard: p.opts.Sites.DashboardURL()})
}

// route is a running workspace's owner and upstream, reused briefly so a
// burst of requests (page assets, long polls) costs one lookup.
type route struct {
	owner    string
	upstream string
	name     string
	// token is the workspace's upstream token, derived once per route.
	token string
	// share is a port's stored share level, on a port's route (keyed by
	// its PortLabel).
	share   ports.Level
	expires time.Time
}

type routeCache struct {
	ttl     time.Duration
	mu      sync.RWMutex
	entries map[string]route
}

func (c *routeCache) get(id string) (route, bool) {
	c.mu.RLock()
	rt, ok := c.entries[id]
	c.mu.RUnlock()
	if !ok || time.Now().After(rt.expires) {
		return route{}, false
	}
	return rt, true
}

func (c *routeCache) put(id string, rt route) {
	rt.expires = time.Now().Add(c.ttl)
	c.mu.Lock()
	defer c.mu.Unlock()
	// Expired entries are dropped on write so the map stays the size of
	// the set of recently used workspaces.
	if len(c.entries) >= 1024 {
		now := time.Now()
		for k, v := range c.entries {
			if now.After(v.expires) {
				delete(c.entries, k)
			}
		}
	}
	c.entries[id] = rt
}

func (c *routeCache) forget(id string) {
	c.mu.Lock()
	delete(c.entries, id)
	c.mu.Unlock()
}
