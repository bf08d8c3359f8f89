package config

import (
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/hcl/v2"
)

// noEnv is an environment with nothing set, so tests do not depend on the
// variables of the machine running them.
func noEnv(string) (string, bool) { return "", false }

func mapEnv(env map[string]string) func(string) (string, bool) {
	return func(name string) (string, bool) {
		v, ok := env[name]
		return v, ok
	}
}

// validConfig is the defaults plus the values that have none.
func validConfig() *Config {
	c := Default()
	c.S3.AccessKey = "test-access"
	c.S3.SecretKey = "test-secret"
	c.Backend.Nomad.JobImage = "ghcr.io/codehub-io/codehub:1.0.0"
	return c
}

// withRequired adds the values that have no default to env, unless env
// sets them itself, so a snippet needs to hold only what its test exercises.
func withRequired(env map[string]string) map[string]string {
	out := map[string]string{
		"CODEHUB_S3_ACCESS_KEY":           "test-access",
		"CODEHUB_S3_SECRET_KEY":           "test-secret",
		"CODEHUB_BACKEND_NOMAD_JOB_IMAGE": "ghcr.io/codehub-io/codehub:1.0.0",
	}
	maps.Copy(out, env)
	return out
}

var requiredEnv = mapEnv(withRequired(nil))

func configError(t *testing.T, err error) *Error {
	t.Helper()
	var cerr *Error
	if !errors.As(err, &cerr) {
		t.Fatalf("error %v (%T) is not a *config.Error", err, err)
	}
	return cerr
}

// summaries lists the diagnostics as "line:col summary" ("-" without a
// position), the shape the tests compare.
func summaries(diags hcl.Diagnostics) []string {
	var out []string
	for _, d := range diags {
		pos := "-"
		if d.Subject != nil {
			pos = fmt.Sprintf("%d:%d", d.Subject.Start.Line, d.Subject.Start.Column)
		}
		out = append(out, pos+" "+d.Summary)
	}
	return out
}

func problemPaths(c *Config) []string {
	var paths []string
	for _, p := range c.problems() {
		paths = append(paths, p.path)
	}
	slices.Sort(paths)
	return paths
}

func TestDefaultIsFullyPopulated(t *testing.T) {
	c := Default()
	blocks := map[string]bool{
		"database":    c.Database != nil,
		"redis":       c.Redis != nil,
		"s3":          c.S3 != nil,
		"backend":     c.Backend != nil && c.Backend.Nomad != nil,
		"workspace":   c.Workspace != nil,
		"limits":      c.Limits != nil,
		"coordinator": c.Coordinator != nil,
		"gc":          c.GC != nil,
		"auth":        c.Auth != nil && c.Auth.BootstrapAdmin != nil,
		"jobspecs":    c.Jobspecs != nil,
		"proxy":       c.Proxy != nil,
	}
	for name, ok := range blocks {
		if !ok {
			t.Errorf("Default() left %s unset", name)
		}
	}
	if c.Consul != nil {
		t.Errorf("Default().Consul = %+v, want nil: Consul is opt-in", c.Consul)
	}
	if c.Backend.Kind != BackendNomad || c.Backend.Local != nil {
		t.Errorf("Default().Backend = %+v, want the nomad backend only", c.Backend)
	}
	// Backups cost storage, so an operator turns them on.
	offByDefault := map[string]bool{"workspace.backup_interval": true}
	for _, f := range c.durationFields() {
		if *f.dst < 0 || (*f.dst == 0 && !offByDefault[f.path]) {
			t.Errorf("default %s = %s, want a positive duration", f.path, *f.dst)
		}
		parse := time.ParseDuration
		if inDays[f.path] {
			parse = parseRetention
		}
		d, err := parse(f.text)
		if err != nil || d != *f.dst {
			t.Errorf("default %s: text %q parses to %s (%v), field holds %s", f.path, f.text, d, err, *f.dst)
		}
	}
}

func TestDefaultNeedsOnlyTheValuesWithoutDefault(t *testing.T) {
	want := []string{"backend.nomad.job_image", "s3.access_key", "s3.secret_key"}
	if got := problemPaths(Default()); !slices.Equal(got, want) {
		t.Errorf("Default() problems = %v, want %v", got, want)
	}
	if err := validConfig().Validate(); err != nil {
		t.Errorf("defaults plus credentials and job image: %v", err)
	}
}

func TestDurationText(t *testing.T) {
	for d, want := range map[time.Duration]string{
		90 * time.Second:            "1m30s",
		10 * time.Minute:            "10m",
		time.Hour:                   "1h",
		24 * time.Hour:              "24h",
		time.Hour + 30*time.Minute:  "1h30m",
		time.Second:                 "1s",
		2*time.Hour + 5*time.Second: "2h0m5s",
		500 * time.Millisecond:      "500ms",
	} {
		if got := durationText(d); got != want {
			t.Errorf("durationText(%s) = %q, want %q", d, got, want)
		}
	}
}

