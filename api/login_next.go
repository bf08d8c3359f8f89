package api

import (
	"context"
	"net/http"
	"strings"

	"github.com/codehub-io/codehub/proxy"
)

// loginNext is where a login sends the browser afterwards, given the next
// it was asked for: a path on the dashboard's origin (proxy.LocalTarget,
// the rule the session handoff to a workspace host follows too), other
// than the login page itself, so a login never loops. In subdomain mode an
// address on a workspace's own host is kept as well, with that workspace's
// id: the caller keeps it only for the workspace's owner. Anything else is
// "/".
func loginNext(sites proxy.Sites, next string) (target, workspaceID string) {
	if target := proxy.LocalTarget(sites.PublicOrigin(), next); target != "/" {
		if path, _, _ := strings.Cut(strings.SplitN(target, "#", 2)[0], "?"); path == "/login" {
			return "/", ""
		}
		return target, ""
	}
	if target, id, ok := sites.WorkspaceTarget(next); ok {
		return target, id
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
