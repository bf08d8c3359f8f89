package proxy

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/codehub-io/codehub/audit"
	"github.com/codehub-io/codehub/ports"
	"github.com/codehub-io/codehub/workspace"
)

// A request's session is checked when the request comes, but some
// proxied connections outlive their request by hours: a WebSocket (the
// workbench, its terminals), a connection the proxy took over, an answer
// that streams (Server-Sent Events, a long poll). The proxy holds each of
// them in its watch while it lasts, under the credential it was opened
// with, and Run checks every credential again, with the ownership of the
// workspace, once per RecheckInterval: one check per credential, however
// many connections it opened. A connection whose session ended, or whose
// workspace its user no longer owns, ends at once, in both directions.
// A check that fails (the database is unreachable) ends nothing: the
// next one tries again.

// DefaultRecheckInterval is how often the sessions of long-lived
// connections are checked again. With the authenticator's own cache of
// 2 s, a connection ends at most about 4 s after its session.
const DefaultRecheckInterval = 2 * time.Second

// recheckTimeout bounds one credential's or one workspace's check.
const recheckTimeout = 5 * time.Second

// endReason is why the watch ended a connection; zero while it lives.
type endReason uint32

const (
	// endSession: the session is no longer valid (logged out, expired,
	// ended by a password change, or its user was disabled).
	endSession endReason = iota + 1
	// endOwner: the user no longer owns the workspace.
	endOwner
	// endDeleted: the workspace was deleted.
	endDeleted
	// endShare: the port is no longer shared with the user (or with
	// visitors who are not logged in).
	endShare
)

// label is the reason as the metric's label.
func (r endReason) label() string {
	switch r {
	case endSession:
		return "session"
	case endOwner:
		return "owner"
	case endShare:
		return "share"
	}
	return "deleted"
}

// words is the reason as the audit log and a WebSocket's close frame say
// it.
func (r endReason) words() string {
	switch r {
	case endSession:
		return "session ended"
	case endOwner:
		return "workspace no longer owned by the user"
	case endShare:
		return "port no longer shared"
	}
	return "workspace deleted"
}

// sessionCheck is the answer of the authenticator for one credential.
type sessionCheck struct {
	user string
	ok   bool
	err  error
}

// ownerCheck is the owner of one workspace as the proxy reads it.
type ownerCheck struct {
	owner string
	err   error
}

// endFor decides whether a connection held for user ends, and why. A
// failure to find out keeps the connection: a database that does not
// answer must not cut every user off.
func endFor(user string, s sessionCheck, o ownerCheck) (endReason, bool) {
	switch {
	case s.err != nil:
		return 0, false
	case !s.ok || s.user != user:
		return endSession, true
	case errors.Is(o.err, workspace.ErrNotFound):
		return endDeleted, true
	case o.err != nil:
		return 0, false
	case o.owner != user:
		return endOwner, true
	}
	return 0, false
}

// shareCheck is the stored share level of one port as the proxy reads it.
type shareCheck struct {
	level ports.Level
	err   error
}

// endForPort decides whether a connection to a port held for user (empty:
// a visitor without a session) ends, and why: when the port's level, under
// the cap, no longer lets in who the connection's credential now shows.
// A failure to find out keeps the connection, as in endFor.
func endForPort(user string, s sessionCheck, o ownerCheck, l shareCheck, limit ports.Level) (endReason, bool) {
	switch {
	case s.err != nil, l.err != nil:
		return 0, false
	case errors.Is(o.err, workspace.ErrNotFound):
		return endDeleted, true
	case o.err != nil:
		return 0, false
	}
	viewer := ""
	if user != "" && s.ok && s.user == user {
		viewer = user
	}
	if ports.Decide(l.level, limit, ports.ViewerOf(viewer, o.owner)) == ports.Allow {
		return 0, false
	}
	if user != "" && viewer == "" {
		return endSession, true
	}
	return endShare, true
}

// held is one long-lived connection in the watch.
type held struct {
	group       *credentialGroup
	user        string
	workspaceID string
	// port is set on a connection to a port's address.
	port    int
	name    string
	address string
	// end closes the connection in both directions; it must not block.
	end func(endReason)
	// state is live, released (its request ended) or ended (by the
	// watch): whichever comes first wins.
	state atomic.Uint32
}

const (
	heldLive uint32 = iota
	heldReleased
	heldEnded
)

// credentialGroup is the connections opened with one credential.
type credentialGroup struct {
	key string
	// probe carries the credential, and nothing else, to the
	// authenticator.
	probe  *http.Request
	hostOf string
	// tunnel: the credential is an API token (TokenAuthenticator).
	tunnel bool
	conns  map[*held]struct{}
}

