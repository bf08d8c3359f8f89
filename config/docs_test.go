package config

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/zclconf/go-cty/cty"
	"github.com/zclconf/go-cty/cty/convert"
	"github.com/zclconf/go-cty/cty/gocty"
)

// The documentation states defaults in two forms this test reads, so a
// default changed in defaults.go without its documentation fails here:
//
//   - inline, anywhere in docs/*.md: a setting's full HCL path in backticks
//     followed by "(default `VALUE`" — `coordinator.ttl_interval` (default
//     `1m`);
//   - a table right after a line `<!-- defaults -->`: each row's first cell
//     is the path in backticks, its second the value in backticks. The table
//     ends at the first line that is not a table row.
//
// A path is the setting's place in the HCL file, blocks and labels joined by
// dots: auth.session_ttl, backend.nomad.check_interval. VALUE is an HCL
// literal ("5m", 2, true, ["*"]); a bare word that is not one (5m, 90d) is a
// string. Durations compare by length of time, so 60m states 1h.
//
// codehub.example.hcl promises every setting it assigns is its default; an
// assignment that deliberately shows another value says "not the default"
// in the comment lines directly above it (up to the previous blank line) or
// on its own line.

// statedDefault is one default the documentation states.
type statedDefault struct {
	where string // file:line
	path  string
	value string // as written
}

var (
	inlineDefault = regexp.MustCompile("`([a-z_]+(?:\\.[a-z_]+)+)`\\s*\\(default `([^`]+)`")
	tableRow      = regexp.MustCompile("^\\|\\s*`([^`]+)`\\s*\\|\\s*`([^`]+)`\\s*\\|")
)

const defaultsMarker = "<!-- defaults -->"

// docDefaults reads the defaults a markdown file states.
func docDefaults(t *testing.T, name string) []statedDefault {
	t.Helper()
	src, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	var out []statedDefault
	inTable, marked := false, false
	sc := bufio.NewScanner(bytes.NewReader(src))
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		where := fmt.Sprintf("%s:%d", name, n)
		switch {
		case strings.TrimSpace(line) == defaultsMarker:
			marked = true
			continue
		case marked && strings.HasPrefix(line, "|"):
			inTable = true
			if m := tableRow.FindStringSubmatch(line); m != nil {
				out = append(out, statedDefault{where, m[1], m[2]})
			}
			continue
		case inTable || (marked && strings.TrimSpace(line) != ""):
			if !inTable {
				t.Errorf("%s: %s is not followed by a table", where, defaultsMarker)
			}
			inTable, marked = false, false
		}
		for _, m := range inlineDefault.FindAllStringSubmatch(line, -1) {
			out = append(out, statedDefault{where, m[1], m[2]})
		}
	}
	return out
}

// defaultSettings maps every setting's path to its default, with the
// optional blocks (consul, the local backend) filled in.
func defaultSettings() (map[string]reflect.Value, map[string]bool) {
	c := Default()
	c.Consul = defaultConsul()
	c.Backend.Local = defaultLocalBackend()
	values := map[string]reflect.Value{}
	c.visitAttributes(func(path string, v reflect.Value) { values[path] = v })
	durations := map[string]bool{}
	for _, f := range c.durationFields() {
		durations[f.path] = true
	}
	return values, durations
}

// sameAsDefault reports why a stated value differs from the default at
// path, or "" when it does not.
func sameAsDefault(values map[string]reflect.Value, durations map[string]bool, path, stated string) string {
	def, ok := values[path]
	if !ok {
		return "no such setting"
	}
	if durations[path] {
		parseDur := time.ParseDuration
		if inDays[path] {
			parseDur = parseRetention
		}
		got, err := parseDur(strings.Trim(stated, `"`))
		if err != nil {
			return fmt.Sprintf("%q is not a duration", stated)
		}
		want, err := parseDur(def.String())
		if err != nil {
			return fmt.Sprintf("default %q does not parse: %v", def.String(), err)
		}
		if got != want {
			return fmt.Sprintf("states %s, default is %q", stated, def.String())
		}
		return ""
	}
	ty, err := gocty.ImpliedType(def.Interface())
	if err != nil {
		return fmt.Sprintf("cannot compare: %v", err)
	}
	want, err := gocty.ToCtyValue(def.Interface(), ty)
	if err != nil {
		return fmt.Sprintf("cannot compare: %v", err)
	}
	got := cty.StringVal(stated)
	if expr, diags := hclsyntax.ParseExpression([]byte(stated), "", hcl.InitialPos); !diags.HasErrors() {
		if v, diags := expr.Value(nil); !diags.HasErrors() {
			got = v
		}
	}
	return differs(got, want, ty, stated)
}

