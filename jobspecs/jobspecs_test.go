package jobspecs

import (
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/zclconf/go-cty/cty"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

const testWorkspaceID = "01jb3x7k9q2m5n8p4r6s0t1v2w"

func baseValues(kind Kind, driver string) Values {
	v := Values{
		JobID:         "ws-" + testWorkspaceID,
		WorkspaceID:   testWorkspaceID,
		OwnerID:       "01jb3x7k9q2m5n8p4r6s0t1aaa",
		RunID:         "01jb3x7k9q2m5n8p4r6s0t1run",
		Namespace:     "default",
		NodePool:      "default",
		Datacenters:   []string{"dc1"},
		Driver:        driver,
		VolumeName:    "ws-" + testWorkspaceID + "-home",
		HomeDir:       "/home/coder",
		Port:          8080,
		UID:           1000,
		GID:           1000,
		CPU:           500,
		Memory:        2048,
		Service:       "ws-" + testWorkspaceID,
		Provider:      "nomad",
		CheckInterval: "1s",
	}
	switch driver {
	case "docker":
		v.Image = "codercom/code-server:4.100.3"
		v.Entrypoint = []string{"/usr/bin/entrypoint.sh"}
		v.Args = []string{"--bind-addr", "0.0.0.0:8080", "--auth", "none", "%HOME%"}
		v.JobImage = "ghcr.io/codehub-io/codehub:1.0.0"
	default:
		v.Port = 0
		v.Command = "/usr/bin/code-server"
		v.Args = []string{"--bind-addr", "127.0.0.1:%PORT%", "--auth", "none", "%HOME%"}
		v.CodehubPath = "/usr/local/bin/codehub"
	}
	if driver == "raw_exec" {
		v.HomeDir = "/opt/nomad/host_volumes/5f1f2c1e-6a51-4a3f-9a55-2f0b8f2a1c11"
	}
	v.S3Endpoint = "127.0.0.1:9000"
	v.S3Region = "us-east-1"
	if kind == KindWorkspace {
		// The nomad backend gives every run a stop-archive task.
		v.StopArchiveURL = "s3://codehub/archives/" + testWorkspaceID + "/" + v.RunID + "/home.tar.zst"
		v.StopVariablePath = "nomad/jobs/" + v.JobID + "/workspace/stop-archive"
	}
	if kind != KindWorkspace {
		v.JobID = "ws-" + testWorkspaceID + "-" + string(kind)
		v.OpID = "01jb3x9zzq2m5n8p4r6s0t1v2w"
		v.ArchiveKey = "archives/" + testWorkspaceID + "/01jb3x9zzq2m5n8p4r6s0t1v2w/home.tar.zst"
		v.Attempt = 2
		v.ArchiveURL = "s3://codehub/" + v.ArchiveKey
		v.VariablePath = "nomad/jobs/" + v.JobID
	}
	return v
}

// prebuildValues makes an archive job a prebuild's, as the nomad
// backend does.
func prebuildValues(v *Values) {
	v.Prebuild = true
	v.ArchiveKey = "archives/" + testWorkspaceID + "/" + v.OpID + "/web/0a1b2c3d4e5f"
	v.ArchiveURL = "s3://codehub/" + v.ArchiveKey
	v.VariablePath = "nomad/jobs/" + v.JobID + "/archive/archive"
	v.FirstStartScript = "echo first start\n"
	v.FirstStartVariablePath = "nomad/jobs/" + v.JobID + "/archive/build"
	v.FirstStartInit = true
	v.CPU, v.Memory = 2000, 4096
	v.Env = SortedEnv(map[string]string{"GOFLAGS": "-mod=mod"})
}

func TestRenderGolden(t *testing.T) {
	r, err := NewRenderer("")
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name   string
		kind   Kind
		driver string
		edit   func(*Values)
	}{
		{"workspace-docker", KindWorkspace, "docker", nil},
		{"workspace-exec", KindWorkspace, "exec", nil},
		{"workspace-raw_exec", KindWorkspace, "raw_exec", nil},
		{"workspace-raw_exec-token", KindWorkspace, "raw_exec", func(v *Values) {
			v.TokenVariablePath = "nomad/jobs/" + v.JobID
		}},
		// What the nomad backend renders from network_mode = "host": no
		// container port (nomad's TestRenderDockerPortFromConfig).
		{"workspace-docker-host-network", KindWorkspace, "docker", func(v *Values) {
			v.NetworkMode = "host"
			v.Port = 0
			v.Args = []string{"--bind-addr", "0.0.0.0:%PORT%", "--auth", "password", "%HOME%"}
		}},
		// A template's resources and environment.
		{"workspace-raw_exec-template", KindWorkspace, "raw_exec", func(v *Values) {
			v.CPU, v.Memory, v.MemoryMax = 2000, 4096, 8192
			v.Env = SortedEnv(map[string]string{"GOFLAGS": "-mod=mod", "GREETING": `say "${hi}"`})
		}},
		// A first start that clones; the URLs and the credential are in
		// the variable.
		{"workspace-raw_exec-first-start", KindWorkspace, "raw_exec", func(v *Values) {
			v.FirstStartScript = "echo first start\n"
			v.FirstStartVariablePath = "nomad/jobs/" + v.JobID
		}},
		{"workspace-docker-first-start", KindWorkspace, "docker", func(v *Values) {
			v.FirstStartScript = "echo first start\n"
			v.FirstStartVariablePath = "nomad/jobs/" + v.JobID
		}},
		// A first start that runs the template's init: the task gets the
		// program's environment and resources.
		{"workspace-docker-first-start-init", KindWorkspace, "docker", func(v *Values) {
			v.FirstStartScript = "echo first start\n"
			v.FirstStartVariablePath = "nomad/jobs/" + v.JobID
			v.FirstStartInit = true
			v.CPU, v.Memory, v.MemoryMax = 2000, 4096, 8192
			v.Env = SortedEnv(map[string]string{"GOPROXY": "https://proxy.internal", "GOFLAGS": "-mod=mod"})
		}},
		// A template's parameters: the user's values are in the variable.
		{"workspace-raw_exec-user-env", KindWorkspace, "raw_exec", func(v *Values) {
			v.UserEnvVariablePath = "nomad/jobs/" + v.JobID
		}},
		// The stop-archive task fetching codehub as the archive job does.
		{"workspace-exec-artifact", KindWorkspace, "exec", func(v *Values) {
			v.ArtifactURL = "https://codehub.example.com/dl/codehub"
			v.ArtifactChecksum = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
		}},
		// Under the workspace agent, fetched from the server or found on
		// the node.
		{"workspace-raw_exec-agent", KindWorkspace, "raw_exec", func(v *Values) {
			v.AgentVariablePath = "nomad/jobs/" + v.JobID
		}},
		{"workspace-exec-agent-artifact", KindWorkspace, "exec", func(v *Values) {
			v.AgentVariablePath = "nomad/jobs/" + v.JobID
			v.ArtifactURL = "https://codehub.example.com/dl/codehub"
			v.ArtifactChecksum = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
		}},
		// Docker: codehub from the task directory in front of the
		// entrypoint, with host networking and with a bridge.
		{"workspace-docker-agent-host-network", KindWorkspace, "docker", func(v *Values) {
			v.AgentVariablePath = "nomad/jobs/" + v.JobID
			v.NetworkMode, v.Port = "host", 0
			v.Entrypoint = []string{"/usr/bin/entrypoint.sh"}
			v.ArtifactURL = "https://codehub.example.com/dl/codehub.tar"
			v.ArtifactChecksum = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
		}},
		{"workspace-docker-agent", KindWorkspace, "docker", func(v *Values) {
			v.AgentVariablePath = "nomad/jobs/" + v.JobID
			v.Entrypoint = []string{"/usr/bin/entrypoint.sh"}
			v.ArtifactURL = "https://codehub.example.com/dl/codehub.tar"
			v.ArtifactChecksum = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
		}},
		// An operator's own template, or a start without a run: no
		// stop-archive task.
		{"workspace-raw_exec-no-stop-archive", KindWorkspace, "raw_exec", func(v *Values) {
			v.StopArchiveURL, v.StopVariablePath = "", ""
		}},
		// A run that started from an archive: its stop archive uploads
		// only what changed since.
		{"workspace-docker-parent", KindWorkspace, "docker", func(v *Values) {
			v.ArchiveParent = "archives/" + testWorkspaceID + "/01jb3x9zzq2m5n8p4r6s0t1v2w/home.tar.zst"
		}},
		{"archive-docker", KindArchive, "docker", nil},
		{"archive-raw_exec-parent", KindArchive, "raw_exec", func(v *Values) {
			v.ArchiveParent = "archives/" + testWorkspaceID + "/01jb3x7k9q2m5n8p4r6s0t1v2w/home.tar.zst"
		}},
		{"archive-raw_exec", KindArchive, "raw_exec", nil},
		// A prebuild: its build task runs the first start with init
		// before the mover archives under the prefix the commit completes;
		// each task reads its own variable.
		{"archive-raw_exec-prebuild", KindArchive, "raw_exec", prebuildValues},
		{"archive-docker-prebuild", KindArchive, "docker", prebuildValues},
		{"archive-raw_exec-backup", KindArchive, "raw_exec", func(v *Values) {
			v.ArchiveParent = "archives/" + testWorkspaceID + "/01jb3x7k9q2m5n8p4r6s0t1v2w/home.tar.zst"
			v.Backup = true
		}},
		{"archive-exec-artifact", KindArchive, "exec", func(v *Values) {
			v.ArtifactURL = "https://codehub.example.com/dl/codehub"
			v.ArtifactChecksum = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
		}},
		{"restore-raw_exec", KindRestore, "raw_exec", nil},
		{"restore-docker-region", KindRestore, "docker", func(v *Values) { v.Region = "eu" }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			v := baseValues(tc.kind, tc.driver)
			if tc.edit != nil {
				tc.edit(&v)
			}
			got, err := r.Render(tc.kind, v)
			if err != nil {
				t.Fatal(err)
			}
			golden := filepath.Join("testdata", tc.name+".golden")
			if *update {
				if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run go test ./jobspecs -update to create it)", err)
			}
			if got != string(want) {
				t.Errorf("rendered %s differs from %s (run with -update after checking the diff):\n%s", tc.name, golden, got)
			}
		})
	}
}