func TestExpandArgs(t *testing.T) {
	w := &Workspace{Args: []string{"--bind-addr", "0.0.0.0:%PORT%", "%HOME%", "--user-data-dir=%HOME%/.data", "{{port}}"}}
	got := w.ExpandArgs(31234, "/home/coder")
	want := []string{"--bind-addr", "0.0.0.0:31234", "/home/coder", "--user-data-dir=/home/coder/.data", "{{port}}"}
	if !slices.Equal(got, want) {
		t.Errorf("ExpandArgs = %q, want %q", got, want)
	}
	if w.Args[1] != "0.0.0.0:%PORT%" {
		t.Errorf("ExpandArgs changed the configured args: %q", w.Args)
	}
}

func TestImageAllowed(t *testing.T) {
	tests := []struct {
		name    string
		allowed []string
		image   string
		want    bool
	}{
		{"default image, empty list", nil, "img:1", true},
		{"other image, empty list", nil, "img:2", false},
		{"listed image", []string{"img:1", "img:2"}, "img:2", true},
		{"unlisted image", []string{"img:1", "img:2"}, "img:3", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := &Workspace{Image: "img:1", AllowedImages: tt.allowed}
			if got := w.ImageAllowed(tt.image); got != tt.want {
				t.Errorf("ImageAllowed(%q) = %v, want %v", tt.image, got, tt.want)
			}
		})
	}
}

// Every string field holding a duration as written (suffix HCL) must be
// parsed by resolve, or its time.Duration twin would silently keep the
// default.
func TestEveryDurationIsResolved(t *testing.T) {
	var want []string
	var walk func(prefix string, ty reflect.Type)
	walk = func(prefix string, ty reflect.Type) {
		for i := range ty.NumField() {
			f := ty.Field(i)
			name, kind, _ := strings.Cut(f.Tag.Get("hcl"), ",")
			switch {
			case kind == "block" && f.Type.Kind() == reflect.Slice:
				// Templates resolve their own (resolveTemplates).
			case kind == "block":
				walk(joinPath(prefix, name), f.Type.Elem())
			case strings.HasSuffix(f.Name, "HCL"):
				want = append(want, joinPath(prefix, name))
			}
		}
	}
	walk("", reflect.TypeFor[Config]())
	walk("backend.nomad", reflect.TypeFor[NomadBackend]())
	walk("backend.local", reflect.TypeFor[LocalBackend]())

	var got []string
	for _, f := range Default().durationFields() {
		got = append(got, f.path)
	}
	slices.Sort(want)
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Errorf("resolved durations %q\nwant %q", got, want)
	}
}

func TestProgramArgs(t *testing.T) {
	for _, tc := range []struct {
		name string
		w    Workspace
		want []string
	}{
		{"code-server gets the flag", Workspace{UpstreamAuth: UpstreamAuthCodeServer, Args: []string{"--auth", "password", "%HOME%"}},
			[]string{"--auth", "password", "%HOME%", "--ignore-last-opened"}},
		{"flag already there", Workspace{UpstreamAuth: UpstreamAuthCodeServer, Args: []string{"--ignore-last-opened", "%HOME%"}},
			[]string{"--ignore-last-opened", "%HOME%"}},
		{"another program", Workspace{UpstreamAuth: UpstreamAuthNone, Args: []string{"-listen", "%PORT%"}},
			[]string{"-listen", "%PORT%"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := slices.Clone(tc.w.Args)
			if got := tc.w.ProgramArgs(); !slices.Equal(got, tc.want) {
				t.Errorf("ProgramArgs = %q, want %q", got, tc.want)
			}
			if !slices.Equal(tc.w.Args, before) {
				t.Errorf("ProgramArgs changed Args to %q", tc.w.Args)
			}
		})
	}
}

func TestPathModeExposed(t *testing.T) {
	for _, tc := range []struct {
		publicURL, subdomainBase string
		exposed                  bool
	}{
		{"https://code.example.com", "", true},
		{"http://10.0.0.5:8080", "", true},
		{"https://code.example.com", "ws.example.com", false},
		{"http://127.0.0.1:8080", "", false},
		{"http://localhost:8080", "", false},
		{"http://[::1]:8080", "", false},
	} {
		c := Default()
		c.PublicURL, c.Proxy.SubdomainBase = tc.publicURL, tc.subdomainBase
		if got := c.PathModeExposed(); got != tc.exposed {
			t.Errorf("PathModeExposed(%s, %q) = %v, want %v", tc.publicURL, tc.subdomainBase, got, tc.exposed)
		}
	}
}
