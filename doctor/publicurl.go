package doctor

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"
	"time"

	"github.com/codehub-io/codehub/config"
)

// Resolver looks host names up, as net.Resolver does.
type Resolver interface {
	LookupHost(ctx context.Context, host string) ([]string, error)
}

var defaultResolver Resolver = net.DefaultResolver

// browserResolved reports names every browser sends to loopback itself,
// whatever DNS says.
func browserResolved(host string) bool {
	return host == "localhost" || strings.HasSuffix(host, ".localhost")
}

// WildcardProbe is a name under the subdomain base that no workspace has:
// it resolves only through a wildcard record.
func WildcardProbe(base string) string {
	label := make([]byte, 6)
	_, _ = rand.Read(label)
	return "codehub-check-" + hex.EncodeToString(label) + "." + base
}

// CheckWildcard looks a probe name under base up. Names under localhost
// need no record and are not looked up (probe is empty then).
func CheckWildcard(ctx context.Context, r Resolver, base string) (probe string, err error) {
	if browserResolved(base) {
		return "", nil
	}
	probe = WildcardProbe(base)
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	_, err = r.LookupHost(ctx, probe)
	return probe, err
}

// PublicURL checks that users can reach what public_url names: its host
// resolves, in subdomain mode a wildcard under the base resolves too, and
// where something answers there over https its certificate covers the
// names users open. Nothing answering yet is no failure: the doctor runs
// before the first start as well.
func PublicURL(ctx context.Context, cfg *config.Config, opts Options) []Finding {
	opts = opts.withDefaults()
	u, err := url.Parse(cfg.PublicURL)
	if err != nil || u.Host == "" {
		return []Finding{{Check: "public_url", Status: Fail, Detail: fmt.Sprintf("public_url %q is not a URL", cfg.PublicURL),
			Fix: "set public_url to the URL users open, e.g. https://codehub.example.com", Doc: DocDeployment}}
	}
	host := u.Hostname()
	out := []Finding{resolves(ctx, opts, "public_url", host,
		"give "+host+" a DNS record pointing at the front (or the server), or fix public_url")}
	if out[0].Status == OK {
		out = append(out, answers(ctx, opts, "public_url.tls", u, host))
	}
	base := ""
	if cfg.Proxy != nil {
		base = cfg.Proxy.SubdomainBase
	}
	if base == "" {
		return out
	}
	probe, err := CheckWildcard(ctx, opts.Resolver, base)
	switch {
	case probe == "":
		return append(out, Finding{Check: "subdomain.wildcard", Status: OK, Detail: "*." + base + " is loopback in every browser"})
	case err != nil:
		return append(out, Finding{Check: "subdomain.wildcard", Status: Fail,
			Detail: fmt.Sprintf("%s does not resolve here: %v", probe, err),
			Fix:    fmt.Sprintf("give *.%s a DNS record pointing at the front, with a certificate covering it; check with: getent hosts %s (where users' DNS differs, run the doctor where they resolve)", base, probe),
			Doc:    DocTLS})
	}
	out = append(out, Finding{Check: "subdomain.wildcard", Status: OK, Detail: "*." + base + " resolves"})
	pu := *u
	pu.Host = probe
	if port := u.Port(); port != "" {
		pu.Host = net.JoinHostPort(probe, port)
	}
	return append(out, answers(ctx, opts, "subdomain.tls", &pu, probe))
}

func resolves(ctx context.Context, opts Options, check, host, fix string) Finding {
	if net.ParseIP(host) != nil {
		return Finding{Check: check, Status: OK, Detail: host + " is an address"}
	}
	if browserResolved(host) {
		return Finding{Check: check, Status: OK, Detail: host + " is loopback in every browser"}
	}
	ctx, cancel := context.WithTimeout(ctx, opts.Timeout)
	defer cancel()
	addrs, err := opts.Resolver.LookupHost(ctx, host)
	if err != nil {
		return Finding{Check: check, Status: Fail, Detail: fmt.Sprintf("%s does not resolve here: %v", host, err), Fix: fix, Doc: DocDeployment}
	}
	return Finding{Check: check, Status: OK, Detail: fmt.Sprintf("%s resolves to %s", host, strings.Join(addrs, ", "))}
}

// answers tries an https URL's TLS handshake as a browser would: a
// certificate that does not cover name (or that no trusted authority
// signed) fails; nothing listening is only reported. Plain http has no
// certificate to check.
func answers(ctx context.Context, opts Options, check string, u *url.URL, name string) Finding {
	if u.Scheme != "https" {
		return Finding{Check: check, Status: Skip, Detail: u.Scheme + " URL: no certificate to check"}
	}
	addr := u.Host
	if u.Port() == "" {
		addr = net.JoinHostPort(u.Hostname(), "443")
	}
	ctx, cancel := context.WithTimeout(ctx, opts.Timeout)
	defer cancel()
	d := tls.Dialer{Config: &tls.Config{ServerName: name, MinVersion: tls.VersionTLS12}}
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err == nil {
		conn.Close()
		return Finding{Check: check, Status: OK, Detail: fmt.Sprintf("%s presents a trusted certificate for %s", addr, name)}
	}
	var hostErr x509.HostnameError
	var authErr x509.UnknownAuthorityError
	var invalid x509.CertificateInvalidError
	var verify *tls.CertificateVerificationError
	if errors.As(err, &hostErr) || errors.As(err, &authErr) || errors.As(err, &invalid) || errors.As(err, &verify) {
		return Finding{Check: check, Status: Fail, Detail: fmt.Sprintf("%s: %v", addr, err),
			Fix: "give the front a certificate, from an authority users' browsers trust, covering " + name, Doc: DocTLS}
	}
	return Finding{Check: check, Status: Skip, Detail: fmt.Sprintf("nothing answers at %s yet: %v", addr, err)}
}