// watch holds the long-lived connections by credential.
type watch struct {
	mu     sync.Mutex
	groups map[string]*credentialGroup
}

// hold puts the connection that r opened for t's user in the watch; end
// closes it. The caller releases it when the connection ends.
func (p *Proxy) hold(r *http.Request, t *target, end func(endReason)) *held {
	hostOf := ""
	if t.onHost {
		hostOf = t.site()
	}
	cookies := p.credentialCookies(r.Header["Cookie"])
	authorization := r.Header.Get("Authorization")
	key := hostOf + "\n" + cookies + "\n" + authorization
	if t.tunnel {
		// A tunnel is judged by its API token alone.
		cookies, key = "", "tunnel\n"+authorization
	}
	h := &held{user: t.user, workspaceID: t.id, port: t.port, name: t.name, address: p.clientAddress(r), end: end}
	w := &p.watch
	w.mu.Lock()
	defer w.mu.Unlock()
	g := w.groups[key]
	if g == nil {
		probe := &http.Request{Method: http.MethodGet, URL: &url.URL{Path: "/"}, Host: r.Host, Header: http.Header{}, RemoteAddr: r.RemoteAddr}
		if cookies != "" {
			probe.Header.Set("Cookie", cookies)
		}
		if authorization != "" {
			probe.Header.Set("Authorization", authorization)
		}
		g = &credentialGroup{key: key, probe: probe, hostOf: hostOf, tunnel: t.tunnel, conns: map[*held]struct{}{}}
		w.groups[key] = g
	}
	h.group = g
	g.conns[h] = struct{}{}
	return h
}

// release takes h out of the watch once its connection ended by itself.
func (p *Proxy) release(h *held) {
	if h == nil {
		return
	}
	h.state.CompareAndSwap(heldLive, heldReleased)
	p.watch.remove(h)
}

func (w *watch) remove(h *held) {
	w.mu.Lock()
	defer w.mu.Unlock()
	g := h.group
	delete(g.conns, h)
	if len(g.conns) == 0 && w.groups[g.key] == g {
		delete(w.groups, g.key)
	}
}

// snapshot is the watch's groups and their connections at one moment.
func (w *watch) snapshot() []heldGroup {
	w.mu.Lock()
	defer w.mu.Unlock()
	groups := make([]heldGroup, 0, len(w.groups))
	for _, g := range w.groups {
		conns := make([]*held, 0, len(g.conns))
		for h := range g.conns {
			conns = append(conns, h)
		}
		groups = append(groups, heldGroup{probe: g.probe, hostOf: g.hostOf, tunnel: g.tunnel, conns: conns})
	}
	return groups
}

type heldGroup struct {
	probe  *http.Request
	hostOf string
	tunnel bool
	conns  []*held
}

// credentialCookies is the part of a request's Cookie lines that
// authenticates to CodeHub.
func (p *Proxy) credentialCookies(lines []string) string {
	var b strings.Builder
	for _, line := range lines {
		for part := range strings.SplitSeq(line, ";") {
			part = strings.TrimSpace(part)
			name, _, _ := strings.Cut(part, "=")
			if name = strings.TrimSpace(name); name != p.opts.SessionCookie && name != HostSessionCookie {
				continue
			}
			if b.Len() > 0 {
				b.WriteString("; ")
			}
			b.WriteString(part)
		}
	}
	return b.String()
}

// clientAddress is the address the audit log records for r's client: the
// peer's, or behind a trusted proxy the last one it forwarded for.
func (p *Proxy) clientAddress(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	if !trustedPeer(r.RemoteAddr, p.opts.TrustedProxies) {
		return host
	}
	hops := r.Header.Values("X-Forwarded-For")
	if len(hops) == 0 {
		return host
	}
	last := hops[len(hops)-1]
	if i := strings.LastIndexByte(last, ','); i >= 0 {
		last = last[i+1:]
	}
	if last = strings.TrimSpace(last); last != "" {
		return last
	}
	return host
}

// Run checks the sessions of the long-lived connections every
// RecheckInterval until ctx ends, and ends those whose session ended.
func (p *Proxy) Run(ctx context.Context) error {
	t := time.NewTicker(p.opts.RecheckInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
			p.recheck(ctx)
		}
	}
}

// ending is a connection the watch ends, and why.
type ending struct {
	h      *held
	reason endReason
}