// The upstream token reaches the workspace only through the template block
// reading its variable: Values cannot carry it, and no line of the HCL may
// assign HASHED_PASSWORD anything but the template's lookup.
func TestWorkspaceTokenOnlyFromVariable(t *testing.T) {
	r, err := NewRenderer("")
	if err != nil {
		t.Fatal(err)
	}
	for _, driver := range []string{"docker", "exec", "raw_exec"} {
		t.Run(driver, func(t *testing.T) {
			v := baseValues(KindWorkspace, driver)
			plain, err := r.Render(KindWorkspace, v)
			if err != nil {
				t.Fatal(err)
			}
			if strings.Contains(plain, "HASHED_PASSWORD") || strings.Contains(plain, "nomadVar "+quote("nomad/jobs/"+v.JobID)) {
				t.Fatalf("workspace without a token variable reads one:\n%s", plain)
			}

			v.TokenVariablePath = "nomad/jobs/" + v.JobID
			got, err := r.Render(KindWorkspace, v)
			if err != nil {
				t.Fatal(err)
			}
			if want := `{{ with nomadVar "nomad/jobs/ws-` + testWorkspaceID + `" }}`; !strings.Contains(got, want) {
				t.Errorf("rendered HCL lacks %q", want)
			}
			var assignments []string
			for _, line := range strings.Split(got, "\n") {
				if strings.Contains(line, "HASHED_PASSWORD") {
					assignments = append(assignments, strings.TrimSpace(line))
				}
			}
			if len(assignments) != 1 || assignments[0] != "HASHED_PASSWORD={{ .token }}" {
				t.Fatalf("HASHED_PASSWORD lines = %q, want only the template's lookup", assignments)
			}
		})
	}
}

