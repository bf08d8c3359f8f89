// Package nomadtest starts real Nomad agents for end-to-end tests: a
// `nomad agent -dev` on loopback from the nomad binary on PATH, with
// raw_exec enabled, cloud fingerprinting off and its state in a temp dir.
// Tests that need one skip, saying why, when no binary is on PATH.
package nomadtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/codehub-io/codehub/internal/testenv"
)

// Agent is a real `nomad agent -dev` on loopback.
type Agent struct {
	// Addr is the agent's HTTP API URL.
	Addr           string
	HostVolumesDir string
	// PID is the agent process's, for a benchmark to read its memory.
	PID    int
	Client *api.Client
	Log    *LockedBuffer
	// ManagementToken is the bootstrap token's secret when extra enabled
	// ACLs; Client carries it.
	ManagementToken string
}

// LockedBuffer collects output written from several goroutines.
type LockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *LockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *LockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// Binary returns the nomad binary on PATH or skips the test.
func Binary(t testing.TB) string {
	t.Helper()
	path, err := exec.LookPath("nomad")
	if err != nil {
		t.Skip("no nomad binary on PATH: the Nomad end-to-end tests need one (see docs/nomad.md)")
	}
	return path
}

// Start starts the agent and waits until its client node is ready
// with raw_exec (and the drivers named in drivers) healthy. extra is added
// to the agent configuration; when it makes the agent enforce ACLs, they
// are bootstrapped and the client uses the management token. The agent is
// stopped when the test ends.
func Start(t testing.TB, extra string, drivers ...string) *Agent {
	t.Helper()
	return StartWith(t, Options{Extra: extra, Drivers: drivers})
}

// Options are what StartWith adds to the dev agent Start runs.
type Options struct {
	// Extra is added to the agent configuration, as Start's extra.
	Extra string
	// Client is added inside the client block: a scale test's node
	// capacity (memory_total_mb, cpu_total_compute), for one.
	Client string
	// Drivers must be healthy, with raw_exec, before the agent counts as
	// started.
	Drivers []string
}

// StartWith is Start with more of the agent's configuration.
func StartWith(t testing.TB, o Options) *Agent {
	t.Helper()
	extra, drivers := o.Extra, o.Drivers
	bin := Binary(t)
	// Not t.TempDir: the agent leaves task mounts (secrets tmpfs) behind,
	// which must be unmounted before the directory can be removed.
	dir, err := os.MkdirTemp("", "codehub-nomad-agent-")
	if err != nil {
		t.Fatal(err)
	}
	httpPort, rpcPort, serfPort := testenv.FreePort(t), testenv.FreePort(t), testenv.FreePort(t)
	a := &Agent{
		Addr:           fmt.Sprintf("http://127.0.0.1:%d", httpPort),
		HostVolumesDir: filepath.Join(dir, "host_volumes"),
		Log:            &LockedBuffer{},
	}
	cfg := fmt.Sprintf(agentBase, filepath.Join(dir, "data"), httpPort, rpcPort, serfPort) + fmt.Sprintf(`
client {
  enabled           = true
  network_interface = "lo"
  host_volumes_dir  = %q
  options = {
    %s
  }
%s
}
`, a.HostVolumesDir, fingerprintDenylist, o.Client) + rawExecPlugin + extra
	cfgPath := filepath.Join(dir, "agent.hcl")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, bin, "agent", "-dev", "-config", cfgPath)
	cmd.Stdout, cmd.Stderr = a.Log, a.Log
	cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) }
	cmd.WaitDelay = 20 * time.Second
	if err := cmd.Start(); err != nil {
		cancel()
		t.Fatal(err)
	}
	a.PID = cmd.Process.Pid
	t.Cleanup(func() {
		cancel()
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("nomad agent log:\n%s", a.Log.String())
		}
		RemoveDir(t, dir)
	})

	client, err := api.NewClient(&api.Config{Address: a.Addr})
	if err != nil {
		t.Fatal(err)
	}
	a.Client = client
	drivers = append(drivers, "raw_exec")
	Eventually(t, 60*time.Second, fmt.Sprintf("nomad client node ready with %v", drivers), func() bool {
		nodes, _, err := client.Nodes().List(nil)
		if forbidden(err) && a.ManagementToken == "" {
			a.bootstrapACL(t)
			return false
		}
		if err != nil || len(nodes) == 0 || nodes[0].Status != "ready" {
			return false
		}
		for _, name := range drivers {
			if d := nodes[0].Drivers[name]; d == nil || !d.Healthy {
				return false
			}
		}
		return true
	})
	return a
}

