package proxy

import "net/http"

// TokenAuthenticator tells whose API token (Authorization: Bearer) a
// request carries. The proxy never accepts tokens for its own traffic; it
// checks them again only for tunnels held with HoldTunnel, and ends those
// at once when its Authenticator does not implement this.
type TokenAuthenticator interface {
	TokenUser(r *http.Request) (userID string, ok bool, err error)
}

// HoldTunnel puts a long-lived connection that is not proxied here (an
// SSH tunnel the API serves) in the same watch as the proxy's own: r's API
// token and the user's ownership of the workspace are checked again every
// RecheckInterval, and end is called, once, with the reason in words when
// either no longer holds. The caller calls the returned release when the
// connection ends by itself.
func (p *Proxy) HoldTunnel(r *http.Request, userID, workspaceID, name string, end func(reason string)) (release func()) {
	h := p.hold(r, &target{id: workspaceID, user: userID, name: name, tunnel: true}, func(reason endReason) { end(reason.words()) })
	return func() { p.release(h) }
}