func TestRenderFailsOnMissingValue(t *testing.T) {
	r, err := NewRenderer("")
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		kind Kind
		edit func(*Values)
	}{
		{"no image", KindWorkspace, func(v *Values) { v.Image = "" }},
		{"no volume", KindWorkspace, func(v *Values) { v.VolumeName = "" }},
		{"no datacenters", KindWorkspace, func(v *Values) { v.Datacenters = nil }},
		{"no memory", KindWorkspace, func(v *Values) { v.Memory = 0 }},
		{"no variable path", KindArchive, func(v *Values) { v.VariablePath = "" }},
		{"no archive url", KindRestore, func(v *Values) { v.ArchiveURL = "" }},
		{"artifact without checksum", KindArchive, func(v *Values) {
			v.Driver = "exec"
			v.ArtifactURL = "https://codehub.example.com/dl/codehub"
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			v := baseValues(tc.kind, "docker")
			tc.edit(&v)
			_, err := r.Render(tc.kind, v)
			if !errors.Is(err, errMissing) {
				t.Fatalf("err = %v, want a missing value error", err)
			}
		})
	}
}

func TestOperatorTemplates(t *testing.T) {
	dir := t.TempDir()
	for _, k := range Kinds {
		text := `job [[ hcl .JobID ]] { meta = { "kind" = "` + string(k) + `" } }`
		if err := os.WriteFile(filepath.Join(dir, k.FileName()), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	r, err := NewRenderer(dir)
	if err != nil {
		t.Fatal(err)
	}
	got, err := r.Render(KindRestore, Values{JobID: "ws-x-restore"})
	if err != nil {
		t.Fatal(err)
	}
	if want := `job "ws-x-restore" { meta = { "kind" = "restore" } }`; got != want {
		t.Fatalf("got %q, want %q", got, want)
	}

	// A key the values do not have fails the render, not silently empty.
	bad := `job [[ .NoSuchKey ]] {}`
	if err := os.WriteFile(filepath.Join(dir, KindWorkspace.FileName()), []byte(bad), 0o644); err != nil {
		t.Fatal(err)
	}
	r, err = NewRenderer(dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.Render(KindWorkspace, Values{}); err == nil || !strings.Contains(err.Error(), "NoSuchKey") {
		t.Fatalf("err = %v, want an error naming the missing key", err)
	}

}

// writeTemplates puts an operator's template files, by name, in a new dir.
func writeTemplates(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, text := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// renderGolden renders kind with the base values of driver and checks the
// text against a golden file of TestRenderGolden.
func renderGolden(t *testing.T, r *Renderer, kind Kind, driver, golden string) string {
	t.Helper()
	got, err := r.Render(kind, baseValues(kind, driver))
	if err != nil {
		t.Fatal(err)
	}
	want, err := os.ReadFile(filepath.Join("testdata", golden+".golden"))
	if err != nil {
		t.Fatal(err)
	}
	if got != string(want) {
		t.Errorf("%s rendered:\n%s\nwant %s.golden", kind, got, golden)
	}
	return got
}

// An operator who replaces one template gets the embedded others, and
// the shared helpers in their own: here an archive job of their own
// around the embedded data mover task.
func TestOperatorOverridesOneTemplate(t *testing.T) {
	dir := writeTemplates(t, map[string]string{
		KindArchive.FileName(): `# Our archive of [[ .WorkspaceID ]].
job [[ hcl .JobID ]] {
  type = "batch"
  priority = 30
  group "archive" {
    [[ template "mover_task" (mover . "archive") ]]
  }
}
`,
		"README": "notes of the operator, not a template",
	})
	r, err := NewRenderer(dir)
	if err != nil {
		t.Fatal(err)
	}
	got, err := r.Render(KindArchive, baseValues(KindArchive, "raw_exec"))
	if err != nil {
		t.Fatal(err)
	}
	embedded := renderGolden(t, mustRenderer(t, ""), KindArchive, "raw_exec", "archive-raw_exec")
	task := embedded[strings.Index(embedded, `    task "archive" {`):strings.LastIndex(embedded, "    }")]
	if !strings.HasPrefix(got, "# Our archive of "+testWorkspaceID) || !strings.Contains(got, "priority = 30") || !strings.Contains(got, task) {
		t.Errorf("operator's archive rendered:\n%s\nwant its own job around the embedded task:\n%s", got, task)
	}
	renderGolden(t, r, KindRestore, "raw_exec", "restore-raw_exec")
	renderGolden(t, r, KindWorkspace, "raw_exec", "workspace-raw_exec")
}

// An operator's helpers replace the embedded defines of the same name in
// every job, and a define in a job's own file replaces one in that job
// only; the defines they leave alone stay the embedded ones.
func TestOperatorOverridesHelpers(t *testing.T) {
	helpers := `[[ define "mover_args" ]]["nice", "-n", "10", "codehub", "job", [[ hcl .Op ]], [[ hcl .HomeDir ]]][[ end ]]`
	r, err := NewRenderer(writeTemplates(t, map[string]string{HelpersFile: helpers}))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		kind Kind
		want string
	}{
		{KindArchive, `args    = ["nice", "-n", "10", "codehub", "job", "archive", "/opt/`},
		{KindRestore, `args    = ["nice", "-n", "10", "codehub", "job", "restore", "/opt/`},
		{KindWorkspace, `args    = ["nice", "-n", "10", "codehub", "job", "archive", "/opt/`},
	} {
		got, err := r.Render(tc.kind, baseValues(tc.kind, "raw_exec"))
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(got, tc.want) || !strings.Contains(got, `kill_timeout = "30s"`) {
			t.Errorf("%s rendered:\n%s\nwant the operator's args %q in the embedded task", tc.kind, got, tc.want)
		}
	}

	// A job's own define wins over the helpers' in that job alone.
	restore := `[[ define "mover_args" ]]["restore-only"][[ end ]]` +
		`[[ template "mover_job" (mover . "restore") ]]`
	r, err = NewRenderer(writeTemplates(t, map[string]string{HelpersFile: helpers, KindRestore.FileName(): restore}))
	if err != nil {
		t.Fatal(err)
	}
	got, err := r.Render(KindRestore, baseValues(KindRestore, "raw_exec"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(got, `args    = ["restore-only"]`) {
		t.Errorf("restore rendered:\n%s\nwant its own args", got)
	}
	got, err = r.Render(KindArchive, baseValues(KindArchive, "raw_exec"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(got, `"nice", "-n", "10"`) {
		t.Errorf("archive rendered:\n%s\nwant the helpers' args", got)
	}
}

// A dir that is missing, holds no template, or holds a file named like a
// template codehub does not know is refused, not quietly left unused.
func TestOperatorTemplateDirRefused(t *testing.T) {
	if _, err := NewRenderer(filepath.Join(t.TempDir(), "nope")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing dir: err = %v, want not-exist", err)
	}
	if _, err := NewRenderer(writeTemplates(t, map[string]string{"README": "x"})); !errors.Is(err, errNoTemplates) {
		t.Errorf("no template: err = %v, want errNoTemplates", err)
	}
	for _, name := range []string{"archives.nomad.hcl", "helpers.tpl"} {
		dir := writeTemplates(t, map[string]string{name: "job {}", KindRestore.FileName(): "job {}"})
		if _, err := NewRenderer(dir); !errors.Is(err, errUnknownTemplate) || !strings.Contains(err.Error(), name) {
			t.Errorf("%s: err = %v, want errUnknownTemplate naming it", name, err)
		}
	}
	broken := writeTemplates(t, map[string]string{HelpersFile: `[[ define "mover_task" ]]`})
	if _, err := NewRenderer(broken); err == nil || !strings.Contains(err.Error(), filepath.Join(broken, HelpersFile)) {
		t.Errorf("broken helpers: err = %v, want a parse error naming the file", err)
	}
}

// A data mover task a template names that does not exist fails the render.
func TestRenderRefusesUnknownMoverTask(t *testing.T) {
	dir := writeTemplates(t, map[string]string{
		KindArchive.FileName(): `[[ template "mover_job" (mover . "prebuild") ]]`,
	})
	r := mustRenderer(t, dir)
	if _, err := r.Render(KindArchive, baseValues(KindArchive, "raw_exec")); !errors.Is(err, errUnknownMover) {
		t.Errorf("err = %v, want errUnknownMover", err)
	}
}

func mustRenderer(t *testing.T, dir string) *Renderer {
	t.Helper()
	r, err := NewRenderer(dir)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestQuote(t *testing.T) {
	cases := map[string]string{
		`plain`:         `"plain"`,
		`a"b\c`:         `"a\"b\\c"`,
		"line\nbreak\t": `"line\nbreak\t"`,
		`${attr.x}`:     `"$${attr.x}"`,
		`%{ if x }`:     `"%%{ if x }"`,
		`$HOME 100%`:    `"$HOME 100%"`,
		"bell\x07":      `"bell\u0007"`,
		"unicode é 한국어": `"unicode é 한국어"`,
	}
	for in, want := range cases {
		if got := quote(in); got != want {
			t.Errorf("quote(%q) = %s, want %s", in, got, want)
		}
	}
}

func TestArgvPlaceholders(t *testing.T) {
	got := argv([]string{"--bind-addr", "127.0.0.1:%PORT%", "%HOME%/project", "${NOT_INTERPOLATED}"}, `/data/my "home"`)
	want := `["--bind-addr", "127.0.0.1:${NOMAD_PORT_http}", "/data/my \"home\"/project", "$${NOT_INTERPOLATED}"]`
	if got != want {
		t.Fatalf("argv = %s, want %s", got, want)
	}

	// A placeholder's closing % next to a brace, or a home ending in one,
	// must not open an HCL template directive.
	for home, want := range map[string]string{
		"/h":  `["${NOMAD_PORT_http}{x}", "/h{y}", "a%%{z}"]`,
		"/h%": `["${NOMAD_PORT_http}{x}", "/h%%{y}", "a%%{z}"]`,
	} {
		if got := argv([]string{"%PORT%{x}", "%HOME%{y}", "a%{z}"}, home); got != want {
			t.Errorf("argv with home %q = %s, want %s", home, got, want)
		}
	}
}

func TestParseKind(t *testing.T) {
	for _, k := range Kinds {
		got, err := ParseKind(string(k))
		if err != nil || got != k {
			t.Fatalf("ParseKind(%q) = %q, %v", k, got, err)
		}
	}
	if _, err := ParseKind("service"); err == nil {
		t.Fatal("ParseKind accepted an unknown kind")
	}
}

// TestArgvMeansTheArguments parses argv's output as HCL does and checks
// that every argument comes back as written, with only the placeholders
// replaced: no character of an argument may open or escape a template
// sequence, whatever stands next to a placeholder.
func TestArgvMeansTheArguments(t *testing.T) {
	const port = "4242"
	for _, tc := range []struct{ home, arg, want string }{
		{"/h", "127.0.0.1:%PORT%", "127.0.0.1:4242"},
		{"/h", "%PORT%{x}", "4242{x}"},
		{"/h", "%HOME%{y}", "/h{y}"},
		{"/h%", "%HOME%{y}", "/h%{y}"},
		{"/h$", "%HOME%{y}", "/h${y}"},
		{"/h", "a%{z}", "a%{z}"},
		{"/h", "${NOT_INTERPOLATED}", "${NOT_INTERPOLATED}"},
		{"/h", "x$%PORT%", "x$4242"},
		{"/h", "x%%PORT%", "x%4242"},
		{"/h$", "%HOME%%PORT%", "/h$4242"},
		{"/h", "$$%PORT%$", "$$4242$"},
		{`/da"ta\`, `%HOME%/a "b"`, `/da"ta\/a "b"`},
	} {
		src := argv([]string{tc.arg}, tc.home)
		expr, diags := hclsyntax.ParseExpression([]byte(src), "argv.hcl", hcl.InitialPos)
		if diags.HasErrors() {
			t.Errorf("argv(%q, home %q) = %s: %v", tc.arg, tc.home, src, diags)
			continue
		}
		v, diags := expr.Value(&hcl.EvalContext{Variables: map[string]cty.Value{"NOMAD_PORT_http": cty.StringVal(port)}})
		if diags.HasErrors() {
			t.Errorf("argv(%q, home %q) = %s: %v", tc.arg, tc.home, src, diags)
			continue
		}
		if got := v.Index(cty.NumberIntVal(0)).AsString(); got != tc.want {
			t.Errorf("argv(%q, home %q) = %s, which means %q, want %q", tc.arg, tc.home, src, got, tc.want)
		}
	}
}

// An environment name HCL could not hold unquoted fails the render
// instead of producing a jobspec Nomad would read otherwise.
func TestRenderRefusesEnvironmentNames(t *testing.T) {
	r, err := NewRenderer("")
	if err != nil {
		t.Fatal(err)
	}
	v := baseValues(KindWorkspace, "raw_exec")
	v.Env = []EnvVar{{Name: "A = 1\n  B", Value: "x"}}
	if _, err := r.Render(KindWorkspace, v); !errors.Is(err, errNotIdentifier) {
		t.Errorf("err = %v, want errNotIdentifier", err)
	}
}

// EnvFile's text is read by Nomad's parser of environment files, which
// knows double quotes with JSON's escapes and interpolates nothing.
func TestEnvFile(t *testing.T) {
	for _, tc := range []struct {
		name, value, want string
	}{
		{"plain", "https://example.com/r.git", `A="https://example.com/r.git"` + "\n"},
		{"nomad interpolation", "${node.unique.name}", `A="${node.unique.name}"` + "\n"},
		{"metadata", "https://x/${meta.secret}", `A="https://x/${meta.secret}"` + "\n"},
		{"HCL escape", "$${x}", `A="$${x}"` + "\n"},
		{"directive", "%{ if true }x%{ endif }", `A="%{ if true }x%{ endif }"` + "\n"},
		{"quotes and backslashes", `say "hi" \ 'there'`, `A="say \"hi\" \\ 'there'"` + "\n"},
		{"lines", "one\ntwo\r\tthree", `A="one\ntwo\r\tthree"` + "\n"},
		{"control bytes", "a\x01b\x7f", `A="a\u0001b\u007f"` + "\n"},
		{"comment sign and spaces", "  # not a comment ", `A="  # not a comment "` + "\n"},
		{"utf-8", "héllo ✓", `A="héllo ✓"` + "\n"},
		{"empty", "", `A=""` + "\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := EnvFile([]EnvVar{{"A", tc.value}})
			if err != nil || got != tc.want {
				t.Errorf("EnvFile(%q) = %q, %v; want %q", tc.value, got, err, tc.want)
			}
		})
	}
	got, err := EnvFile([]EnvVar{{"A", "1"}, {"B_2", "2"}})
	if err != nil || got != "A=\"1\"\nB_2=\"2\"\n" {
		t.Errorf("two variables: %q, %v", got, err)
	}
	if _, err := EnvFile([]EnvVar{{"A=B", "x"}}); !errors.Is(err, errNotIdentifier) {
		t.Errorf("a bad name: %v, want errNotIdentifier", err)
	}
	if _, err := EnvFile([]EnvVar{{"A", "a\x00b"}}); !errors.Is(err, errNUL) {
		t.Errorf("a NUL byte: %v, want errNUL", err)
	}
}
