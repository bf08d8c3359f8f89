package config

import (
	"fmt"
	"net"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
)

// parseRetention reads a retention: a Go duration ("720h") or whole days
// ("90d"), which Go's durations do not have.
func parseRetention(text string) (time.Duration, error) {
	if days, ok := strings.CutSuffix(text, "d"); ok {
		n, err := strconv.Atoi(days)
		if err != nil || n < 0 || n > 100*365 {
			return 0, fmt.Errorf("%q is not a number of days", text)
		}
		return time.Duration(n) * 24 * time.Hour, nil
	}
	d, err := time.ParseDuration(text)
	if err != nil {
		return 0, fmt.Errorf(`%q is not a duration; write it like "90d" or "720h"`, text)
	}
	return d, nil
}

// checkIdentity judges how users log in and the audit log's retention.
func (c *Config) checkIdentity(ch *checker) {
	if c.Audit.Retention < time.Hour {
		ch.add("audit.retention", "must be at least 1h")
	}
	o := c.Auth.OIDC
	if !o.Enabled() {
		if o.ClientID != "" || o.ClientSecret.IsSet() || len(o.AllowedGroups) > 0 || len(o.AdminGroups) > 0 {
			ch.add("auth.oidc.issuer", "must be set (in the file or %s) when other auth.oidc settings are", EnvName("auth.oidc.issuer"))
		}
		if !c.Auth.PasswordLogin {
			ch.add("auth.password_login", "cannot be false without auth.oidc: nobody could log in")
		}
		return
	}
	if problem := issuerProblem(o.Issuer); problem != "" {
		ch.add("auth.oidc.issuer", "%s %s", quoted(o.Issuer), problem)
	}
	ch.required("auth.oidc.client_id", o.ClientID)
	ch.required("auth.oidc.client_secret", o.ClientSecret.Reveal())
	if !slices.Contains(o.Scopes, "openid") {
		ch.add("auth.oidc.scopes", `must include "openid"`)
	}
	ch.required("auth.oidc.username_claim", o.UsernameClaim)
	if (len(o.AllowedGroups) > 0 || len(o.AdminGroups) > 0) && o.GroupsClaim == "" {
		ch.add("auth.oidc.groups_claim", "must be set when allowed_groups or admin_groups are")
	}
	for _, f := range []struct {
		path   string
		groups []string
	}{{"auth.oidc.allowed_groups", o.AllowedGroups}, {"auth.oidc.admin_groups", o.AdminGroups}} {
		if slices.Contains(f.groups, "") {
			ch.add(f.path, "must not hold an empty group name")
		}
	}
	ch.required("auth.oidc.label", o.Label)
}

// issuerProblem judges an issuer URL: https, or http to a loopback host
// (a provider on the same machine), with no query or fragment.
func issuerProblem(issuer string) string {
	u, err := url.Parse(issuer)
	if err != nil || u.Host == "" || (u.Scheme != "https" && u.Scheme != "http") {
		return "must be an absolute https:// URL"
	}
	if u.RawQuery != "" || u.Fragment != "" || u.User != nil {
		return "must have no user, query or fragment"
	}
	if u.Scheme == "http" && !loopbackHost(u.Hostname()) {
		return "must use https:// (http:// only for a provider on loopback)"
	}
	return ""
}

func loopbackHost(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
