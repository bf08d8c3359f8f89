package proxy

import (
	"fmt"
	"net"
	"net/http"
	"net/url"
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

// WorkspaceOrigin is the origin a workspace's pages run under.
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
	host = strings.ToLower(host)
	base := s.subdomainBase
	if _, _, err := net.SplitHostPort(base); err != nil {
		// The base has no port: compare without the request's port.
		if h, _, err := net.SplitHostPort(host); err == nil {
			host = h
		}
	}
	id, ok := strings.CutSuffix(host, "."+base)
	if !ok || !ValidID(id) {
		return "", false
	}
	return id, true
}

// Proxies reports a request the server hands to the proxy as it is: one to
// a workspace's own host, or one under /w/ whose path ServeMux would not
// clean (and redirect) first.
func (s Sites) Proxies(r *http.Request) bool {
	if _, ok := s.WorkspaceFromHost(r.Host); ok {
		return true
	}
	p := r.URL.EscapedPath()
	if r.Method == http.MethodConnect || !strings.HasPrefix(p, s.PathPrefix("")) {
		return false
	}
	return !strings.Contains(p, "//") && !strings.Contains(p, "/./") && !strings.Contains(p, "/../") &&
		!strings.HasSuffix(p, "/.") && !strings.HasSuffix(p, "/..")
}
