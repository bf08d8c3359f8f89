package config

import (
	"errors"
	"maps"
	"slices"
	"testing"
	"time"
)

func TestLoadTemplates(t *testing.T) {
	c, err := load("testdata/templates.hcl", noEnv)
	if err != nil {
		t.Fatalf("load: %v", err)
	}
	if got, want := c.TemplateNames(), []string{DefaultTemplate, "go"}; !slices.Equal(got, want) {
		t.Errorf("names = %q, want %q", got, want)
	}
	def, ok := c.Template(DefaultTemplate)
	if !ok || def.Command != "/usr/bin/code-server" || def.CPU != c.Workspace.CPU {
		t.Errorf("default template = %+v, %v; want the workspace block", def, ok)
	}
	g, ok := c.Template("go")
	if !ok {
		t.Fatal("template go missing")
	}
	if g.CPU != 2000 || g.Memory != 4096 || g.MemoryMax != 8192 || g.Env["GOFLAGS"] != "-mod=mod" {
		t.Errorf("go resources/env = %d %d %d %v", g.CPU, g.Memory, g.MemoryMax, g.Env)
	}
	if g.Command != c.Workspace.Command || !slices.Equal(g.Args, c.Workspace.Args) {
		t.Errorf("go does not inherit the program: %q %q", g.Command, g.Args)
	}
	if g.StandbyTTL != time.Hour || g.ArchiveTTL != c.Workspace.ArchiveTTL {
		t.Errorf("go timers = %s %s", g.StandbyTTL, g.ArchiveTTL)
	}
	if def.Version() == g.Version() {
		t.Error("two different templates share a version")
	}
	if _, ok := c.Template("nope"); ok {
		t.Error("unknown template found")
	}
}

func TestTemplateVersionFollowsInputs(t *testing.T) {
	c, err := load("testdata/templates.hcl", noEnv)
	if err != nil {
		t.Fatal(err)
	}
	g, _ := c.Template("go")
	before := g.Version()
	again, _ := c.Template("go")
	if again.Version() != before {
		t.Fatal("version is not stable")
	}
	c.Templates[0].Description = "reworded"
	if d, _ := c.Template("go"); d.Version() != before {
		t.Error("a description change changed the version")
	}
	c.Templates[0].Memory = 5000
	if m, _ := c.Template("go"); m.Version() == before {
		t.Error("a memory change kept the version")
	}
}

func TestLoadReportsTemplateProblemsAtTheirAttributes(t *testing.T) {
	_, err := load("testdata/invalid-templates.hcl", noEnv)
	cerr := configError(t, err)
	want := []string{
		"8:1 Invalid template.big",
		"9:3 Invalid template.big.memory",
		"10:3 Invalid template.big.memory_max",
		"11:3 Invalid template.big.env",
		"14:3 Invalid template.big.standby_ttl",
		"15:3 Invalid template.big.groups[0]",
		"18:5 Invalid template.big.parameter.n.default",
		"22:5 Invalid template.big.parameter.s.regex",
		"24:3 Invalid template.big.repository_parameter",
	}
	got := summaries(cerr.Diagnostics)
	if !slices.Equal(got, want) {
		t.Errorf("diagnostics =\n%q\nwant\n%q", got, want)
	}
}

func TestParameterValues(t *testing.T) {
	c, err := load("testdata/templates.hcl", noEnv)
	if err != nil {
		t.Fatal(err)
	}
	g, _ := c.Template("go")
	tests := []struct {
		name  string
		given map[string]any
		want  map[string]any
		field string
	}{
		{"defaults", map[string]any{"editor": "vim"},
			map[string]any{"repo": "https://example.com/a.git", "workers": 4.0, "debug": false, "editor": "vim"}, ""},
		{"all given", map[string]any{"repo": "file:///srv/r.git", "workers": 16.0, "debug": true, "editor": "emacs"},
			map[string]any{"repo": "file:///srv/r.git", "workers": 16.0, "debug": true, "editor": "emacs"}, ""},
		{"required missing", map[string]any{}, nil, "editor"},
		{"not in options", map[string]any{"editor": "nano"}, nil, "editor"},
		{"regex", map[string]any{"editor": "vim", "repo": "ssh://x"}, nil, "repo"},
		{"regex matches whole value", map[string]any{"editor": "vim", "repo": "xhttps://x"}, nil, "repo"},
		{"above max", map[string]any{"editor": "vim", "workers": 17.0}, nil, "workers"},
		{"below min", map[string]any{"editor": "vim", "workers": 0.0}, nil, "workers"},
		{"wrong type", map[string]any{"editor": "vim", "debug": "yes"}, nil, "debug"},
		{"number as string", map[string]any{"editor": "vim", "workers": "4"}, nil, "workers"},
		{"unknown", map[string]any{"editor": "vim", "color": "red"}, nil, "color"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := g.ParameterValues(tc.given)
			if tc.field == "" {
				if err != nil || !maps.Equal(got, tc.want) {
					t.Fatalf("values = %v, %v; want %v", got, err, tc.want)
				}
				return
			}
			var perr *ParameterError
			if !errors.As(err, &perr) || perr.Name != tc.field {
				t.Fatalf("err = %v, want a refusal of %s", err, tc.field)
			}
		})
	}
}

