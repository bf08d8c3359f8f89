package local

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"golang.org/x/crypto/ssh"

	"github.com/codehub-io/codehub/agent"
	"github.com/codehub-io/codehub/config"
	"github.com/codehub-io/codehub/controller"
	"github.com/codehub-io/codehub/internal/testenv"
)

// agentBackend runs the fake workspace program under the real codehub
// agent.
func agentBackend(t *testing.T) (*Backend, *agent.Keys) {
	t.Helper()
	key := make([]byte, 32)
	_, _ = rand.Read(key)
	keys, err := agent.NewKeys(key)
	if err != nil {
		t.Fatal(err)
	}
	b, err := New(hclog.NewNullLogger(), Options{
		DataDir:       t.TempDir(),
		Command:       fakeWorkspace,
		Args:          []string{"--listen", "127.0.0.1:" + config.PlaceholderPort},
		CodehubBinary: buildCodehub(t),
		Agent:         keys,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := b.StopAll(context.Background()); err != nil {
			t.Errorf("stop what the test left running: %v", err)
		}
	})
	return b, keys
}

// startWithAgent starts a workspace and returns its agent's client once the
// workspace is ready.
func startWithAgent(t *testing.T, b *Backend, keys *agent.Keys, wsID string) *agent.Client {
	t.Helper()
	ctx := context.Background()
	if err := b.ProvisionVolume(ctx, controller.VolumeSpec{WorkspaceID: wsID}); err != nil {
		t.Fatal(err)
	}
	if err := b.StartWorkspace(ctx, controller.WorkspaceSpec{WorkspaceID: wsID, RunID: "run1"}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, err := b.Resolve(ctx, wsID); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("workspace %s never ready", wsID)
		}
		time.Sleep(50 * time.Millisecond)
	}
	addr, err := b.ResolveAgent(ctx, wsID)
	if err != nil {
		t.Fatalf("ResolveAgent: %v", err)
	}
	return agent.Dial(addr, keys.Token(wsID, "run1"))
}

func sshRun(t *testing.T, c *agent.Client, keys *agent.Keys, wsID, command string) (string, error) {
	t.Helper()
	conn, err := c.DialSSH(context.Background())
	if err != nil {
		t.Fatalf("DialSSH: %v", err)
	}
	cc, chans, reqs, err := ssh.NewClientConn(conn, "workspace",
		&ssh.ClientConfig{User: "dev", HostKeyCallback: ssh.FixedHostKey(keys.HostPublicKey(wsID))})
	if err != nil {
		t.Fatalf("ssh handshake: %v", err)
	}
	client := ssh.NewClient(cc, chans, reqs)
	defer client.Close()
	s, err := client.NewSession()
	if err != nil {
		t.Fatal(err)
	}
	out, err := s.CombinedOutput(command)
	return strings.TrimSpace(string(out)), err
}

// TestAgentServesTheWorkspace: the agent runs with the program's home and
// environment, the server's token opens it and another run's does not, and
// a workspace's agent reaches its own listeners but not those of another
// workspace on the same machine.
func TestAgentServesTheWorkspace(t *testing.T) {
	b, keys := agentBackend(t)
	const other = "01jb3x7k9q2m5n8p4r6s0t1v2x"
	a := startWithAgent(t, b, keys, testID)
	o := startWithAgent(t, b, keys, other)
	ctx := context.Background()

	upstream, err := b.Resolve(ctx, testID)
	if err != nil {
		t.Fatal(err)
	}
	programHome := get(t, "http://"+upstream+"/home")
	home, err := sshRun(t, a, keys, testID, `echo "$HOME"; exit 3`)
	var exit *ssh.ExitError
	if !errors.As(err, &exit) || exit.ExitStatus() != 3 || home != programHome {
		t.Fatalf("ssh: home %q err %v; want the program's home %q and status 3", home, err, programHome)
	}

	// The program's own port is the workbench's: neither listed nor open.
	st := readState(t, b)
	ports, err := a.Ports(ctx)
	if err != nil || len(ports) != 0 {
		t.Fatalf("Ports = %v, %v; want none", ports, err)
	}
	if _, err := a.DialPort(ctx, st.Port); !errors.Is(err, agent.ErrRefused) {
		t.Fatalf("DialPort(program's port) = %v, want refused", err)
	}

	// A server started over SSH in the other workspace is its own.
	port := testenv.FreePort(t)
	if out, err := sshRun(t, o, keys, other, fakeWorkspace+" --listen 127.0.0.1:"+strconv.Itoa(port)+" >/dev/null 2>&1 &"); err != nil {
		t.Fatalf("start a server in %s: %v %s", other, err, out)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		ports, err := o.Ports(ctx)
		if err == nil && len(ports) == 1 && ports[0].Port == port {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Ports of %s = %v, %v; want [%d]", other, ports, err, port)
		}
		time.Sleep(50 * time.Millisecond)
	}
	conn, err := o.DialPort(ctx, port)
	if err != nil {
		t.Fatalf("DialPort of its own workspace: %v", err)
	}
	// On the server's machine the agent hands the connection over: the
	// server talks to the port itself, not through the agent.
	if _, ok := conn.(*net.TCPConn); !ok {
		t.Errorf("DialPort gave a %T, want the port's own TCP connection", conn)
	}
	conn.Close()
	if _, err := a.DialPort(ctx, port); !errors.Is(err, agent.ErrRefused) {
		t.Fatalf("DialPort of another workspace's port = %v, want refused", err)
	}
	if ports, err := a.Ports(ctx); err != nil || len(ports) != 0 {
		t.Fatalf("Ports lists another workspace's port: %v, %v", ports, err)
	}
	// Another run's token opens nothing.
	addr, _ := b.ResolveAgent(ctx, testID)
	if _, err := agent.Dial(addr, keys.Token(testID, "run0")).Ports(ctx); err == nil {
		t.Fatal("another run's token was accepted")
	}
	// Stopped, the workspace has no agent.
	if err := b.StopWorkspace(ctx, testID, controller.StopSave); err != nil {
		t.Fatal(err)
	}
	if _, err := b.ResolveAgent(ctx, testID); !errors.Is(err, controller.ErrNoUpstream) {
		t.Fatalf("ResolveAgent of a stopped workspace = %v", err)
	}
}

