package e2e

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/codehub-io/codehub/internal/nomadtest"
)

// dockerEngine is a private dockerd started by scripts/docker-test-engine.sh
// with the test's two images loaded.
type dockerEngine struct {
	endpoint, image, jobImage string
}

// startDockerEngine starts the engine, or skips when this machine has no
// dockerd or the test does not run as root (dockerd needs it).
func startDockerEngine(t *testing.T, codeServer string) dockerEngine {
	t.Helper()
	if _, err := exec.LookPath("dockerd"); err != nil {
		t.Skip("no dockerd on PATH: the docker driver test needs a Docker engine (Debian's docker.io)")
	}
	if os.Geteuid() != 0 {
		t.Skip("the docker driver test starts its own dockerd, which needs root")
	}
	// Short: the engine's sockets live under it.
	dir, err := os.MkdirTemp("", "chd-")
	if err != nil {
		t.Fatal(err)
	}
	script := filepath.Join("..", "scripts", "docker-test-engine.sh")
	csDir := filepath.Dir(filepath.Dir(codeServer))
	t.Cleanup(func() {
		if out, err := exec.Command(script, "stop", dir).CombinedOutput(); err != nil {
			t.Errorf("stop docker engine: %v\n%s", err, out)
		}
	})
	if out, err := exec.Command(script, "start", dir, csDir).CombinedOutput(); err != nil {
		t.Fatalf("start docker engine: %v\n%s", err, out)
	}
	env, err := os.ReadFile(filepath.Join(dir, "env"))
	if err != nil {
		t.Fatal(err)
	}
	vars := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(env))
	for sc.Scan() {
		if k, v, ok := strings.Cut(strings.TrimPrefix(sc.Text(), "export "), "="); ok {
			vars[k] = v
		}
	}
	return dockerEngine{
		endpoint: vars["CODEHUB_TEST_DOCKER_ENDPOINT"],
		image:    vars["CODEHUB_TEST_DOCKER_IMAGE"],
		jobImage: vars["CODEHUB_TEST_DOCKER_JOB_IMAGE"],
	}
}

// docker runs the docker CLI against the engine.
func (e dockerEngine) docker(t *testing.T, stdin []byte, args ...string) string {
	t.Helper()
	cmd := exec.Command("docker", args...)
	cmd.Env = append(os.Environ(), "DOCKER_HOST="+e.endpoint)
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("docker %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out))
}

// container is the running workspace container of wsID.
func (e dockerEngine) container(t *testing.T, agent *nomadtest.Agent, wsID string) string {
	t.Helper()
	allocs, _, err := agent.Client.Jobs().Allocations("ws-"+wsID, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range allocs {
		if a.ClientStatus == "running" {
			if id := e.docker(t, nil, "ps", "-q", "--filter", "label=com.hashicorp.nomad.alloc_id="+a.ID); id != "" {
				return id
			}
		}
	}
	t.Fatalf("no running container for workspace %s", wsID)
	return ""
}

// dockerNomadConfig starts a private docker engine with the locally built
// images and a Nomad agent using it, and returns a server configuration
// running workspaces there under the docker driver with host networking,
// as 1000:1000.
func dockerNomadConfig(t *testing.T) (serverConfig, *nomadtest.Agent, dockerEngine) {
	t.Helper()
	nomadtest.Binary(t)
	cfg := localConfig(t)
	engine := startDockerEngine(t, cfg.codeServer)
	agent := nomadtest.Start(t, fmt.Sprintf(`
plugin "docker" {
  config {
    endpoint = %q
    gc {
      image = false
    }
  }
}
`, engine.endpoint), "docker")
	cfg.backend = fmt.Sprintf(`backend "nomad" {
  address      = %q
  driver       = "docker"
  network_mode = "host"
  job_image    = %q
`+aclOptOut+`}

workspace {
  image = %q
  uid   = 1000
  gid   = 1000
  %s
}
`, agent.Addr, engine.jobImage, engine.image, codeServerWorkspace)
	return cfg, agent, engine
}

// TestNomadDockerWorkspaceLifecycle is the lifecycle test on the docker
// driver with host networking, as an engine without a bridge needs: the
// configuration keeps workspace.port at its default (8080, which host
// networking must not map), the image's ENTRYPOINT carries arguments of
// its own like the official image's, and everything runs as 1000:1000.
func TestNomadDockerWorkspaceLifecycle(t *testing.T) {
	cfg, agent, engine := dockerNomadConfig(t)

	nomadLifecycle(t, agent, cfg, nomadDriver{
		home: func(*testing.T, string) string { return "/home/coder" },
		write: func(t *testing.T, wsID, name string, content []byte) {
			c := engine.container(t, agent, wsID)
			engine.docker(t, content, "exec", "-i", c, "sh", "-c", "cat > /home/coder/"+name)
		},
		running: func(t *testing.T, wsID string) {
			c := engine.container(t, agent, wsID)
			if id := engine.docker(t, nil, "exec", c, "id", "-u"); id != "1000" {
				t.Errorf("workspace runs as uid %s, want 1000", id)
			}
			if id := engine.docker(t, nil, "exec", c, "id", "-g"); id != "1000" {
				t.Errorf("workspace runs as gid %s, want 1000", id)
			}
			// The program's own arguments, once: no second --bind-addr
			// and no stray folder from the image's ENTRYPOINT.
			argv := strings.Split(strings.TrimRight(engine.docker(t, nil, "exec", c, "cat", "/proc/1/cmdline"), "\x00"), "\x00")
			if n := countArg(argv, "--bind-addr"); n != 1 {
				t.Errorf("code-server got --bind-addr %d times: %q", n, argv)
			}
			if countArg(argv, ".") != 0 {
				t.Errorf("code-server got the image's folder argument: %q", argv)
			}
		},
		restored: func(t *testing.T, path string) {
			fi, err := os.Stat(path)
			if err != nil {
				t.Fatal(err)
			}
			st := fi.Sys().(*syscall.Stat_t)
			if st.Uid != 1000 || st.Gid != 1000 {
				t.Errorf("restored file belongs to %d:%d, want 1000:1000", st.Uid, st.Gid)
			}
		},
	})
}

func countArg(argv []string, arg string) int {
	n := 0
	for _, a := range argv {
		if a == arg {
			n++
		}
	}
	return n
}
