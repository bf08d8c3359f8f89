package agent

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"golang.org/x/crypto/ssh"

	"github.com/codehub-io/codehub/internal/testenv"
)

// The test binary doubles as `codehub agent` and as a workspace program
// listening on a port, so the tests run the agent as a workspace does: a
// separate process that starts the program.
const roleEnv = "CODEHUB_AGENT_TEST_ROLE"

func TestMain(m *testing.M) {
	switch os.Getenv(roleEnv) {
	case "agent":
		os.Unsetenv(roleEnv)
		fs := flag.NewFlagSet("agent", flag.ExitOnError)
		listen := fs.String("listen", "", "")
		socket := fs.String("socket", "", "")
		exclude := fs.Int("exclude-port", 0, "")
		_ = fs.Parse(os.Args[1:])
		code, err := Run(context.Background(), hclog.New(&hclog.LoggerOptions{Output: os.Stderr}),
			RunConfig{Listen: *listen, Socket: *socket, ExcludePorts: []int{*exclude}, Program: fs.Arg(0), Args: fs.Args()[1:]})
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
		}
		os.Exit(code)
	case "echo":
		// Listens on each address given and echoes, until killed.
		for _, addr := range os.Args[1:] {
			l, err := net.Listen("tcp", addr)
			if err != nil {
				fmt.Fprintln(os.Stderr, err)
				os.Exit(1)
			}
			go serveEcho(l)
		}
		select {}
	}
	os.Exit(m.Run())
}

func serveEcho(l net.Listener) {
	for {
		c, err := l.Accept()
		if err != nil {
			return
		}
		go func() { _, _ = io.Copy(c, c); c.Close() }()
	}
}

type testAgent struct {
	addr   string
	token  string
	keys   *Keys
	wsID   string
	client *Client
	// local is a client over the agent's Unix socket, to which the agent
	// hands over the connections it dials.
	local   *Client
	program int // a port the program listens on
	exclude int // a port the program listens on that is the workbench's
	// exited is closed once the agent process has ended.
	exited chan struct{}
	cmd    *exec.Cmd
}

