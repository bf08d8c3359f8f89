package proxy

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"net/http"
	"net/url"
	"strings"
)

// HandoffPath is where a workspace's own host redeems a handoff ticket,
// and where the dashboard's host issues one; the workspace's program never
// sees requests for it.
const HandoffPath = "/_codehub/handoff"

// HandoffCookie holds, on a workspace's own host, the nonce of the handoff
// that host asked for. Only the browser that asked has it, so a ticket
// carrying that nonce is redeemed in that browser alone. Like the session
// cookies it is never forwarded, and a workspace cannot set it.
const HandoffCookie = "codehub_handoff"

// handoffCookieAge covers the round trip to the dashboard's host with a
// login on the way.
const handoffCookieAge = 600

// askHandoff starts a handoff from a workspace's own host without a
// session: it gives this browser a fresh nonce in a host-only cookie and
// sends it to the dashboard's host, which issues a ticket bound to that
// nonce (the OAuth "state" pattern). A ticket opened in any other browser
// then finds no matching cookie and is refused, so nobody can log a victim
// in to their own workspace's host with a link.
func (p *Proxy) askHandoff(w http.ResponseWriter, r *http.Request, id string) {
	p.askHandoffTo(w, r, id, r.URL.RequestURI())
}

// askHandoffTo is askHandoff that lands on next, a path of the host.
func (p *Proxy) askHandoffTo(w http.ResponseWriter, r *http.Request, id, next string) {
	nonce, err := handoffNonce()
	if err != nil {
		p.internal(w, r, "make handoff nonce", err)
		return
	}
	http.SetCookie(w, &http.Cookie{
		Name: HandoffCookie, Value: nonce, Path: HandoffPath, MaxAge: handoffCookieAge,
		HttpOnly: true, Secure: p.opts.Sites.Secure(), SameSite: http.SameSiteLaxMode,
	})
	q := url.Values{"state": {nonce}, "next": {next}}
	http.Redirect(w, r, p.opts.Sites.PublicOrigin()+p.opts.Sites.PathPrefix(id)+HandoffPath+"?"+q.Encode(), http.StatusFound)
}

func handoffNonce() (string, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return base64.RawURLEncoding.EncodeToString(b), nil
}

// handoff answers a request for /w/{id}/… on the dashboard's host. A page
// there goes to the same path on the workspace's own host, which starts
// the handoff (askHandoff) when it has no session. The workspace host's
// request for a ticket, /w/{id}/_codehub/handoff?state=…&next=…, gets one
// for the dashboard session, bound to that workspace, and goes back to
// the workspace host's HandoffPath with the ticket and the state. A
// visitor without a session logs in first and comes back here. The
// redirects are temporary: the server may be switched back to path mode.
func (p *Proxy) handoff(w http.ResponseWriter, r *http.Request, id, path string) {
	origin := p.opts.Sites.WorkspaceOrigin(id)
	u := url.URL{Path: path, RawQuery: r.URL.RawQuery}
	if raw, ok := strings.CutPrefix(r.URL.RawPath, p.opts.Sites.PathPrefix(id)); ok {
		u.RawPath = raw
	}
	if r.Method != http.MethodGet {
		http.Redirect(w, r, origin+u.RequestURI(), http.StatusTemporaryRedirect)
		return
	}
	w.Header().Set("Cache-Control", "no-store")
	q := r.URL.Query()
	state := q.Get("state")
	if path != HandoffPath || state == "" {
		http.Redirect(w, r, origin+u.RequestURI(), http.StatusFound)
		return
	}
	next := LocalTarget(origin, q.Get("next"))
	ticket, ok, err := p.auth.Handoff(r, id)
	if err != nil {
		p.internal(w, r, "hand session over", err)
		return
	}
	if !ok {
		http.Redirect(w, r, p.opts.Sites.LoginURL(r.URL.RequestURI()), http.StatusFound)
		return
	}
	back := url.Values{"ticket": {ticket}, "state": {state}, "next": {next}}
	http.Redirect(w, r, origin+HandoffPath+"?"+back.Encode(), http.StatusSeeOther)
}

// redeem turns a handoff ticket into a session of the workspace's host and
// sends the browser on to the page it asked for. The ticket's state must
// be the nonce this browser holds for this host; a ticket opened anywhere
// else is refused, and left to expire, before anything is redeemed.
func (p *Proxy) redeem(w http.ResponseWriter, r *http.Request, t target) {
	h := w.Header()
	h.Set("Cache-Control", "no-store")
	// The ticket is in this URL: no page that follows may be told it.
	h.Set("Referrer-Policy", "no-referrer")
	if r.Method != http.MethodGet {
		p.notFound(w, r)
		return
	}
	q := r.URL.Query()
	if !sameNonce(r, q.Get("state")) {
		render(w, r, page{Status: http.StatusUnauthorized, Code: CodeUnauthenticated, Title: "Sign-in link refused",
			Message:   "This sign-in link was not asked for by this browser. Open the workspace from the dashboard.",
			Dashboard: p.opts.Sites.DashboardURL()})
		return
	}
	cookie, ok, err := p.auth.Redeem(r.Context(), q.Get("ticket"), t.site())
	if err != nil {
		p.internal(w, r, "redeem session handoff", err)
		return
	}
	if !ok {
		render(w, r, page{Status: http.StatusUnauthorized, Code: CodeUnauthenticated, Title: "Link expired",
			Message:   "This sign-in link was already used or has expired. Open the workspace again from the dashboard.",
			Dashboard: p.opts.Sites.DashboardURL()})
		return
	}
	http.SetCookie(w, &http.Cookie{Name: HandoffCookie, Path: HandoffPath, MaxAge: -1,
		HttpOnly: true, Secure: p.opts.Sites.Secure(), SameSite: http.SameSiteLaxMode})
	http.SetCookie(w, cookie)
	// A handoff never sends the browser to another site.
	http.Redirect(w, r, LocalTarget(p.opts.Sites.WorkspaceOrigin(t.site()), q.Get("next")), http.StatusSeeOther)
}

// sameNonce reports whether state is the handoff nonce the request's
// browser holds.
func sameNonce(r *http.Request, state string) bool {
	c, err := r.Cookie(HandoffCookie)
	return err == nil && state != "" && subtle.ConstantTimeCompare([]byte(c.Value), []byte(state)) == 1
}
