package proxy

import (
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
)

// ValidID reports whether id has the shape of a workspace id: a lowercase
// ULID, 26 characters of Crockford's base32 (digits and letters other than
// i, l, o and u). It runs on every proxied request, hence no regexp.
func ValidID(id string) bool {
	if len(id) != 26 {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		switch {
		case '0' <= c && c <= '9':
		case 'a' <= c && c <= 'z' && c != 'i' && c != 'l' && c != 'o' && c != 'u':
		default:
			return false
		}
	}
	return true
}

// PortLabel names port port of workspace id where the proxy serves it: the
// first label of its host in subdomain mode ({port}--{id}.{subdomain_base})
// and its path segment in path mode (/w/{port}--{id}/). A workspace id is
// 26 characters without "-", so a port label is never one, and the
// dashboard's own host is never one either (it would need a workspace id
// in it). The port comes first so a list of a workspace's ports reads in
// the order people say them ("8000 of my workspace"), and "--" keeps the
// label a valid DNS label (RFC 1123) that no other name CodeHub makes uses.
func PortLabel(id string, port int) string {
	return strconv.Itoa(port) + "--" + id
}

// ParsePortLabel reads a PortLabel: a port of 1 to 65535 in decimal
// without leading zeros, "--" and a workspace id. Anything else, a
// workspace id alone included, is not one.
func ParsePortLabel(label string) (id string, port int, ok bool) {
	digits, id, found := strings.Cut(label, "--")
	if !found || len(digits) == 0 || len(digits) > 5 || digits[0] == '0' || !ValidID(id) {
		return "", 0, false
	}
	for i := 0; i < len(digits); i++ {
		if digits[i] < '0' || digits[i] > '9' {
			return "", 0, false
		}
		port = port*10 + int(digits[i]-'0')
	}
	if port > 65535 {
		return "", 0, false
	}
	return id, port, true
}

// Sites knows where workspaces are served: under {public_url}/w/{id}/, or
// at {scheme}://{id}.{subdomain_base}/ in subdomain mode.
type Sites struct {
	public        *url.URL
	subdomainBase string
}

// NewSites parses the public URL; subdomainBase is a host (with an optional
// port) or empty for path mode.
func NewSites(publicURL, subdomainBase string) (Sites, error) {
	u, err := url.Parse(publicURL)
	if err != nil {
		return Sites{}, fmt.Errorf("parse public url: %w", err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return Sites{}, fmt.Errorf("public url %q: want http(s)://host[:port]", publicURL)
	}
	if u.Path != "" && u.Path != "/" {
		return Sites{}, fmt.Errorf("public url %q: CodeHub must be served at the root of its host", publicURL)
	}
	u.Path = ""
	return Sites{public: u, subdomainBase: strings.ToLower(subdomainBase)}, nil
}

// PublicOrigin is the dashboard's origin.
func (s Sites) PublicOrigin() string { return s.public.Scheme + "://" + s.public.Host }

// Secure reports whether codehub is served over https.
func (s Sites) Secure() bool { return s.public.Scheme == "https" }

// SubdomainMode reports whether each workspace has its own host.
func (s Sites) SubdomainMode() bool { return s.subdomainBase != "" }

// LoginURL is the dashboard login page that returns to next afterwards.
func (s Sites) LoginURL(next string) string {
	return s.PublicOrigin() + "/login?next=" + url.QueryEscape(next)
}

// DashboardURL is the dashboard's home page.
func (s Sites) DashboardURL() string { return s.PublicOrigin() + "/" }

// PathPrefix is the path under which a workspace is served in path mode;
// PathPrefix("") is the prefix of all of them.
func (s Sites) PathPrefix(id string) string { return "/w/" + id }

// WorkspaceURL is the address users open a workspace at (trailing slash).
func (s Sites) WorkspaceURL(id string) string {
	if s.SubdomainMode() {
		return s.WorkspaceOrigin(id) + "/"
	}
	return s.PublicOrigin() + s.PathPrefix(id) + "/"
}

// PortURL is the address of port port of workspace id (trailing slash).
func (s Sites) PortURL(id string, port int) string {
	return s.WorkspaceURL(PortLabel(id, port))
}

// WorkspaceOrigin is the origin a workspace's pages run under. Given a
// PortLabel, it is the origin of that port's pages.
func (s Sites) WorkspaceOrigin(id string) string {
	if !s.SubdomainMode() {
		return s.PublicOrigin()
	}
	host := id + "." + s.subdomainBase
	if _, _, err := net.SplitHostPort(s.subdomainBase); err != nil && s.public.Port() != "" {
		// Workspaces are served by the dashboard's listener, so a base
		// without a port shares the public URL's.
		host = net.JoinHostPort(host, s.public.Port())
	}
	return s.public.Scheme + "://" + host
}

// WorkspaceFromHost returns the workspace id a request's Host names in
// subdomain mode.
func (s Sites) WorkspaceFromHost(host string) (string, bool) {
	if !s.SubdomainMode() {
		return "", false
	}
	id, ok := s.labelOf(host)
	if !ok || !ValidID(id) {
		return "", false
	}
	return id, true
}

// PortFromHost returns the workspace id and port a request's Host names in
// subdomain mode.
func (s Sites) PortFromHost(host string) (id string, port int, ok bool) {
	if !s.SubdomainMode() {
		return "", 0, false
	}
	label, ok := s.labelOf(host)
	if !ok {
		return "", 0, false
	}
	return ParsePortLabel(label)
}

// labelOf is the first label of host under the subdomain base.
func (s Sites) labelOf(host string) (string, bool) {
	host = strings.ToLower(host)
	base := s.subdomainBase
	if _, _, err := net.SplitHostPort(base); err != nil {
		// The base has no port: compare without the request's port.
		if h, _, err := net.SplitHostPort(host); err == nil {
			host = h
		}
	}
	label, ok := strings.CutSuffix(host, "."+base)
	if !ok || strings.Contains(label, ".") {
		return "", false
	}
	return label, true
}

// Proxies reports a request the server hands to the proxy as it is: one to
// a workspace's own host, or one under /w/ whose path ServeMux would not
// clean (and redirect) first.
func (s Sites) Proxies(r *http.Request) bool {
	if _, ok := s.WorkspaceFromHost(r.Host); ok {
		return true
	}
	if _, _, ok := s.PortFromHost(r.Host); ok {
		return true
	}
	p := r.URL.EscapedPath()
	if r.Method == http.MethodConnect || !strings.HasPrefix(p, s.PathPrefix("")) {
		return false
	}
	return !strings.Contains(p, "//") && !strings.Contains(p, "/./") && !strings.Contains(p, "/../") &&
		!strings.HasSuffix(p, "/.") && !strings.HasSuffix(p, "/..")
}