// startAgent runs the agent with the echo program listening on two ports,
// one of them declared the workbench's own.
func startAgent(t *testing.T) *testAgent {
	t.Helper()
	key := make([]byte, 32)
	_, _ = rand.Read(key)
	keys, err := NewKeys(key)
	if err != nil {
		t.Fatal(err)
	}
	ta := &testAgent{keys: keys, wsID: "01jb3x7k9q2m5n8p4r6s0t1v2w", program: testenv.FreePort(t), exclude: testenv.FreePort(t), exited: make(chan struct{})}
	ta.addr = "127.0.0.1:" + strconv.Itoa(testenv.FreePort(t))
	ta.token = keys.Token(ta.wsID, "run1")
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	socket := fmt.Sprintf("@codehub-agent-test-%x", key[:8])
	cmd := exec.Command(self, "-listen", ta.addr, "-socket", socket, "-exclude-port", strconv.Itoa(ta.exclude), "--",
		"/usr/bin/env", roleEnv+"=echo", self,
		"127.0.0.1:"+strconv.Itoa(ta.program), "127.0.0.1:"+strconv.Itoa(ta.exclude))
	cmd.Env = append(os.Environ(), roleEnv+"=agent", EnvToken+"="+ta.token,
		EnvHostKey+"="+EncodeHostKey(keys.HostKey(ta.wsID)), "HOME="+t.TempDir(), "SHELL=/bin/sh")
	var logs bytes.Buffer
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	ta.cmd = cmd
	go func() { _ = cmd.Wait(); close(ta.exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		<-ta.exited
		if t.Failed() {
			t.Logf("agent output:\n%s", logs.String())
		}
	})
	ta.client = Dial(ta.addr, ta.token)
	ta.local = Dial(SocketPrefix+socket, ta.token)
	// Up once the program's listener is seen; the bound only keeps a
	// broken build from hanging.
	deadline := time.Now().Add(20 * time.Second)
	for {
		ports, err := ta.client.Ports(context.Background())
		if err == nil && slices.ContainsFunc(ports, func(p Port) bool { return p.Port == ta.program }) {
			return ta
		}
		if time.Now().After(deadline) {
			t.Fatalf("agent not serving the program's port: %v %v\n%s", ports, err, logs.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestAgentDemandsToken(t *testing.T) {
	ta := startAgent(t)
	for _, token := range []string{"", "wrong", ta.keys.Token(ta.wsID, "run2")} {
		for _, path := range []string{"/v1/ports", "/v1/activity", "/v1/ssh", "/v1/tcp/" + strconv.Itoa(ta.program)} {
			req, _ := http.NewRequest(http.MethodGet, "http://"+ta.addr+path, nil)
			if token != "" {
				req.Header.Set("Authorization", "Bearer "+token)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusUnauthorized {
				t.Errorf("%s with token %q: %d, want 401", path, token, resp.StatusCode)
			}
		}
		for _, addr := range []string{ta.addr, SocketPrefix + ta.local.addr} {
			if _, err := Dial(addr, token).DialPort(context.Background(), ta.program); err == nil {
				t.Errorf("DialPort at %s with token %q worked", addr, token)
			}
		}
	}
}

func TestPortsListsOnlyTheWorkspacesListeners(t *testing.T) {
	ta := startAgent(t)
	// A listener of another process on the same network (here the test's
	// own, as another workspace's would be under raw_exec).
	other, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	otherPort := other.Addr().(*net.TCPAddr).Port
	ports, err := ta.client.Ports(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	agentPort, _ := strconv.Atoi(ta.addr[strings.LastIndexByte(ta.addr, ':')+1:])
	var got []int
	for _, p := range ports {
		got = append(got, p.Port)
		if p.Port == ta.program && p.Process == "" {
			t.Errorf("port %d has no process name", p.Port)
		}
	}
	if !slices.Contains(got, ta.program) {
		t.Errorf("ports %v lack the program's %d", got, ta.program)
	}
	for _, p := range []int{agentPort, ta.exclude, otherPort} {
		if slices.Contains(got, p) {
			t.Errorf("ports %v list %d, not the workspace's to show", got, p)
		}
	}
}

// TestDialPortReachesOnlyOwnListeners: over the agent's TCP port, which
// relays, and over its Unix socket, which hands the connection over, a
// port of the workspace is reached and nothing else is.
func TestDialPortReachesOnlyOwnListeners(t *testing.T) {
	ta := startAgent(t)
	ctx := context.Background()
	other, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	agentPort, _ := strconv.Atoi(ta.addr[strings.LastIndexByte(ta.addr, ':')+1:])
	for via, c := range map[string]*Client{"tcp": ta.client, "unix": ta.local} {
		conn, err := c.DialPort(ctx, ta.program)
		if err != nil {
			t.Fatalf("%s: %v", via, err)
		}
		if _, isTCP := conn.(*net.TCPConn); isTCP != (via == "unix") {
			t.Errorf("%s: a %T", via, conn)
		}
		if _, err := conn.Write([]byte("ping\n")); err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 5)
		if _, err := io.ReadFull(conn, buf); err != nil || string(buf) != "ping\n" {
			t.Fatalf("%s: echo through the agent: %q %v", via, buf, err)
		}
		conn.Close()

		for _, port := range []int{other.Addr().(*net.TCPAddr).Port, ta.exclude, agentPort, 0, 70000} {
			if conn, err := c.DialPort(ctx, port); !errors.Is(err, ErrRefused) {
				if conn != nil {
					conn.Close()
				}
				t.Errorf("%s: DialPort(%d): %v, want ErrRefused", via, port, err)
			}
		}
	}
	// The Unix socket serves the rest of the API as well.
	if ports, err := ta.local.Ports(ctx); err != nil || !slices.ContainsFunc(ports, func(p Port) bool { return p.Port == ta.program }) {
		t.Errorf("ports over the Unix socket: %v %v", ports, err)
	}
}

func sshClient(t *testing.T, ta *testAgent) *ssh.Client {
	t.Helper()
	conn, err := ta.client.DialSSH(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	cfg := &ssh.ClientConfig{User: "dev", HostKeyCallback: ssh.FixedHostKey(ta.keys.HostPublicKey(ta.wsID))}
	c, chans, reqs, err := ssh.NewClientConn(conn, "workspace", cfg)
	if err != nil {
		t.Fatal(err)
	}
	client := ssh.NewClient(c, chans, reqs)
	t.Cleanup(func() { client.Close() })
	return client
}

func TestSSHCommandExitStatusAndActivity(t *testing.T) {
	ta := startAgent(t)
	client := sshClient(t, ta)
	// A keepalive is not the person doing something.
	if _, _, err := client.SendRequest("keepalive@openssh.com", true, nil); err != nil {
		t.Fatal(err)
	}
	act, err := ta.client.Activity(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if act.LastActivity != nil {
		t.Fatalf("activity after a keepalive: %v", act.LastActivity)
	}
	s, err := client.NewSession()
	if err != nil {
		t.Fatal(err)
	}
	s.Stdin = strings.NewReader("from stdin")
	out, err := s.Output(`cat; echo " home=$HOME"; test -z "$` + EnvToken + `" && test -z "$HASHED_PASSWORD"; exit 7`)
	var exit *ssh.ExitError
	if !errors.As(err, &exit) || exit.ExitStatus() != 7 {
		t.Fatalf("exit: %v, want status 7", err)
	}
	if !strings.HasPrefix(string(out), "from stdin home=/") {
		t.Fatalf("output %q", out)
	}
	act, err = ta.client.Activity(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if act.LastActivity == nil {
		t.Fatal("no activity after input on a session")
	}
}

// A terminal session ends when its shell does, even while a background
// process it started still holds the terminal, as with OpenSSH's server.
func TestTerminalSessionEndsWithItsShell(t *testing.T) {
	ta := startAgent(t)
	client := sshClient(t, ta)
	s, err := client.NewSession()
	if err != nil {
		t.Fatal(err)
	}
	if err := s.RequestPty("xterm", 24, 80, ssh.TerminalModes{}); err != nil {
		t.Fatal(err)
	}
	var out syncBuffer
	s.Stdout = &out
	if err := s.Start("sleep 600 & echo started; exit 4"); err != nil {
		t.Fatal(err)
	}
	ended := make(chan error, 1)
	go func() { ended <- s.Wait() }()
	select {
	case err := <-ended:
		var exit *ssh.ExitError
		if !errors.As(err, &exit) || exit.ExitStatus() != 4 || !strings.Contains(out.String(), "started") {
			t.Fatalf("session ended with %v, output %q; want status 4 after \"started\"", err, out.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("the session is still open 30 s after its shell exited; output %q", out.String())
	}
}

// What a session left running (nohup, in the background, in a session of
// its own) ends when the program does and the agent exits: nothing of the
// workspace outlives it on the node.
func TestAgentExitEndsWhatSessionsLeft(t *testing.T) {
	ta := startAgent(t)
	client := sshClient(t, ta)
	s, err := client.NewSession()
	if err != nil {
		t.Fatal(err)
	}
	// GNU sleep takes a fraction: the digits mark this process.
	arg := fmt.Sprintf("1000.%d", time.Now().UnixNano())
	if out, err := s.CombinedOutput("nohup setsid sleep " + arg + " >/dev/null 2>&1 &"); err != nil {
		t.Fatalf("start the detached process: %v: %s", err, out)
	}
	t.Cleanup(func() {
		for _, pid := range sleeping(arg) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	})
	deadline := time.Now().Add(20 * time.Second)
	for len(sleeping(arg)) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the detached sleep never ran")
		}
		time.Sleep(20 * time.Millisecond)
	}
	// The program ends (a signal to the agent goes on to it).
	_ = ta.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-ta.exited:
	case <-time.After(20 * time.Second):
		t.Fatal("the agent did not exit after its program")
	}
	if left := sleeping(arg); len(left) > 0 {
		t.Fatalf("the agent exited, but the process a session left still runs: pids %v", left)
	}
}

// sleeping lists the running `sleep arg` processes.
func sleeping(arg string) []int {
	return testenv.PIDs(testenv.Processes(func(p testenv.Proc) bool {
		n := len(p.Args)
		return n >= 2 && p.Args[n-2] == "sleep" && p.Args[n-1] == arg
	}))
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
