package config

import (
	"cmp"
	"fmt"
	"os"
	"slices"
	"strings"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/gohcl"
	"github.com/hashicorp/hcl/v2/hclparse"
	"github.com/hashicorp/hcl/v2/hclsyntax"
)

// Error reports every problem found in a configuration at once: decode
// problems as HCL reported them, and validation problems naming the field
// path, each with its position in the file when the file set the value.
type Error struct {
	Diagnostics hcl.Diagnostics
}

// Error lists one problem per line, "file:line:column: summary: detail".
func (e *Error) Error() string {
	lines := make([]string, 0, len(e.Diagnostics))
	for _, d := range e.Diagnostics {
		lines = append(lines, FormatDiagnostic(d))
	}
	return strings.Join(lines, "\n")
}

// FormatDiagnostic renders one diagnostic on one line, prefixed with
// file:line:column when it has a position.
func FormatDiagnostic(d *hcl.Diagnostic) string {
	msg := d.Summary
	if d.Detail != "" {
		msg += ": " + d.Detail
	}
	if d.Subject == nil {
		return msg
	}
	return fmt.Sprintf("%s:%d:%d: %s", d.Subject.Filename, d.Subject.Start.Line, d.Subject.Start.Column, msg)
}

// Load reads the configuration at path. Values come, in order of
// precedence, from the file, then the environment (the ecosystem's own
// variables such as NOMAD_ADDR before CODEHUB_*), then the defaults. Any
// problem in the file, the environment or the resulting values is reported
// in one *Error.
func Load(path string) (*Config, error) {
	return load(path, os.LookupEnv)
}

// LoadForDatabase reads the configuration at path like Load, but judges
// only the database settings: the admin commands that use nothing else
// (user, workspace recover, migrate) then work with the file the server
// uses even when the server takes its S3 keys or Nomad token from an
// environment the administrator's shell does not have. The file must still
// parse, and values it sets must still have the right types.
func LoadForDatabase(path string) (*Config, error) {
	return loadJudging(path, os.LookupEnv, onlyDatabase)
}

func onlyDatabase(ps []problem) []problem {
	var kept []problem
	for _, p := range ps {
		if p.path == "database" || strings.HasPrefix(p.path, "database.") {
			kept = append(kept, p)
		}
	}
	return kept
}

func load(path string, lookupEnv func(string) (string, bool)) (*Config, error) {
	return loadJudging(path, lookupEnv, everything)
}

func everything(ps []problem) []problem { return ps }

func loadJudging(path string, lookupEnv func(string) (string, bool), judge func([]problem) []problem) (*Config, error) {
	src, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read config: %w", err)
	}
	return parseJudging(src, path, lookupEnv, judge)
}

func parse(src []byte, filename string, lookupEnv func(string) (string, bool)) (*Config, error) {
	return parseJudging(src, filename, lookupEnv, everything)
}

// parseJudging decodes src and reports the problems judge keeps of those
// the values have.
func parseJudging(src []byte, filename string, lookupEnv func(string) (string, bool), judge func([]problem) []problem) (*Config, error) {
	file, diags := hclparse.NewParser().ParseHCL(src, filename)
	if diags.HasErrors() {
		return nil, &Error{Diagnostics: diags}
	}

	cfg := Default()
	orig := newOrigins()
	body := file.Body.(*hclsyntax.Body)
	orig.recordFile(body, "")

	decodeDiags := decode(body, cfg)
	orig.nameAttributes(decodeDiags)
	diags = append(diags, decodeDiags...)
	diags = append(diags, cfg.applyEnv(lookupEnv, orig)...)
	diags = append(diags, orig.diagnostics(cfg.resolve())...)
	diags = append(diags, orig.diagnostics(judge(cfg.problems()))...)
	if diags.HasErrors() {
		return nil, &Error{Diagnostics: inFileOrder(diags)}
	}
	return cfg, nil
}

var backendSchema = &hcl.BodySchema{
	Blocks: []hcl.BlockHeaderSchema{{Type: "backend", LabelNames: []string{"kind"}}},
}

// decode lays the file over cfg. Absent attributes and blocks keep their
// defaults because gohcl leaves them alone and decodes present blocks into
// the non-nil structs Default made.
func decode(body *hclsyntax.Body, cfg *Config) hcl.Diagnostics {
	for _, b := range body.Blocks {
		if b.Type == "consul" {
			// Consul is nil unless configured, so gohcl would allocate a
			// zero one; give a present block its defaults first.
			cfg.Consul = defaultConsul()
		}
	}
	content, rest, diags := body.PartialContent(backendSchema)
	diags = append(diags, gohcl.DecodeBody(rest, nil, cfg)...)
	return append(diags, decodeBackends(content.Blocks, cfg)...)
}

// decodeBackends turns the labelled backend block into cfg.Backend. Without
// one, the default Nomad backend stays.
func decodeBackends(blocks hcl.Blocks, cfg *Config) hcl.Diagnostics {
	var diags hcl.Diagnostics
	for i, b := range blocks {
		if i > 0 {
			diags = append(diags, &hcl.Diagnostic{
				Severity: hcl.DiagError,
				Summary:  "Duplicate backend block",
				Detail:   fmt.Sprintf("Only one backend block is allowed. Another was defined at %s.", blocks[0].DefRange),
				Subject:  b.DefRange.Ptr(),
			})
			continue
		}
		switch b.Labels[0] {
		case BackendNomad:
			cfg.Backend = &Backend{Kind: BackendNomad, Nomad: defaultNomadBackend()}
			diags = append(diags, gohcl.DecodeBody(b.Body, nil, cfg.Backend.Nomad)...)
		case BackendLocal:
			cfg.Backend = &Backend{Kind: BackendLocal, Local: defaultLocalBackend()}
			diags = append(diags, gohcl.DecodeBody(b.Body, nil, cfg.Backend.Local)...)
		default:
			diags = append(diags, &hcl.Diagnostic{
				Severity: hcl.DiagError,
				Summary:  "Unsupported backend",
				Detail:   fmt.Sprintf("Backend %q is not supported; use %q or %q.", b.Labels[0], BackendNomad, BackendLocal),
				Subject:  b.LabelRanges[0].Ptr(),
			})
		}
	}
	return diags
}

// inFileOrder sorts diagnostics by position so they read top to bottom;
// those without a position (environment, missing values) come last.
func inFileOrder(diags hcl.Diagnostics) hcl.Diagnostics {
	slices.SortStableFunc(diags, func(a, b *hcl.Diagnostic) int {
		switch {
		case a.Subject == nil || b.Subject == nil:
			return cmp.Compare(boolRank(a.Subject == nil), boolRank(b.Subject == nil))
		case a.Subject.Filename != b.Subject.Filename:
			return strings.Compare(a.Subject.Filename, b.Subject.Filename)
		default:
			return cmp.Compare(a.Subject.Start.Byte, b.Subject.Start.Byte)
		}
	})
	return diags
}

func boolRank(b bool) int {
	if b {
		return 1
	}
	return 0
}
