package proxy

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strconv"

	"github.com/hashicorp/go-hclog"

	"github.com/codehub-io/codehub/ports"
	"github.com/codehub-io/codehub/workspace"
)

// A port address ({port}--{id}.{subdomain_base}, or /w/{port}--{id}/ in
// path mode) reaches a TCP port a program of the workspace listens on,
// through the workspace's agent, which dials only its own workspace's
// listeners. Who may reach it is the port's share level (ports.Decide);
// only its owner's requests count as activity or wake the workspace.

// PortDialer connects to a port of a running workspace, from inside the
// workspace.
type PortDialer interface {
	DialPort(ctx context.Context, workspaceID string, port int) (net.Conn, error)
}

// PortShares reads the share level of a workspace's port; a port never
// shared is ports.Owner.
type PortShares interface {
	PortShare(ctx context.Context, workspaceID string, port int) (ports.Level, error)
}

// SignInPath, on a port's host, starts a login handed over to that host
// and then goes to the path in its "next" parameter; the program never
// sees requests for it.
const SignInPath = "/_codehub/signin"

// PortShareCap is the widest share level a port may have in force: the
// operator's configured cap, and ports.Owner in path mode, where a port's
// pages would run on the dashboard's origin with the visitor's session.
func PortShareCap(sites Sites, configured ports.Level) ports.Level {
	if !sites.SubdomainMode() || configured == "" {
		return ports.Owner
	}
	return configured
}

// noActivity is the activity marker of requests from anyone but the
// owner, which never keep a workspace running.
type noActivity struct{}

func (noActivity) Mark(string) {}

// othersVerdict is what a request for a port from someone other than the
// owner gets: the port of a running workspace, or a plain 503 that neither
// wakes the workspace nor tells its state.
func othersVerdict(v verdict) verdict {
	switch v {
	case verdictProxy, verdictWakeAndProxy:
		return verdictProxy
	case verdictGone:
		return verdictGone
	}
	return verdictDown
}

// servePort answers a request for a port's address.
func (p *Proxy) servePort(w *responseRecorder, r *http.Request, t target) {
	if p.opts.Ports == nil || p.opts.Shares == nil {
		p.notFound(w, r)
		return
	}
	ctx := r.Context()
	site := t.site()
	hostOf := ""
	if t.onHost {
		hostOf = site
	}
	user, ok, err := p.auth.SessionUser(r, hostOf)
	if err != nil {
		p.internal(w, r, "authenticate", err)
		return
	}
	if !ok {
		user = ""
	}
	if t.onHost && t.path == SignInPath {
		// Once this host has a session, the browser goes on to next,
		// kept to this host.
		next := LocalTarget(p.opts.Sites.WorkspaceOrigin(site), r.URL.Query().Get("next"))
		if user != "" {
			http.Redirect(w, r, next, http.StatusFound)
			return
		}
		p.askHandoffTo(w, r, site, next)
		return
	}
	t.user = user
	rt, cached := p.routes.get(site)
	var ws workspace.Workspace
	if !cached {
		ws, err = p.lookup(ctx, t.id)
		if errors.Is(err, workspace.ErrNotFound) {
			p.notFound(w, r)
			return
		}
		if err != nil {
			p.internal(w, r, "get workspace", err)
			return
		}
		share, err := p.opts.Shares.PortShare(ctx, t.id, t.port)
		if err != nil {
			p.internal(w, r, "read port share", err)
			return
		}
		rt = route{owner: ws.OwnerID, name: ws.Name, share: share}
	}
	switch ports.Decide(rt.share, p.portCap(), ports.ViewerOf(user, rt.owner)) {
	case ports.LogIn:
		p.unauthenticated(w, r, site)
		return
	case ports.Refuse:
		render(w, r, page{Status: http.StatusForbidden, Code: CodeForbidden, Title: "Forbidden",
			Message: "This port is not shared with you.", Dashboard: p.opts.Sites.DashboardURL()})
		return
	}
	owner := user == rt.owner
	w.workspaceID, w.activity = t.id, ActivityMarker(noActivity{})
	if owner {
		w.activity = p.activity
	}
	t.name, t.share = rt.name, rt.share
	if cached {
		p.forwardPort(w, r, t, owner)
		return
	}
	v := decideFor(ws, isNavigation(r))
	if !owner {
		v = othersVerdict(v)
	}
	if v == verdictProxy {
		// Only a workspace that needs nothing done is cached, so a
		// cached route never skips a wake.
		p.routes.put(site, rt)
	}
	switch v {
	case verdictProxy:
		p.forwardPort(w, r, t, owner)
	case verdictWakeAndProxy:
		if p.wake(w, r, ws) {
			p.forwardPort(w, r, t, owner)
		}
	case verdictDown:
		pg := page{Status: http.StatusServiceUnavailable, Code: CodeNotRunning, Title: "Not available",
			Message: "This address is not available right now. Try again later.", Dashboard: p.opts.Sites.DashboardURL()}
		if user == "" && t.onHost {
			// On a public port the owner may have no session on this host
			// yet, and is then a visitor here: a login makes them the owner,
			// whose page load wakes the workspace.
			pg.SignIn = SignInPath + "?" + url.Values{"next": {r.URL.RequestURI()}}.Encode()
		}
		render(w, r, pg)
	default:
		if r.Method == http.MethodPost && (v == verdictArchived || v == verdictNotStarted) && p.startRequested(r, site) {
			p.startFromPage(w, r, ws)
			return
		}
		p.answer(w, r, t, ws, v)
	}
}

