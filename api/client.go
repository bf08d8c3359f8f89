package api

import (
	"net"
	"net/http"
	"net/netip"
	"strings"
)

// clientAddress names the client a request comes from, for the login
// limits: the connection's peer, or, when that peer is one of the trusted
// proxies, the nearest address in X-Forwarded-For that is not one of them.
// Anyone else's X-Forwarded-For is ignored, so a guesser cannot pose as a
// stream of fresh addresses. IPv6 clients are counted by their /64, which
// one host usually holds whole.
func clientAddress(r *http.Request, trusted []netip.Prefix) string {
	peer := remoteIP(r.RemoteAddr)
	addr := peer
	if peer.IsValid() && isTrusted(peer, trusted) {
		hops := strings.Split(strings.Join(r.Header.Values("X-Forwarded-For"), ","), ",")
		for i := len(hops) - 1; i >= 0; i-- {
			hop, err := netip.ParseAddr(strings.TrimSpace(hops[i]))
			if err != nil {
				break
			}
			addr = hop.Unmap()
			if !isTrusted(addr, trusted) {
				break
			}
		}
	}
	if !addr.IsValid() {
		return "unknown"
	}
	if addr.Is6() {
		p, _ := addr.Prefix(64)
		return p.String()
	}
	return addr.String()
}

func remoteIP(remote string) netip.Addr {
	host, _, err := net.SplitHostPort(remote)
	if err != nil {
		host = remote
	}
	a, err := netip.ParseAddr(host)
	if err != nil {
		return netip.Addr{}
	}
	return a.Unmap()
}

func isTrusted(a netip.Addr, trusted []netip.Prefix) bool {
	for _, p := range trusted {
		if p.Contains(a) {
			return true
		}
	}
	return false
}