// TestAgentRunsAsTheWorkspaceUser: under a workspace user, SSH sessions
// are that user's, as the program is, with the program's home.
func TestAgentRunsAsTheWorkspaceUser(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("running workspaces as another user needs root; run the tests as root")
	}
	acct, err := lookupAccount(workspaceUser)
	if err != nil {
		t.Skipf("no user %s to run workspaces as: %v", workspaceUser, err)
	}
	base, err := os.MkdirTemp("", "codehub-local-agent-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	if err := os.Chmod(base, 0o711); err != nil {
		t.Fatal(err)
	}
	codehub := filepath.Join(base, "codehub")
	raw, err := os.ReadFile(buildCodehub(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(codehub, raw, 0o755); err != nil {
		t.Fatal(err)
	}
	key := make([]byte, 32)
	_, _ = rand.Read(key)
	keys, err := agent.NewKeys(key)
	if err != nil {
		t.Fatal(err)
	}
	b, err := New(hclog.NewNullLogger(), Options{
		DataDir:       filepath.Join(base, "data"),
		Command:       copyFakeWorkspace(t, base),
		Args:          []string{"--listen", "127.0.0.1:" + config.PlaceholderPort},
		User:          workspaceUser,
		CodehubBinary: codehub,
		Agent:         keys,
	})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { _ = b.StopAll(context.Background()) })
	c := startWithAgent(t, b, keys, testID)
	program := strings.Fields(ask(t, b, "/id", nil))
	got, err := sshRun(t, c, keys, testID, `echo "$(id -u) $(id -g) $HOME $USER"`)
	if err != nil {
		t.Fatalf("the session failed: %v; it printed %q", err, got)
	}
	want := fmt.Sprintf("%s %s %s %s", program[0], program[1], ask(t, b, "/home", nil), acct.name)
	if got != want || program[0] != strconv.Itoa(acct.uid) {
		t.Fatalf("an SSH session is %q, want the program's %q (uid %d)", got, want, acct.uid)
	}
}

// A workspace started without the agent (by a backend that ran none) says
// so, rather than looking as if it were not running.
func TestResolveAgentOfAWorkspaceWithoutOne(t *testing.T) {
	b := newTestBackend(t, t.TempDir())
	stopOnCleanup(t, b)
	ctx := context.Background()
	if err := b.ProvisionVolume(ctx, controller.VolumeSpec{WorkspaceID: testID}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.ResolveAgent(ctx, testID); !errors.Is(err, controller.ErrNoUpstream) {
		t.Fatalf("ResolveAgent before start = %v, want ErrNoUpstream", err)
	}
	if err := b.StartWorkspace(ctx, controller.WorkspaceSpec{WorkspaceID: testID, RunID: "run1"}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.ResolveAgent(ctx, testID); !errors.Is(err, agent.ErrNoAgent) {
		t.Fatalf("ResolveAgent of a workspace without an agent = %v, want ErrNoAgent", err)
	}
}

// TestAgentWithoutAbstractSockets: on a machine that forbids abstract Unix
// sockets the agent serves on its port alone, and the server reaches it
// there.
func TestAgentWithoutAbstractSockets(t *testing.T) {
	was := abstractSockets
	abstractSockets = func() bool { return false }
	t.Cleanup(func() { abstractSockets = was })
	b, keys := agentBackend(t)
	a := startWithAgent(t, b, keys, testID)
	if addr, _ := b.ResolveAgent(context.Background(), testID); strings.HasPrefix(addr, agent.SocketPrefix) {
		t.Fatalf("agent address %q, want its port", addr)
	}
	if out, err := sshRun(t, a, keys, testID, "echo reached"); err != nil || out != "reached" {
		t.Fatalf("ssh over the port: %q, %v", out, err)
	}
}
