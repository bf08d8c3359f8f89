package api

import (
	"context"
	"net/http"
	"net/url"
	"strings"

	"github.com/codehub-io/codehub/proxy"
)

// loginNext is where a login sends the browser afterwards, given the next
// it was asked for: next resolved against the dashboard's origin, kept when
// it stays on that origin (same scheme and host) as a path, and "/"
// otherwise. The login page itself is "/" too, so a login never loops. In
// subdomain mode an address on a workspace's own host is kept as well, with
// that workspace's id: the caller keeps it only for the workspace's owner.
//
// Whitespace and control characters, which browsers drop from a URL before
// reading it ("/\t/evil" becomes "//evil"), and backslashes, which they
// read as slashes, refuse next outright; so does a result that a browser
// would read as another host ("//host").
func loginNext(sites proxy.Sites, next string) (target, workspaceID string) {
	if next == "" || strings.ContainsFunc(next, func(r rune) bool { return r <= ' ' || r == 0x7f || r == '\\' }) {
		return "/", ""
	}
	base, err := url.Parse(sites.PublicOrigin() + "/")
	if err != nil {
		return "/", ""
	}
	u, err := base.Parse(next)
	if err != nil || u.User != nil || u.Opaque != "" {
		return "/", ""
	}
	origin := u.Scheme + "://" + u.Host
	if strings.EqualFold(origin, sites.PublicOrigin()) {
		if u.Path == "/login" {
			return "/", ""
		}
		target = u.RequestURI()
		if u.Fragment != "" {
			target += "#" + u.EscapedFragment()
		}
		if !strings.HasPrefix(target, "/") || strings.HasPrefix(target, "//") {
			return "/", ""
		}
		return target, ""
	}
	if id, ok := sites.WorkspaceFromHost(u.Host); ok && strings.EqualFold(origin, sites.WorkspaceOrigin(id)) {
		return u.String(), id
	}
	return "/", ""
}

// loginNextFor is loginNext for a logged-in user: an address on a
// workspace's host is kept only when the workspace is theirs.
func (s *Server) loginNextFor(ctx context.Context, userID, next string) string {
	target, id := loginNext(s.sites, next)
	if id == "" {
		return target
	}
	ws, err := s.workspaces.Get(ctx, id)
	if err != nil || ws.OwnerID != userID {
		return "/"
	}
	return target
}

type loginNextView struct {
	Next string `json:"next"`
}

// getLoginNext tells the login page where to go once logged in: the page
// asks rather than judging next itself, so there is one rule.
func (s *Server) getLoginNext(w http.ResponseWriter, r *http.Request) {
	sess, ok := s.requireUser(w, r)
	if !ok {
		return
	}
	w.Header().Set("Cache-Control", "no-store")
	writeJSON(w, http.StatusOK, loginNextView{Next: s.loginNextFor(r.Context(), sess.UserID, r.URL.Query().Get("next"))})
}
