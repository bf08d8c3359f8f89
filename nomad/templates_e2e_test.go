package nomad

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/nomad/api"

	"github.com/codehub-io/codehub/config"
	"github.com/codehub-io/codehub/controller"
	"github.com/codehub-io/codehub/internal/backendtest"
	"github.com/codehub-io/codehub/internal/nomadtest"
	"github.com/codehub-io/codehub/internal/testenv"
	"github.com/codehub-io/codehub/jobspecs"
	"github.com/codehub-io/codehub/workspace"
)

// templateBackend is a raw_exec backend from a configuration file whose
// templates the test starts workspaces of.
func templateBackend(t *testing.T, a *nomadtest.Agent, bins string) (*Backend, *config.Config) {
	t.Helper()
	s3 := testenv.S3{Endpoint: "127.0.0.1:9", Bucket: "unused", Region: "us-east-1", AccessKey: "unused", SecretKey: "unused"}
	cfg := backendtest.LoadConfig(t, s3, fmt.Sprintf(`backend "nomad" {
  address      = %q
  driver       = "raw_exec"
  codehub_path = %q
}
workspace {
  command       = %q
  args          = ["-listen", "127.0.0.1:%%PORT%%", "-home", "%%HOME%%"]
  upstream_auth = "none"
  uid           = %d
  gid           = %d
  cpu           = 100
  memory        = 64
}
template "small" {
  env = { SIZE = "small" }
}
template "big" {
  cpu        = 200
  memory     = 128
  memory_max = 256
  env        = { SIZE = "big" }
}
template "huge" {
  memory = 100000000
}
template "clone" {
  repository_parameter = "repo"
  parameter "repo" {
    regex = "file://.+"
  }
}
template "params" {
  parameter "node" {}
  parameter "meta" {}
  parameter "escaped" {}
  parameter "directive" {}
  parameter "quotes" {}
}
`, a.Addr, filepath.Join(bins, "codehub"), filepath.Join(bins, "wsserver"), os.Getuid(), os.Getgid()))
	opts, err := OptionsFromConfig(cfg, "")
	if err != nil {
		t.Fatal(err)
	}
	r, err := jobspecs.NewRenderer("")
	if err != nil {
		t.Fatal(err)
	}
	logger := hclog.New(&hclog.LoggerOptions{Name: "nomad-e2e", Level: hclog.Debug, Output: io.Discard})
	return New(logger, a.Client, opts, r), cfg
}

// startTemplate provisions workspace wsID and starts it from template
// name with values.
func startTemplate(t *testing.T, b *Backend, cfg *config.Config, wsID, name string, values map[string]any) {
	t.Helper()
	startTemplateWith(t, b, cfg, wsID, name, values, func(*controller.WorkspaceSpec) {})
}

// startTemplateWith is startTemplate with the owner's part of the spec
// (dotfiles, git credential) set by owner.
func startTemplateWith(t *testing.T, b *Backend, cfg *config.Config, wsID, name string, values map[string]any, owner func(*controller.WorkspaceSpec)) {
	t.Helper()
	ctx := t.Context()
	tmpl, ok := cfg.Template(name)
	if !ok {
		t.Fatalf("no template %s", name)
	}
	params, err := tmpl.ParameterValues(values)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.ProvisionVolume(ctx, controller.VolumeSpec{WorkspaceID: wsID, UID: os.Getuid(), GID: os.Getgid()}); err != nil {
		t.Fatal(err)
	}
	observeUntil(t, b, wsID, "volume of "+name+" ready", func(o controller.Observed) bool { return o.VolumeReady })
	w := workspace.Workspace{ID: wsID, RunID: "run1", OwnerID: "01owner0000000000000000000", Template: name, Parameters: params}
	spec := controller.SpecFromTemplate(w, tmpl, cfg.Workspace.UpstreamAuth)
	owner(&spec)
	if err := b.StartWorkspace(ctx, spec); err != nil {
		t.Fatal(err)
	}
}

