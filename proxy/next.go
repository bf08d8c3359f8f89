package proxy

import (
	"net/url"
	"strings"
)

// LocalTarget is where a redirect after a login or a session handoff may
// send the browser, given the next it was asked for: next resolved against
// origin ("scheme://host[:port]") and returned as a path (with its query
// and fragment) when it stays on that origin, or "/" when it would leave
// it or is not a URL.
//
// Whitespace and control characters, which browsers drop from a URL before
// reading it ("/\t/evil" becomes "//evil"), and backslashes, which they
// read as slashes, refuse next outright; so does a result that a browser
// would read as another host ("//host").
func LocalTarget(origin, next string) string {
	u, ok := parseNext(origin, next)
	if !ok || !strings.EqualFold(u.Scheme+"://"+u.Host, origin) {
		return "/"
	}
	target := u.RequestURI()
	if u.Fragment != "" {
		target += "#" + u.EscapedFragment()
	}
	if !strings.HasPrefix(target, "/") || strings.HasPrefix(target, "//") {
		return "/"
	}
	return target
}

// WorkspaceTarget returns next and its workspace's id when next is an
// address on a workspace's own host (subdomain mode), checked as
// LocalTarget checks; the caller keeps it only for the workspace's owner.
func (s Sites) WorkspaceTarget(next string) (string, string, bool) {
	u, ok := parseNext(s.PublicOrigin(), next)
	if !ok {
		return "", "", false
	}
	id, ok := s.WorkspaceFromHost(u.Host)
	if !ok || !strings.EqualFold(u.Scheme+"://"+u.Host, s.WorkspaceOrigin(id)) {
		return "", "", false
	}
	return u.String(), id, true
}

// parseNext resolves next against origin, refusing what browsers would
// read otherwise than net/url does.
func parseNext(origin, next string) (*url.URL, bool) {
	if next == "" || strings.ContainsFunc(next, func(r rune) bool { return r <= ' ' || r == 0x7f || r == '\\' }) {
		return nil, false
	}
	base, err := url.Parse(origin + "/")
	if err != nil {
		return nil, false
	}
	u, err := base.Parse(next)
	if err != nil || u.User != nil || u.Opaque != "" {
		return nil, false
	}
	return u, true
}
