package proxy

import (
	"net"
	"net/http"
	"net/http/httputil"
	"net/netip"
	"strings"
)

// CodeServerCookie is code-server's session cookie. With upstream auth the
// proxy alone sets it, to the workspace's upstream token.
const CodeServerCookie = "code-server-session"

// HostSessionCookie carries the session of one workspace's own host in
// subdomain mode (see HandoffPath). Like the dashboard's, it is never
// forwarded.
const HostSessionCookie = "codehub_host_session"

// isCredentialCookie reports a cookie that authenticates to CodeHub (the
// dashboard's session or a workspace host's, or a handoff's nonce), or to
// code-server when the proxy holds its token.
func (p *Proxy) isCredentialCookie(name string) bool {
	return name == p.opts.SessionCookie || name == HostSessionCookie || name == HandoffCookie ||
		(p.opts.UpstreamToken != nil && name == CodeServerCookie)
}

// stripCredentials removes what authenticates the user to CodeHub from a
// request bound for a workspace: the cookies isCredential names (other
// cookies belong to the workspace and stay) and the Authorization header.
func stripCredentials(h http.Header, isCredential func(name string) bool) {
	h.Del("Authorization")
	lines := h.Values("Cookie")
	if len(lines) == 0 {
		return
	}
	var kept []string
	for _, line := range lines {
		for part := range strings.SplitSeq(line, ";") {
			part = strings.TrimSpace(part)
			if part == "" {
				continue
			}
			name, _, _ := strings.Cut(part, "=")
			if isCredential(strings.TrimSpace(name)) {
				continue
			}
			kept = append(kept, part)
		}
	}
	h.Del("Cookie")
	if len(kept) > 0 {
		h.Set("Cookie", strings.Join(kept, "; "))
	}
}

// trustedPeer reports whether the immediate peer is a configured proxy
// whose forwarding headers may be believed.
func trustedPeer(remoteAddr string, trusted []netip.Prefix) bool {
	if len(trusted) == 0 {
		return false
	}
	host, _, err := net.SplitHostPort(remoteAddr)
	if err != nil {
		host = remoteAddr
	}
	addr, err := netip.ParseAddr(host)
	if err != nil {
		return false
	}
	addr = addr.Unmap()
	for _, p := range trusted {
		if p.Contains(addr) {
			return true
		}
	}
	return false
}

// setForwarded sets X-Forwarded-For/-Host/-Proto on the outgoing request.
// ReverseProxy has already dropped those three on Out, but no other
// X-Forwarded-* header; the incoming values are carried over only from a
// trusted proxy.
func setForwarded(pr *httputil.ProxyRequest, trusted []netip.Prefix) {
	in := pr.In.Header
	// The prefix is the proxy's own to set, in path mode only.
	pr.Out.Header.Del("X-Forwarded-Prefix")
	if !trustedPeer(pr.In.RemoteAddr, trusted) {
		for name := range pr.Out.Header {
			if strings.HasPrefix(name, "X-Forwarded-") {
				delete(pr.Out.Header, name)
			}
		}
		pr.SetXForwarded()
		return
	}
	if prior := in.Values("X-Forwarded-For"); len(prior) > 0 {
		pr.Out.Header["X-Forwarded-For"] = []string{strings.Join(prior, ", ")}
	}
	pr.SetXForwarded()
	if v := in.Get("X-Forwarded-Host"); v != "" {
		pr.Out.Header.Set("X-Forwarded-Host", v)
	}
	if v := in.Get("X-Forwarded-Proto"); v == "http" || v == "https" {
		pr.Out.Header.Set("X-Forwarded-Proto", v)
	}
}

// isWebSocketUpgrade reports a request asking to switch to WebSocket.
func isWebSocketUpgrade(r *http.Request) bool {
	return headerHasToken(r.Header, "Connection", "upgrade") && strings.EqualFold(r.Header.Get("Upgrade"), "websocket")
}

// switchAsked reports whether a 101 answer switches to the protocol its
// request asked for.
func switchAsked(res *http.Response) bool {
	if res.Request == nil {
		return false
	}
	asked := upgradeType(res.Request.Header)
	return asked != "" && strings.EqualFold(asked, upgradeType(res.Header))
}

// upgradeType is the protocol a message's Upgrade header names, or empty
// when its Connection header does not ask for an upgrade.
func upgradeType(h http.Header) string {
	if !headerHasToken(h, "Connection", "upgrade") {
		return ""
	}
	return h.Get("Upgrade")
}

func headerHasToken(h http.Header, name, token string) bool {
	for _, v := range h.Values(name) {
		for t := range strings.SplitSeq(v, ",") {
			if strings.EqualFold(strings.TrimSpace(t), token) {
				return true
			}
		}
	}
	return false
}

// wantsHTML reports whether the client is a browser navigating, which gets
// pages; every other client gets the JSON error envelope.
func wantsHTML(r *http.Request) bool {
	return strings.Contains(r.Header.Get("Accept"), "text/html")
}
