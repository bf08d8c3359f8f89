package config

import (
	"fmt"
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