// workspaceTask is the program's task of job id as Nomad holds it.
func workspaceTask(t *testing.T, a *nomadtest.Agent, id string) *api.Task {
	t.Helper()
	job, _, err := a.Client.Jobs().Info(id, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, task := range job.TaskGroups[0].Tasks {
		if task.Name == "workspace" {
			return task
		}
	}
	t.Fatalf("job %s has no workspace task", id)
	return nil
}

func TestE2ETemplates(t *testing.T) {
	nomadtest.Binary(t)
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git is not installed")
	}
	bins := t.TempDir()
	nomadtest.BuildProgram(t, bins, "./testdata/wsserver", "wsserver")
	nomadtest.BuildProgram(t, bins, "../cmd/codehub", "codehub")
	a := nomadtest.Start(t, "")
	b, cfg := templateBackend(t, a, bins)

	const (
		smallID  = "01jb3x7k9q2m5n8p4r6s0t1v21"
		bigID    = "01jb3x7k9q2m5n8p4r6s0t1v22"
		hugeID   = "01jb3x7k9q2m5n8p4r6s0t1v23"
		cloneID  = "01jb3x7k9q2m5n8p4r6s0t1v24"
		brokenID = "01jb3x7k9q2m5n8p4r6s0t1v25"
		dotsID   = "01jb3x7k9q2m5n8p4r6s0t1v26"
		paramsID = "01jb3x7k9q2m5n8p4r6s0t1v27"
	)

	t.Run("resources and environment reach Nomad", func(t *testing.T) {
		startTemplate(t, b, cfg, smallID, "small", nil)
		startTemplate(t, b, cfg, bigID, "big", nil)
		for _, tc := range []struct {
			id               string
			cpu, mem, memMax int
			size             string
		}{{smallID, 100, 64, 0, "small"}, {bigID, 200, 128, 256, "big"}} {
			observeUntil(t, b, tc.id, tc.size+" ready", func(o controller.Observed) bool { return o.UpstreamReady })
			task := workspaceTask(t, a, jobID(tc.id))
			r := task.Resources
			if *r.CPU != tc.cpu || *r.MemoryMB != tc.mem || r.MemoryMaxMB != nil && *r.MemoryMaxMB != tc.memMax || task.Env["SIZE"] != tc.size {
				t.Errorf("%s in Nomad: cpu %d memory %d memory_max %v env %v", tc.size, *r.CPU, *r.MemoryMB, r.MemoryMaxMB, task.Env)
			}
		}
	})

	t.Run("too large is unschedulable", func(t *testing.T) {
		startTemplate(t, b, cfg, hugeID, "huge", nil)
		o := observeUntil(t, b, hugeID, "unschedulable", func(o controller.Observed) bool { return o.Failure != nil })
		if o.Failure.Reason != workspace.ReasonUnschedulable || !strings.Contains(o.Failure.Message, "memory") {
			t.Errorf("failure = %+v, want Unschedulable naming memory", o.Failure)
		}
	})

	t.Run("clone lands before the program starts", func(t *testing.T) {
		repo := testenv.BareRepo(t, "service", map[string]string{"README": "hello"})
		startTemplate(t, b, cfg, cloneID, "clone", map[string]any{"repo": repo})
		observeUntil(t, b, cloneID, "clone ready", func(o controller.Observed) bool { return o.UpstreamReady })
		home, err := b.HomeDir(t.Context(), cloneID)
		if err != nil {
			t.Fatal(err)
		}
		if got, err := os.ReadFile(filepath.Join(home, "service", "README")); err != nil || string(got) != "hello" {
			t.Fatalf("clone in the home: %q, %v", got, err)
		}
		allocs, _, err := a.Client.Jobs().Allocations(jobID(cloneID), false, nil)
		if err != nil || len(allocs) != 1 {
			t.Fatalf("allocations: %d, %v", len(allocs), err)
		}
		first, program := allocs[0].TaskStates["first-start"], allocs[0].TaskStates["workspace"]
		if first == nil || program == nil || first.Failed || first.FinishedAt.After(program.StartedAt) {
			t.Errorf("first start %+v did not finish before the program %+v started", first, program)
		}
	})

	t.Run("a failed clone shows git's error", func(t *testing.T) {
		missing := "file://" + filepath.Join(t.TempDir(), "missing.git")
		startTemplate(t, b, cfg, brokenID, "clone", map[string]any{"repo": missing})
		o := observeUntil(t, b, brokenID, "start failed", func(o controller.Observed) bool { return o.Failure != nil })
		if o.Failure.Reason != workspace.ReasonStartFailed || !strings.Contains(o.Failure.Message, "fatal:") {
			logTaskEvents(t, a, jobID(brokenID))
			t.Errorf("failure = %+v, want StartFailed with git's message", o.Failure)
		}
	})

	t.Run("the install script finds no credential", func(t *testing.T) {
		const token = "ghp_nomadS3cret99"
		repo := testenv.BareRepo(t, "service", map[string]string{"README": "hello"})
		dotfiles := testenv.BareRepo(t, "dots", map[string]string{"install.sh": testenv.CredentialProbe})
		startTemplateWith(t, b, cfg, dotsID, "clone", map[string]any{"repo": repo}, func(s *controller.WorkspaceSpec) {
			s.Dotfiles, s.GitToken = dotfiles, token
		})
		observeUntil(t, b, dotsID, "dotfiles ready", func(o controller.Observed) bool { return o.UpstreamReady })
		home, err := b.HomeDir(t.Context(), dotsID)
		if err != nil {
			t.Fatal(err)
		}
		probe, err := os.ReadFile(filepath.Join(home, "probe"))
		if err != nil || !strings.Contains(string(probe), "probe done") || !strings.Contains(string(probe), "NOMAD_SECRETS_DIR=") {
			t.Fatalf("the install script did not run to its end in the task: %v\n%s", err, probe)
		}
		if strings.Contains(string(probe), token) {
			t.Errorf("the install script found the token:\n%s", probe)
		}
	})

	// Nomad interpolates "${...}" in env values when it starts a task,
	// node attributes and metadata included; what a user typed must
	// reach the program as typed.
	t.Run("parameters arrive byte for byte", func(t *testing.T) {
		values := map[string]any{
			"node":      "${node.unique.name}",
			"meta":      "https://x/${meta.secret}?${attr.kernel.name}",
			"escaped":   "$${x} $$ ${NOMAD_PORT_http}",
			"directive": "%{ if true }yes%{ endif } %%{",
			"quotes":    "say \"hi\" \\ 'there'\tend # not a comment",
		}
		startTemplate(t, b, cfg, paramsID, "params", values)
		observeUntil(t, b, paramsID, "params ready", func(o controller.Observed) bool { return o.UpstreamReady })
		home, err := b.HomeDir(t.Context(), paramsID)
		if err != nil {
			t.Fatal(err)
		}
		raw, err := os.ReadFile(filepath.Join(home, ".wsserver-params"))
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]string{}
		for _, kv := range strings.Split(strings.TrimSuffix(string(raw), "\x00"), "\x00") {
			name, value, _ := strings.Cut(kv, "=")
			got[name] = value
		}
		for name, want := range values {
			if env := config.ParamEnv(name); got[env] != want {
				t.Errorf("%s = %q in the program, want %q", env, got[env], want)
			}
		}
		hcl, err := b.RenderWorkspace(controller.WorkspaceSpec{WorkspaceID: paramsID, UserEnv: map[string]string{"CODEHUB_PARAM_NODE": "${node.unique.name}"}}, home)
		if err != nil || strings.Contains(hcl, "node.unique.name") {
			t.Errorf("a user's value is in the jobspec (%v):\n%s", err, hcl)
		}
	})
}