// portCap is the widest share level in force.
func (p *Proxy) portCap() ports.Level {
	return PortShareCap(p.opts.Sites, p.opts.MaxPortShare)
}

// PortShareChanged drops what this proxy remembers of a port, so a new
// share level holds from its next request; other replicas follow within
// their RouteTTL, and open connections at the next recheck.
func (p *Proxy) PortShareChanged(id string, port int) { p.routes.forget(PortLabel(id, port)) }

// MaxPortShare is the widest share level an owner may give a port here.
func (p *Proxy) MaxPortShare() ports.Level { return p.portCap() }

// forwardPort sends the request to the port through the port transport.
func (p *Proxy) forwardPort(w *responseRecorder, r *http.Request, t target, owner bool) {
	if isWebSocketUpgrade(r) {
		// A page of another origin may open a socket with the visitor's
		// cookies; only a public port, which needs none, takes it.
		if t.share != ports.Public && !p.sameOrigin(r, t.site()) {
			render(w, r, page{Status: http.StatusForbidden, Code: CodeForbidden, Title: "Forbidden",
				Message: "WebSocket connections from another origin are refused.", Dashboard: p.opts.Sites.DashboardURL()})
			return
		}
		w.watchSocket(r)
		p.metrics.websockets.Inc()
		defer p.metrics.websockets.Dec()
	}
	if owner && isActivity(r) {
		w.mark()
	}
	if isPlain(r) {
		p.forwardPlain(w, r, &t)
		return
	}
	p.serveHeld(p.portProxy, w, r, t)
}

// rewritePort addresses the request to the port. The URL's host is the
// port's label, which the port transport's dialer reads back; the port
// sees the Host the browser used and the forwarded headers, and never a
// credential of CodeHub's or the workspace's own upstream token.
func (p *Proxy) rewritePort(pr *httputil.ProxyRequest) {
	t := pr.In.Context().Value(targetKey{}).(target)
	pr.Out.URL.Scheme = "http"
	pr.Out.URL.Host = t.site()
	pr.Out.URL.Path = t.path
	pr.Out.URL.RawPath = t.rawPath
	pr.Out.Host = pr.In.Host
	setForwarded(pr, p.opts.TrustedProxies)
	if t.prefix != "" {
		pr.Out.Header.Set("X-Forwarded-Prefix", t.prefix)
	}
	stripCredentials(pr.Out.Header, p.isPortCredentialCookie)
}

// isPortCredentialCookie names the cookies a port never receives: those
// of CodeHub and code-server's session cookie, which carries the upstream
// token wherever a browser could hold it.
func (p *Proxy) isPortCredentialCookie(name string) bool {
	return p.isCredentialCookie(name) || name == CodeServerCookie
}

// portError answers a request the port did not answer, for ReverseProxy.
func (p *Proxy) portError(w http.ResponseWriter, r *http.Request, err error) {
	t, _ := r.Context().Value(targetKey{}).(target)
	p.portFailed(w, r, t, err)
}

// portFailed answers a request for t that the port did not answer.
func (p *Proxy) portFailed(w http.ResponseWriter, r *http.Request, t target, err error) {
	p.routes.forget(t.site())
	p.portTransport.forget(t.site())
	if errors.Is(err, context.Canceled) {
		w.WriteHeader(499)
		return
	}
	p.logger.Debug("port failed", "workspace_id", t.id, "port", t.port, "error", err)
	p.metrics.upstreamErrors.Inc()
	render(w, r, page{Status: http.StatusBadGateway, Code: CodeUpstreamUnavailable,
		Title:     "Port " + strconv.Itoa(t.port) + " not reachable",
		Message:   fmt.Sprintf("Nothing answered on port %d of this workspace. Is the program listening on it?", t.port),
		Dashboard: p.opts.Sites.DashboardURL()})
}

// newPortProxy is the reverse proxy of port addresses: one transport whose
// connections the PortDialer opens, pooled per port, and which writes
// requests without a body itself, as the workbench's does.
func (p *Proxy) newPortProxy() *httputil.ReverseProxy {
	// The URL's host is the port's label; the standard transport, which
	// takes requests with a body, adds ":80".
	transport := newPortTransport(func(ctx context.Context, _, addr string) (net.Conn, error) {
		host, _, err := net.SplitHostPort(addr)
		if err != nil {
			host = addr
		}
		id, port, ok := ParsePortLabel(host)
		if !ok {
			return nil, fmt.Errorf("dial %q: not a port address", addr)
		}
		return p.opts.Ports.DialPort(ctx, id, port)
	})
	p.portTransport = transport
	return &httputil.ReverseProxy{
		Rewrite:        p.rewritePort,
		Transport:      transport,
		ModifyResponse: p.modifyResponse,
		ErrorHandler:   p.portError,
		BufferPool:     p.buffers,
		ErrorLog:       p.logger.StandardLogger(&hclog.StandardLoggerOptions{ForceLevel: hclog.Debug}),
	}
}
