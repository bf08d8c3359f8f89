package config

import (
	"fmt"
	"net/netip"
	"net/url"
	"strings"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"
)

// A problem is one invalid value, named by its path in the file
// ("workspace.port", "backend.nomad.driver", "proxy.trusted_proxies[1]").
type problem struct {
	path   string
	detail string
}

// origins remembers where values came from, so a problem can point at the
// attribute in the file or name the environment variable that set it.
type origins struct {
	attributes map[string]hcl.Range // attribute paths the file sets
	blocks     map[string]hcl.Range // block paths the file has
	env        map[string]string    // attribute path -> variable that set it
}

func newOrigins() *origins {
	return &origins{attributes: map[string]hcl.Range{}, blocks: map[string]hcl.Range{}, env: map[string]string{}}
}

// recordFile notes every attribute and block of the file by path; a block's
// labels are part of its path ("backend.nomad.address").
func (o *origins) recordFile(body *hclsyntax.Body, prefix string) {
	for name, attr := range body.Attributes {
		o.attributes[joinPath(prefix, name)] = attr.SrcRange
	}
	for _, b := range body.Blocks {
		path := joinPath(prefix, b.Type)
		for _, label := range b.Labels {
			path = joinPath(path, label)
		}
		if _, seen := o.blocks[path]; !seen {
			o.blocks[path] = b.DefRange()
		}
		o.recordFile(b.Body, path)
	}
}

func (o *origins) inFile(path string) bool {
	_, ok := o.attributes[path]
	return ok
}

// nameAttributes prefixes the detail of each diagnostic that points inside
// an attribute with the attribute's path, since HCL's own messages often
// say only what was wrong ("a number is required"), not with what.
func (o *origins) nameAttributes(diags hcl.Diagnostics) {
	for _, d := range diags {
		if d.Subject == nil {
			continue
		}
		for path, r := range o.attributes {
			if r.Filename == d.Subject.Filename && r.ContainsOffset(d.Subject.Start.Byte) {
				d.Detail = path + ": " + d.Detail
				break
			}
		}
	}
}

// subject is the file position to report for path: the attribute itself,
// or else its enclosing block when the file wrote that. A value the
// environment set has no position in the file.
func (o *origins) subject(path string) *hcl.Range {
	if i := strings.IndexByte(path, '['); i >= 0 {
		path = path[:i]
	}
	if _, fromEnv := o.env[path]; fromEnv {
		return nil
	}
	if r, ok := o.attributes[path]; ok {
		return r.Ptr()
	}
	if r, ok := o.blocks[path]; ok {
		return r.Ptr()
	}
	if i := strings.LastIndexByte(path, '.'); i >= 0 {
		if r, ok := o.blocks[path[:i]]; ok {
			return r.Ptr()
		}
	}
	return nil
}

func (o *origins) diagnostics(problems []problem) hcl.Diagnostics {
	var diags hcl.Diagnostics
	for _, p := range problems {
		detail := p.detail
		if name, ok := o.env[p.path]; ok {
			detail += fmt.Sprintf(" (set by %s)", name)
		}
		diags = append(diags, &hcl.Diagnostic{
			Severity: hcl.DiagError,
			Summary:  "Invalid " + p.path,
			Detail:   detail,
			Subject:  o.subject(p.path),
		})
	}
	return diags
}

func joinPath(prefix, name string) string {
	if prefix == "" {
		return name
	}
	return prefix + "." + name
}

// PathModeExposed reports whether workspaces are served under /w/{id}/ on
// the dashboard's origin to a public URL others can reach: then anything a
// workspace serves (a repository's HTML preview, an extension's webview, a
// dev server behind code-server's port proxy) can call the API as the user
// who opened it. A loopback public URL reaches only this machine's users.
func (c *Config) PathModeExposed() bool {
	if c.Proxy != nil && c.Proxy.SubdomainBase != "" {
		return false
	}
	u, err := url.Parse(c.PublicURL)
	if err != nil {
		return true
	}
	host := u.Hostname()
	if host == "localhost" || strings.HasSuffix(host, ".localhost") {
		return false
	}
	ip, err := netip.ParseAddr(host)
	return err != nil || !ip.IsLoopback()
}