func TestTemplateEnvAndRepository(t *testing.T) {
	c, err := load("testdata/templates.hcl", noEnv)
	if err != nil {
		t.Fatal(err)
	}
	g, _ := c.Template("go")
	values := map[string]any{"repo": "file:///r.git", "workers": 2.5, "debug": true, "editor": "vim"}
	env := g.ParameterEnv(values)
	want := map[string]string{"CODEHUB_PARAM_REPO": "file:///r.git", "CODEHUB_PARAM_WORKERS": "2.5",
		"CODEHUB_PARAM_DEBUG": "true", "CODEHUB_PARAM_EDITOR": "vim"}
	if !maps.Equal(env, want) {
		t.Errorf("env = %v, want %v", env, want)
	}
	if r := g.Repository(values); r != "file:///r.git" {
		t.Errorf("repository = %q", r)
	}
	def, _ := c.Template(DefaultTemplate)
	if r := def.Repository(values); r != "" {
		t.Errorf("default template clones %q", r)
	}
}

func TestTemplateAllows(t *testing.T) {
	open := &Template{}
	admins := &Template{Groups: []string{GroupAdmins}, Users: []string{"ann"}}
	data := &Template{Groups: []string{"data", "ml"}}
	for _, tc := range []struct {
		name   string
		t      *Template
		user   string
		admin  bool
		groups []string
		want   bool
	}{
		{"no users or groups: everyone", open, "bob", false, nil, true},
		{"not listed", admins, "bob", false, nil, false},
		{"an administrator", admins, "bob", true, nil, true},
		{"listed by name", admins, "ann", false, nil, true},
		{"in a listed group", data, "bob", false, []string{"web", "ml"}, true},
		{"in no listed group", data, "bob", false, []string{"web"}, false},
		{"administrators only through admins", data, "root", true, nil, false},
		// A provider's group called admins is not administrator rights.
		{"a provider's admins group", admins, "bob", false, []string{GroupAdmins}, false},
	} {
		if got := tc.t.Allows(tc.user, tc.admin, tc.groups); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestTemplateSchema(t *testing.T) {
	c, err := load("testdata/templates.hcl", noEnv)
	if err != nil {
		t.Fatal(err)
	}
	g, _ := c.Template("go")
	s := g.Schema()
	props := s["properties"].(map[string]any)
	workers := props["workers"].(map[string]any)
	if workers["type"] != "number" || workers["minimum"] != 1.0 || workers["maximum"] != 16.0 || workers["default"] != 4.0 {
		t.Errorf("workers schema = %v", workers)
	}
	if e := props["editor"].(map[string]any)["enum"]; !slices.Equal(e.([]string), []string{"vim", "emacs"}) {
		t.Errorf("editor enum = %v", e)
	}
	if r := s["required"].([]string); !slices.Equal(r, []string{"editor"}) {
		t.Errorf("required = %v", r)
	}
}

func TestLoadPrebuild(t *testing.T) {
	c, err := load("testdata/templates.hcl", noEnv)
	if err != nil {
		t.Fatal(err)
	}
	g, _ := c.Template("go")
	before := g.Version()
	if g.Prebuild != nil {
		t.Fatalf("prebuild without a block: %+v", g.Prebuild)
	}
	def, _ := c.Template(DefaultTemplate)
	defVersion := def.Version()

	c.Templates[0].Prebuild = &Prebuild{Init: []string{"go mod download"}, EveryHCL: "6h", Keep: 0}
	if ps := c.resolveTemplates(); len(ps) != 0 {
		t.Fatal(ps)
	}
	g, _ = c.Template("go")
	if g.Prebuild == nil || g.Prebuild.Every != 6*time.Hour || g.Prebuild.Keep != DefaultPrebuildKeep {
		t.Fatalf("prebuild = %+v", g.Prebuild)
	}
	g.Prebuild.Init[0] = "changed in a copy"
	if again, _ := c.Template("go"); again.Prebuild.Init[0] != "go mod download" {
		t.Error("Template shares the prebuild's commands with its result")
	}
	if g, _ := c.Template("go"); g.Version() == before {
		t.Error("adding init commands kept the version")
	}
	if d, _ := c.Template(DefaultTemplate); d.Version() != defVersion {
		t.Error("a template without a prebuild changed version")
	}
}

func TestLoadReportsPrebuildProblems(t *testing.T) {
	_, err := load("testdata/invalid-prebuild.hcl", noEnv)
	got := summaries(configError(t, err).Diagnostics)
	want := []string{
		"12:3 Invalid template.nodefault.prebuild",
		"12:3 Invalid template.nodefault.prebuild",
		"13:5 Invalid template.nodefault.prebuild.init",
		"14:5 Invalid template.nodefault.prebuild.every",
		"15:5 Invalid template.nodefault.prebuild.keep",
		"19:3 Invalid template.badevery.prebuild",
		"20:5 Invalid template.badevery.prebuild.init",
		"21:5 Invalid template.badevery.prebuild.every",
		"25:3 Invalid template.toowarm.warm",
		"25:3 Invalid template.toowarm.warm",
	}
	if !slices.Equal(got, want) {
		t.Errorf("diagnostics =\n%q\nwant\n%q", got, want)
	}
}