// recheck checks every credential in the watch once, and the owner of
// every workspace with a connection whose session holds, and ends the
// connections endFor rules out. A check that fails ends the round.
func (p *Proxy) recheck(ctx context.Context) {
	var ends []ending
	owners := map[string]ownerCheck{}
	shares := map[string]shareCheck{}
	for _, g := range p.watch.snapshot() {
		s := p.checkSession(ctx, g)
		if ctx.Err() != nil {
			return
		}
		for _, h := range g.conns {
			if h.port != 0 {
				if s.err != nil {
					continue
				}
				o := p.ownerOf(ctx, owners, h.workspaceID)
				l := p.shareOf(ctx, shares, h.workspaceID, h.port)
				if reason, end := endForPort(h.user, s, o, l, p.portCap()); end {
					ends = append(ends, ending{h, reason})
				}
				continue
			}
			var o ownerCheck
			if s.err == nil && s.ok && s.user == h.user {
				o = p.ownerOf(ctx, owners, h.workspaceID)
			}
			if reason, end := endFor(h.user, s, o); end {
				ends = append(ends, ending{h, reason})
			}
		}
		if s.err != nil {
			// The database is likely unreachable: the other credentials
			// would each wait for it too, so they wait for the next round
			// (in another order) instead.
			p.logger.Warn("check the session of long-lived connections again", "connections", len(g.conns), "error", s.err)
			break
		}
	}
	p.end(ctx, ends)
}

func (p *Proxy) checkSession(ctx context.Context, g heldGroup) sessionCheck {
	ctx, cancel := context.WithTimeout(ctx, recheckTimeout)
	defer cancel()
	if g.tunnel {
		ta, ok := p.auth.(TokenAuthenticator)
		if !ok {
			return sessionCheck{}
		}
		user, ok, err := ta.TokenUser(g.probe.WithContext(ctx))
		return sessionCheck{user: user, ok: ok, err: err}
	}
	user, ok, err := p.auth.SessionUser(g.probe.WithContext(ctx), g.hostOf)
	return sessionCheck{user: user, ok: ok, err: err}
}

// ownerOf is the owner of workspace id, read once per recheck: from the
// route cache when it is fresh, else from the workspace service.
func (p *Proxy) ownerOf(ctx context.Context, owners map[string]ownerCheck, id string) ownerCheck {
	if o, ok := owners[id]; ok {
		return o
	}
	var o ownerCheck
	if rt, ok := p.routes.get(id); ok {
		o.owner = rt.owner
	} else {
		ctx, cancel := context.WithTimeout(ctx, recheckTimeout)
		ws, err := p.lookup(ctx, id)
		cancel()
		o = ownerCheck{owner: ws.OwnerID, err: err}
		if err != nil && !errors.Is(err, workspace.ErrNotFound) {
			p.logger.Warn("check the owner of a workspace with long-lived connections", "workspace_id", id, "error", err)
		}
	}
	owners[id] = o
	return o
}

// shareOf is the stored share level of a port, read once per recheck and
// never from a cache: a level lowered ends connections within a round.
func (p *Proxy) shareOf(ctx context.Context, shares map[string]shareCheck, id string, port int) shareCheck {
	key := PortLabel(id, port)
	if l, ok := shares[key]; ok {
		return l
	}
	ctx, cancel := context.WithTimeout(ctx, recheckTimeout)
	level, err := p.opts.Shares.PortShare(ctx, id, port)
	cancel()
	if err != nil {
		p.logger.Warn("check the share level of a port with long-lived connections", "workspace_id", id, "port", port, "error", err)
	}
	l := shareCheck{level: level, err: err}
	shares[key] = l
	return l
}

// endKey is what one audit event covers: the connections one credential
// held to one workspace, ended for one reason in one recheck.
type endKey struct {
	group  *credentialGroup
	id     string
	reason endReason
}

// end closes the connections and records them.
func (p *Proxy) end(ctx context.Context, ends []ending) {
	counts := map[endKey]int{}
	first := map[endKey]*held{}
	for _, e := range ends {
		if !e.h.state.CompareAndSwap(heldLive, heldEnded) {
			continue
		}
		p.watch.remove(e.h)
		e.h.end(e.reason)
		p.metrics.revoked.WithLabelValues(e.reason.label()).Inc()
		k := endKey{e.h.group, e.h.workspaceID, e.reason}
		if counts[k] == 0 {
			first[k] = e.h
		}
		counts[k]++
	}
	for k, n := range counts {
		h := first[k]
		p.logger.Info("ended long-lived workspace connections", "user_id", h.user, "workspace_id", h.workspaceID,
			"reason", k.reason.label(), "connections", n)
		if p.opts.Audit == nil {
			continue
		}
		p.opts.Audit.Record(ctx, audit.Event{
			Actor:  audit.Actor{UserID: h.user, Address: h.address},
			Action: audit.ActionConnectionEnd, Outcome: audit.Success,
			Target: audit.Target{Type: audit.TargetWorkspace, ID: h.workspaceID, Name: h.name},
			Detail: fmt.Sprintf("%s: %d connection(s) closed", k.reason.words(), n),
		})
	}
}