// bootstrapACL takes the agent's one-time management token once its server
// can answer; until then the caller's poll simply tries again.
func (a *Agent) bootstrapACL(t testing.TB) {
	t.Helper()
	token, _, err := a.Client.ACLTokens().Bootstrap(nil)
	if err != nil {
		t.Logf("acl bootstrap: %v", err)
		return
	}
	a.ManagementToken = token.SecretID
	a.Client.SetSecretID(token.SecretID)
}

// Eventually polls cond until it holds; limit only bounds a hung system
// (the assertion is the condition, never the time it took).
func Eventually(t testing.TB, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting for %s after %s", what, limit)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// BuildProgram builds a main package into dir and returns the binary path.
func BuildProgram(t testing.TB, dir, pkg, name string) string {
	t.Helper()
	out := filepath.Join(dir, name)
	cmd := exec.Command("go", "build", "-o", out, pkg)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build %s: %v\n%s", pkg, err, b)
	}
	return out
}

// RemoveDir ends the processes an agent left running under dir, unmounts
// what it left mounted there, deepest first, then removes dir.
func RemoveDir(t testing.TB, dir string) {
	t.Helper()
	killLeftovers(t, dir)
	info, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Logf("read mountinfo: %v", err)
	}
	var mounts []string
	for _, line := range strings.Split(string(info), "\n") {
		fields := strings.Fields(line)
		if len(fields) > 4 && strings.HasPrefix(fields[4], dir+"/") {
			mounts = append(mounts, fields[4])
		}
	}
	sort.Sort(sort.Reverse(sort.StringSlice(mounts)))
	for _, m := range mounts {
		if err := syscall.Unmount(m, syscall.MNT_DETACH); err != nil {
			t.Logf("unmount %s: %v", m, err)
		}
	}
	if err := os.RemoveAll(dir); err != nil {
		t.Errorf("remove agent dir: %v", err)
	}
}

func forbidden(err error) bool {
	var e api.UnexpectedResponseError
	if errors.As(err, &e) && e.HasStatusCode() {
		return e.StatusCode() == http.StatusForbidden
	}
	var p *api.UnexpectedResponseError
	return errors.As(err, &p) && p != nil && p.HasStatusCode() && p.StatusCode() == http.StatusForbidden
}

// killLeftovers ends, with SIGKILL, every process that still works under
// dir: the helpers (executor, logmon) and tasks of an agent a test
// killed, which run on as orphans, as on a node whose agent died. Left
// alone they outlive the test run, holding memory, ports and cgroups.
// It waits until they are gone, so their files can be removed.
func killLeftovers(t testing.TB, dir string) {
	t.Helper()
	prefix := dir + "/"
	under := func(path string) bool {
		return strings.HasPrefix(strings.TrimSuffix(path, " (deleted)")+"/", prefix)
	}
	self := os.Getpid()
	left := testenv.Processes(func(p testenv.Proc) bool {
		if p.PID == self {
			return false
		}
		if under(p.Cwd) || slices.ContainsFunc(p.Args, func(a string) bool { return strings.Contains(a, prefix) }) {
			return true
		}
		fds, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", p.PID))
		return slices.ContainsFunc(fds, func(fd os.DirEntry) bool {
			target, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", p.PID, fd.Name()))
			return err == nil && under(target)
		})
	})
	if len(left) == 0 {
		return
	}
	for _, p := range left {
		_ = syscall.Kill(p.PID, syscall.SIGKILL)
	}
	t.Logf("killed %d processes left running under %s", len(left), dir)
	deadline := time.Now().Add(10 * time.Second)
	for _, p := range left {
		for !ended(p.PID) {
			if time.Now().After(deadline) {
				t.Logf("process %d still runs 10s after SIGKILL", p.PID)
				return
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
}

// ended reports whether process pid is gone or a zombie: dead, its exit
// status waiting for a parent to read it.
func ended(pid int) bool {
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return true
	}
	state, _ := testenv.Field(status, "State:")
	return strings.HasPrefix(state, "Z")
}
