package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/codehub-io/codehub/internal/testenv"
)

// TestRulesNameExportedMetrics: every metric the Prometheus rules and the
// Grafana dashboard in deploy/ name is one a running codehub server
// exports from its start, so neither watches a series that never exists.
// promtool checks the rules' PromQL and runs their unit tests
// (codehub.rules.test.yml: each alert fires on the series a failure
// leaves, and not before its for: has passed).
func TestRulesNameExportedMetrics(t *testing.T) {
	metricsAddr := fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))
	startServer(t, testConfig(t, testenv.RedisURL(t), fmt.Sprintf("metrics {\n  listen = %q\n}\n", metricsAddr)))
	code, body := scrape(t, "http://"+metricsAddr+"/metrics", "")
	if code != http.StatusOK {
		t.Fatalf("/metrics = %d", code)
	}
	exported := exportedFamilies(t, body)

	rulesFile := filepath.Join("..", "..", "deploy", "prometheus", "codehub.rules.yml")
	var rules struct {
		Groups []struct {
			Name  string `yaml:"name"`
			Rules []struct {
				Alert       string            `yaml:"alert"`
				Expr        string            `yaml:"expr"`
				For         string            `yaml:"for"`
				Labels      map[string]string `yaml:"labels"`
				Annotations map[string]string `yaml:"annotations"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	readYAML(t, rulesFile, &rules)
	exprs := map[string]string{}
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			exprs["rule "+r.Alert] = r.Expr
		}
	}
	if len(exprs) < 8 {
		t.Fatalf("%s holds %d rules", rulesFile, len(exprs))
	}

	var dashboard struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	raw, err := os.ReadFile(filepath.Join("..", "..", "deploy", "grafana", "codehub.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, &dashboard); err != nil {
		t.Fatalf("dashboard: %v", err)
	}
	for _, p := range dashboard.Panels {
		for i, target := range p.Targets {
			exprs[fmt.Sprintf("panel %q target %d", p.Title, i)] = target.Expr
		}
	}

	for where, expr := range exprs {
		names := metricNames(expr)
		if len(names) == 0 {
			t.Errorf("%s names no codehub metric: %s", where, expr)
		}
		for _, name := range names {
			if !exported(name) {
				t.Errorf("%s names %s, which codehub server does not export", where, name)
			}
		}
	}

	// promtool (Debian's prometheus package; make test installs it)
	// checks the PromQL and runs the rules' unit tests.
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Skip("no promtool on PATH: the rules' PromQL and unit tests are not checked")
	}
	if out, err := exec.Command(promtool, "check", "rules", rulesFile).CombinedOutput(); err != nil {
		t.Errorf("promtool check rules: %v\n%s", err, out)
	}
	cmd := exec.Command(promtool, "test", "rules", "codehub.rules.test.yml")
	cmd.Dir = filepath.Dir(rulesFile)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("promtool test rules: %v\n%s", err, out)
	}
}

var metricName = regexp.MustCompile(`\bcodehub_[a-z0-9_]+`)

func metricNames(expr string) []string {
	names := metricName.FindAllString(expr, -1)
	slices.Sort(names)
	return slices.Compact(names)
}

// exportedFamilies reads the families of an exposition in the text format
// and returns whether a series name belongs to one: a histogram's family
// also owns its _bucket, _sum and _count.
func exportedFamilies(t *testing.T, body string) func(string) bool {
	t.Helper()
	types := map[string]string{}
	sc := bufio.NewScanner(strings.NewReader(body))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if f := strings.Fields(sc.Text()); len(f) == 4 && f[0] == "#" && f[1] == "TYPE" {
			types[f[2]] = f[3]
		}
	}
	if len(types) == 0 {
		t.Fatal("the exposition has no families")
	}
	return func(name string) bool {
		if _, ok := types[name]; ok {
			return true
		}
		for _, suffix := range []string{"_bucket", "_sum", "_count"} {
			if base, ok := strings.CutSuffix(name, suffix); ok && (types[base] == "histogram" || types[base] == "summary" && suffix != "_bucket") {
				return true
			}
		}
		return false
	}
}

func readYAML(t *testing.T, path string, out any) {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	dec := yaml.NewDecoder(strings.NewReader(string(raw)))
	dec.KnownFields(true)
	if err := dec.Decode(out); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}
