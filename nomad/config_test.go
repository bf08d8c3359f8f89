package nomad

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"

	"github.com/codehub-io/codehub/config"
	"github.com/codehub-io/codehub/controller"
	"github.com/codehub-io/codehub/jobspecs"
)

// configBackend builds a backend the way `codehub server` does: a
// configuration file loaded by config.Load, then OptionsFromConfig.
func configBackend(t *testing.T, hclText string) *Backend {
	t.Helper()
	path := filepath.Join(t.TempDir(), "codehub.hcl")
	base := `
database {
  url = "postgres://codehub@127.0.0.1:5432/codehub"
}
redis {
  url = "redis://127.0.0.1:6379/0"
}
s3 {
  access_key = "test-access"
  secret_key = "test-secret"
}
`
	if err := os.WriteFile(path, []byte(base+hclText), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	opts, err := OptionsFromConfig(cfg, "")
	if err != nil {
		t.Fatal(err)
	}
	r, err := jobspecs.NewRenderer("")
	if err != nil {
		t.Fatal(err)
	}
	return New(hclog.NewNullLogger(), nil, opts, r)
}

// renderedTask is what the rendered workspace job gives its program.
type renderedTask struct {
	portTo     string   // the http port's "to", empty when absent
	config     []string // the task config's attribute names
	entrypoint string   // source text of config.entrypoint
	args       string   // source text of config.args
}

func renderConfigured(t *testing.T, b *Backend, home string) renderedTask {
	t.Helper()
	src, err := b.RenderWorkspace(controller.WorkspaceSpec{WorkspaceID: testWS, OwnerID: "01owner0000000000000000000"}, home)
	if err != nil {
		t.Fatal(err)
	}
	f, diags := hclsyntax.ParseConfig([]byte(src), "workspace.nomad.hcl", hcl.InitialPos)
	if diags.HasErrors() {
		t.Fatalf("rendered job does not parse: %v\n%s", diags, src)
	}
	text := func(e hclsyntax.Expression) string { return string(e.Range().SliceBytes([]byte(src))) }
	var out renderedTask
	group := child(t, child(t, f.Body.(*hclsyntax.Body), "job"), "group")
	for _, port := range child(t, group, "network").Blocks {
		if attr, ok := port.Body.Attributes["to"]; ok {
			out.portTo = text(attr.Expr)
		}
	}
	cfg := child(t, child(t, group, "task"), "config")
	for name, attr := range cfg.Attributes {
		out.config = append(out.config, name)
		switch name {
		case "entrypoint":
			out.entrypoint = text(attr.Expr)
		case "args":
			out.args = text(attr.Expr)
		}
	}
	slices.Sort(out.config)
	return out
}

func child(t *testing.T, body *hclsyntax.Body, typ string) *hclsyntax.Body {
	t.Helper()
	for _, b := range body.Blocks {
		if b.Type == typ {
			return b.Body
		}
	}
	t.Fatalf("rendered job has no %s block", typ)
	return nil
}

// Under host networking docker ignores port mappings, while Nomad would set
// NOMAD_PORT_http to a mapping's target: code-server then listened on
// workspace.port (8080, codehub's own default too) and never on the port its
// service and check use. The job must map nothing there.
func TestRenderDockerPortFromConfig(t *testing.T) {
	for _, tc := range []struct {
		name, network, wantTo string
	}{
		{"host networking", `network_mode = "host"`, ""},
		{"bridge networking", ``, "8080"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := configBackend(t, `
backend "nomad" {
  driver    = "docker"
  job_image = "codehub-job:test"
  `+tc.network+`
}
workspace {
  port = 8080
}
`)
			got := renderConfigured(t, b, b.opts.Workspace.HomeDir)
			if got.portTo != tc.wantTo {
				t.Errorf("port to = %q, want %q", got.portTo, tc.wantTo)
			}
			if !strings.Contains(got.args, `"0.0.0.0:${NOMAD_PORT_http}"`) {
				t.Errorf("args do not bind the Nomad port: %s", got.args)
			}
		})
	}
}

// The default image's ENTRYPOINT already carries "--bind-addr 0.0.0.0:8080
// .", and docker appends a job's command and args to it: code-server got
// its arguments twice and a stray folder. The job replaces the entrypoint
// with its script and gives the arguments once, with no command.
func TestRenderDockerArgumentsOnce(t *testing.T) {
	b := configBackend(t, `
backend "nomad" {
  driver       = "docker"
  job_image    = "codehub-job:test"
  network_mode = "host"
}
`)
	got := renderConfigured(t, b, b.opts.Workspace.HomeDir)
	if want := []string{"args", "entrypoint", "force_pull", "image", "network_mode", "ports"}; !slices.Equal(got.config, want) {
		t.Errorf("docker config has %v, want %v", got.config, want)
	}
	if got.entrypoint != `["/usr/bin/entrypoint.sh"]` {
		t.Errorf("entrypoint = %s", got.entrypoint)
	}
	if n := strings.Count(got.args, "--bind-addr"); n != 1 {
		t.Errorf("--bind-addr appears %d times in %s", n, got.args)
	}

	keep := configBackend(t, `
backend "nomad" {
  driver    = "docker"
  job_image = "codehub-job:test"
}
workspace {
  entrypoint = []
}
`)
	if got := renderConfigured(t, keep, keep.opts.Workspace.HomeDir); got.entrypoint != "" {
		t.Errorf("entrypoint = [] still renders %s", got.entrypoint)
	}
}

// A restore gives a raw_exec home a new host path; code-server must open the
// home it is given, not the folder it showed last.
func TestRenderCodeServerIgnoresLastOpened(t *testing.T) {
	b := configBackend(t, `
backend "nomad" {
  driver = "raw_exec"
}
`)
	got := renderConfigured(t, b, "/var/nomad/host_volumes/vol-2")
	if !strings.Contains(got.args, `"--ignore-last-opened"`) || !strings.Contains(got.args, `"/var/nomad/host_volumes/vol-2"`) {
		t.Errorf("args = %s", got.args)
	}
}