func differs(got, want cty.Value, ty cty.Type, stated string) string {
	conv, err := convert.Convert(got, ty)
	if err != nil {
		return fmt.Sprintf("states %s, not a %s", stated, ty.FriendlyName())
	}
	// A list left out is nil, which HCL sees as null: the same as [].
	if want.IsNull() && conv.CanIterateElements() && conv.LengthInt() == 0 {
		return ""
	}
	if want.IsNull() || !conv.Equals(want).True() {
		return fmt.Sprintf("states %s, default is %s", stated, ctyText(want))
	}
	return ""
}

func ctyText(v cty.Value) string {
	if v.IsNull() {
		return "null"
	}
	switch {
	case v.Type() == cty.String:
		return fmt.Sprintf("%q", v.AsString())
	case v.Type().IsListType() || v.Type().IsTupleType() || v.Type().IsSetType():
		var parts []string
		for it := v.ElementIterator(); it.Next(); {
			_, e := it.Element()
			parts = append(parts, ctyText(e))
		}
		return "[" + strings.Join(parts, ", ") + "]"
	case v.Type() == cty.Number:
		return v.AsBigFloat().Text('f', -1)
	case v.Type() == cty.Bool:
		return fmt.Sprint(v.True())
	default:
		return v.GoString()
	}
}

func TestDocsStateTheDefaults(t *testing.T) {
	values, durations := defaultSettings()
	files, err := filepath.Glob("../docs/*.md")
	if err != nil || len(files) == 0 {
		t.Fatalf("no docs found: %v", err)
	}
	var stated []statedDefault
	for _, f := range files {
		stated = append(stated, docDefaults(t, f)...)
	}
	// The docs state at least the coordinator's timeouts; fewer means the
	// reading broke, and the test would pass whatever the docs say.
	if len(stated) < 15 {
		t.Fatalf("read only %d stated defaults from docs/: %v", len(stated), stated)
	}
	for _, s := range stated {
		if why := sameAsDefault(values, durations, s.path, s.value); why != "" {
			t.Errorf("%s: %s: %s", s.where, s.path, why)
		}
	}
}

func TestExampleAssignsTheDefaults(t *testing.T) {
	const name = "codehub.example.hcl"
	src, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	file, diags := hclsyntax.ParseConfig(src, name, hcl.InitialPos)
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	lines := strings.Split(string(src), "\n")
	values, durations := defaultSettings()
	checked := 0
	var walk func(prefix string, body *hclsyntax.Body)
	walk = func(prefix string, body *hclsyntax.Body) {
		for _, a := range body.Attributes {
			path := joinPath(prefix, a.Name)
			if _, ok := values[path]; !ok || deliberate(lines, a.SrcRange.Start.Line) {
				continue
			}
			checked++
			stated := string(a.Expr.Range().SliceBytes(src))
			if why := sameAsDefault(values, durations, path, stated); why != "" {
				t.Errorf("%s:%d: %s: %s", name, a.SrcRange.Start.Line, path, why)
			}
		}
		for _, b := range body.Blocks {
			// Templates have no defaults of their own: they inherit the
			// workspace block's.
			if b.Type == "template" {
				continue
			}
			walk(joinPath(prefix, strings.Join(append([]string{b.Type}, b.Labels...), ".")), b.Body)
		}
	}
	walk("", file.Body.(*hclsyntax.Body))
	if checked < 50 {
		t.Fatalf("checked only %d assignments of the example; the walk is broken", checked)
	}
}

// deliberate reports whether the assignment on line (1-based) says it shows
// a value other than the default: on its line or in the comment lines
// directly above it.
func deliberate(lines []string, line int) bool {
	words := strings.Fields(lines[line-1])
	for i := line - 2; i >= 0 && strings.TrimSpace(lines[i]) != ""; i-- {
		words = append(strings.Fields(lines[i]), words...)
	}
	// Fields joins the comment's lines, so a phrase may wrap.
	text := strings.ToLower(strings.Join(words, " "))
	text = strings.ReplaceAll(text, " # ", " ")
	return strings.Contains(text, "not the default") || strings.Contains(text, "no default")
}
