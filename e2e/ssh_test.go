package e2e

import (
	"bytes"
	"crypto/rand"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/creack/pty"

	"github.com/codehub-io/codehub/internal/testenv"
)

// envSSH names the OpenSSH client; scp, sftp, ssh-agent, ssh-add and
// ssh-keygen are taken from its directory.
const envSSH = "CODEHUB_TEST_SSH"

// sshUser is a person at a laptop: a home of their own with the CLI
// logged in as one user through "codehub login", and OpenSSH set up by
// "codehub config-ssh".
type sshUser struct {
	srv    *server
	home   string
	env    []string
	bin    string // the OpenSSH client's directory
	config string
	api    *apiClient
	// tokenID is the id of the token the CLI holds.
	tokenID string
}

// newSSHUser logs the CLI of a new laptop in with a read-write token the
// user c makes, and writes its SSH configuration.
func newSSHUser(t testing.TB, srv *server, c *apiClient) *sshUser {
	t.Helper()
	sshPath := program(t, envSSH, "/usr/bin/ssh", "the OpenSSH client", "apt-get install openssh-client")
	home := t.TempDir()
	u := &sshUser{srv: srv, home: home, bin: filepath.Dir(sshPath), api: c,
		config: filepath.Join(home, ".ssh", "config"),
		env:    append(os.Environ(), "HOME="+home, "XDG_CONFIG_HOME="+filepath.Join(home, ".config"), "CODEHUB_TOKEN=", "CODEHUB_URL=", "SSH_AUTH_SOCK=")}
	var made struct {
		Token struct {
			ID string `json:"id"`
		} `json:"token"`
		Secret string `json:"secret"`
	}
	if code := c.do("POST", "/api/v1/tokens", map[string]any{"name": "laptop " + filepath.Base(home), "scope": "read-write"}, &made); code != http.StatusCreated {
		t.Fatalf("make a token: %d", code)
	}
	u.tokenID = made.Token.ID
	login := exec.Command(srv.bin, "login", "-token-stdin", srv.url)
	login.Env, login.Stdin = u.env, strings.NewReader(made.Secret+"\n")
	if out, err := login.CombinedOutput(); err != nil {
		t.Fatalf("codehub login: %v: %s", err, out)
	}
	return u
}

// codehub runs the CLI and returns its output.
func (u *sshUser) codehub(args ...string) (string, error) {
	cmd := exec.Command(u.srv.bin, args...)
	cmd.Env = u.env
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// tool is an OpenSSH program (or rsync) run with this laptop's
// configuration.
func (u *sshUser) tool(name string, args ...string) *exec.Cmd {
	path := filepath.Join(u.bin, name)
	switch name {
	case "ssh", "scp", "sftp":
		args = append([]string{"-F", u.config, "-o", "BatchMode=yes"}, args...)
	case "rsync":
		path = "rsync"
	}
	cmd := exec.Command(path, args...)
	cmd.Env = u.env
	return cmd
}

// run runs a tool and fails the test unless it succeeds.
func (u *sshUser) run(t *testing.T, name string, args ...string) string {
	t.Helper()
	out, err := u.tool(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

func (u *sshUser) configSSH(t *testing.T) {
	t.Helper()
	if out, err := u.codehub("config-ssh"); err != nil {
		t.Fatalf("codehub config-ssh: %v: %s", err, out)
	}
}

// createRunning creates a workspace and waits until it runs.
func createRunning(t testing.TB, c *apiClient, name string) apiWorkspace {
	t.Helper()
	var ws apiWorkspace
	if code := c.do("POST", "/api/v1/workspaces", map[string]string{"name": name}, &ws); code != http.StatusCreated {
		t.Fatalf("create %s: %d", name, code)
	}
	c.settle(ws.ID, "RUNNING", time.Now())
	return ws
}

func sameFile(t *testing.T, a, b string) {
	t.Helper()
	x, err := os.ReadFile(a)
	if err != nil {
		t.Fatal(err)
	}
	y, err := os.ReadFile(b)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(x, y) {
		t.Fatalf("%s and %s differ (%d and %d bytes)", a, b, len(x), len(y))
	}
}

func writeRandom(t *testing.T, path string, n int) {
	t.Helper()
	b := make([]byte, n)
	_, _ = rand.Read(b)
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// session is a long-running ssh whose end the test waits for.
type session struct {
	cmd    *exec.Cmd
	stderr *syncBuffer
	ended  chan error
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

func startSession(t *testing.T, cmd *exec.Cmd) *session {
	t.Helper()
	s := &session{cmd: cmd, stderr: &syncBuffer{}, ended: make(chan error, 1)}
	cmd.Stderr = s.stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { s.ended <- cmd.Wait() }()
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	return s
}

// waitEnd waits for the session to end; the bound only keeps a broken
// build from hanging.
func (s *session) waitEnd(t *testing.T, limit time.Duration, what string) error {
	t.Helper()
	select {
	case err := <-s.ended:
		return err
	case <-time.After(limit):
		t.Fatalf("%s: the ssh session is still open after %s; stderr:\n%s", what, limit, s.stderr.String())
		return nil
	}
}

// TestSSH reaches a workspace of the single-machine backend with the real
// OpenSSH client and rsync through `codehub server`, after `codehub login`
// and `codehub config-ssh`.
func TestSSH(t *testing.T) {
	if _, err := exec.LookPath("rsync"); err != nil {
		program(t, "CODEHUB_TEST_RSYNC", "", "rsync", "apt-get install rsync")
	}
	cfg := localConfig(t)
	cfg.maxRunning = 3
	srv := startServer(t, cfg)
	admin := login(t, srv)
	ws := createRunning(t, admin, "dev")
	me := newSSHUser(t, srv, admin)
	me.configSSH(t)
	host := "codehub.dev"

	t.Run("config-ssh writes one idempotent block", func(t *testing.T) {
		before, err := os.ReadFile(me.config)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Contains(before, []byte("Host codehub.dev\n")) || !bytes.Contains(before, []byte("ssh --stdio "+ws.ID)) {
			t.Fatalf("~/.ssh/config:\n%s", before)
		}
		// The user's own lines around it stay.
		mine := "Host example\n  User me\n"
		if err := os.WriteFile(me.config, append([]byte(mine), before...), 0o600); err != nil {
			t.Fatal(err)
		}
		me.configSSH(t)
		me.configSSH(t)
		after, err := os.ReadFile(me.config)
		if err != nil {
			t.Fatal(err)
		}
		if string(after) != mine+string(before) {
			t.Fatalf("a second run changed the file:\n%s", after)
		}
	})

	sshBasics(t, srv, me, "dev", "/home/dev")

	t.Run("others are refused", func(t *testing.T) {
		var bob struct {
			ID string `json:"id"`
		}
		if code := admin.do("POST", "/api/v1/admin/users", map[string]any{"username": "bob", "password": "bob-password-1"}, &bob); code != http.StatusCreated {
			t.Fatalf("create bob: %d", code)
		}
		bobAPI := loginAs(t, srv, "bob", "bob-password-1")
		other := newSSHUser(t, srv, bobAPI)
		out, err := other.codehub("ssh", "--stdio", ws.ID)
		if err == nil || !strings.Contains(out, "another user") {
			t.Fatalf("bob reaches admin's workspace: %v: %s", err, out)
		}
		for name, auth := range map[string]string{"anonymous": "", "a wrong token": "Bearer chp_wrong"} {
			req, _ := http.NewRequest("GET", srv.url+"/api/v1/workspaces/"+ws.ID+"/ssh/tunnel", nil)
			req.Header.Set("Connection", "Upgrade")
			req.Header.Set("Upgrade", "websocket")
			req.Header.Set("Sec-WebSocket-Version", "13")
			req.Header.Set("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ==")
			if auth != "" {
				req.Header.Set("Authorization", auth)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusUnauthorized {
				t.Fatalf("%s opens the tunnel: %d", name, resp.StatusCode)
			}
		}
		// The dashboard's session cookie is no API token.
		req, _ := http.NewRequest("GET", srv.url+"/api/v1/workspaces/"+ws.ID+"/ssh/tunnel", nil)
		for _, c := range admin.http.Jar.Cookies(req.URL) {
			req.AddCookie(c)
		}
		resp, err := admin.http.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Fatalf("a session cookie opens the tunnel: %d", resp.StatusCode)
		}
	})

	t.Run("revoking the token closes an open session", func(t *testing.T) {
		second := newSSHUser(t, srv, admin)
		second.configSSH(t)
		s := startSession(t, second.tool("ssh", host, "touch revoke-started; sleep 600"))
		// The session is up once the workspace runs its command.
		waitFor(t, time.Minute, "the session runs its command", func() bool {
			return me.tool("ssh", host, "test -e revoke-started").Run() == nil
		})
		if code := admin.do("DELETE", "/api/v1/tokens/"+second.tokenID, nil, nil); code != http.StatusNoContent {
			t.Fatalf("revoke: %d", code)
		}
		if err := s.waitEnd(t, time.Minute, "after revocation"); err == nil {
			t.Fatal("ssh ended with status 0 after its token was revoked")
		}
		if !strings.Contains(s.stderr.String(), "session ended") {
			t.Fatalf("ssh's stderr does not say why: %s", s.stderr.String())
		}
		if out, err := second.tool("ssh", host, "true").CombinedOutput(); err == nil {
			t.Fatalf("a revoked token opens a new session: %s", out)
		}
	})

	sshWake(t, admin, me, host, ws.ID)

	t.Run("a disabled user's session closes", func(t *testing.T) {
		var carol struct {
			ID string `json:"id"`
		}
		if code := admin.do("POST", "/api/v1/admin/users", map[string]any{"username": "carol", "password": "carol-password-1"}, &carol); code != http.StatusCreated {
			t.Fatalf("create carol: %d", code)
		}
		carolAPI := loginAs(t, srv, "carol", "carol-password-1")
		createRunning(t, carolAPI, "carols")
		c := newSSHUser(t, srv, carolAPI)
		c.configSSH(t)
		s := startSession(t, c.tool("ssh", "codehub.carols", "touch disable-started; sleep 700"))
		waitFor(t, time.Minute, "carol's session runs its command", func() bool {
			return c.tool("ssh", "codehub.carols", "test -e disable-started").Run() == nil
		})
		if code := admin.do("PATCH", "/api/v1/admin/users/"+carol.ID, map[string]any{"disabled": true}, nil); code != http.StatusOK {
			t.Fatalf("disable carol: %d", code)
		}
		if err := s.waitEnd(t, time.Minute, "after disabling the user"); err == nil {
			t.Fatal("ssh ended with status 0 after its user was disabled")
		}
		if out, err := c.tool("ssh", "codehub.carols", "true").CombinedOutput(); err == nil {
			t.Fatalf("a disabled user opens a new session: %s", out)
		}
	})
}

// sshBasics: a command's exit status and a shell, scp, sftp and rsync
// round trips, both port forwardings, a terminal that resizes, signals
// and agent forwarding, in workspace name whose home is home.
func sshBasics(t *testing.T, srv *server, me *sshUser, name, home string) {
	host := "codehub." + name
	t.Run("shell and command exit status", func(t *testing.T) {
		out, err := me.tool("ssh", host, `echo "in $HOME"; exit 3`).CombinedOutput()
		if code := exitCode(err); code != 3 || !strings.Contains(string(out), "in "+home) {
			t.Fatalf("ssh command: status %d (%v): %s", code, err, out)
		}
		// A shell reads its commands from stdin without a terminal.
		cmd := me.tool("ssh", "-T", host)
		cmd.Stdin = strings.NewReader("echo from-shell\nexit 5\n")
		out, err = cmd.CombinedOutput()
		if code := exitCode(err); code != 5 || !strings.Contains(string(out), "from-shell") {
			t.Fatalf("ssh shell: status %d (%v): %s", code, err, out)
		}
		// A terminal reports its size.
		out, err = me.tool("ssh", "-tt", host, "stty size").CombinedOutput()
		if err != nil || !strings.Contains(string(out), " ") {
			t.Fatalf("ssh -tt stty size: %v: %q", err, out)
		}
		// The CLI's own client, with the command's status.
		got, err := me.codehub("ssh", name, "echo", "via-cli;", "exit", "4")
		if code := exitCode(err); code != 4 || !strings.Contains(got, "via-cli") {
			t.Fatalf("codehub ssh: status %d (%v): %s", code, err, got)
		}
	})

	t.Run("scp sftp and rsync round trips", func(t *testing.T) {
		dir := t.TempDir()
		src := filepath.Join(dir, "blob")
		writeRandom(t, src, 5<<20+123)
		me.run(t, "scp", src, host+":blob")
		back := filepath.Join(dir, "blob.scp")
		me.run(t, "scp", host+":blob", back)
		sameFile(t, src, back)

		batch := filepath.Join(dir, "batch")
		sftpBack := filepath.Join(dir, "blob.sftp")
		if err := os.WriteFile(batch, []byte(fmt.Sprintf("put %s sftp-blob\nget sftp-blob %s\n", src, sftpBack)), 0o600); err != nil {
			t.Fatal(err)
		}
		me.run(t, "sftp", "-b", batch, host)
		sameFile(t, src, sftpBack)

		tree := filepath.Join(dir, "tree")
		if err := os.MkdirAll(filepath.Join(tree, "sub"), 0o700); err != nil {
			t.Fatal(err)
		}
		writeRandom(t, filepath.Join(tree, "a"), 100<<10)
		writeRandom(t, filepath.Join(tree, "sub", "b"), 1<<20)
		rsh := "ssh -F " + me.config + " -o BatchMode=yes"
		me.run(t, "rsync", "-a", "-e", rsh, tree+"/", host+":tree/")
		got := filepath.Join(dir, "got")
		me.run(t, "rsync", "-a", "-e", rsh, host+":tree/", got+"/")
		sameFile(t, filepath.Join(tree, "a"), filepath.Join(got, "a"))
		sameFile(t, filepath.Join(tree, "sub", "b"), filepath.Join(got, "sub", "b"))
	})

	t.Run("ssh -L reaches a server in the workspace", func(t *testing.T) {
		remote := testenv.FreePort(t)
		me.run(t, "ssh", host, fmt.Sprintf("nohup %s --listen 127.0.0.1:%d >/dev/null 2>&1 &", fakeServer(t), remote))
		local := testenv.FreePort(t)
		fwd := startSession(t, me.tool("ssh", "-N", "-o", "ExitOnForwardFailure=yes", "-L", fmt.Sprintf("127.0.0.1:%d:127.0.0.1:%d", local, remote), host))
		var body string
		waitFor(t, time.Minute, "the forwarded port answers", func() bool {
			resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/home", local))
			if err != nil {
				return false
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			body = string(b)
			return resp.StatusCode == http.StatusOK
		})
		if body != home {
			t.Fatalf("the server in the workspace says its home is %q", body)
		}
		_ = fwd.cmd.Process.Kill()
	})

	t.Run("ssh -R brings a laptop server into the workspace", func(t *testing.T) {
		laptop := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			_, _ = io.WriteString(w, "from the laptop")
		}))
		defer laptop.Close()
		remote := testenv.FreePort(t)
		fwd := startSession(t, me.tool("ssh", "-N", "-o", "ExitOnForwardFailure=yes", "-R", fmt.Sprintf("127.0.0.1:%d:%s", remote, strings.TrimPrefix(laptop.URL, "http://")), host))
		defer func() { _ = fwd.cmd.Process.Kill() }()
		get := fmt.Sprintf(`bash -c 'exec 3<>/dev/tcp/127.0.0.1/%d && printf "GET / HTTP/1.0\r\n\r\n" >&3 && cat <&3'`, remote)
		var out []byte
		waitFor(t, time.Minute, "the remote forward answers", func() bool {
			out, _ = me.tool("ssh", host, get).CombinedOutput()
			return strings.Contains(string(out), "from the laptop")
		})
	})

	t.Run("codehub ssh: a terminal that resizes, and signals", func(t *testing.T) {
		cmd := exec.Command(srv.bin, "ssh", name)
		cmd.Env = append(me.env, "TERM=xterm")
		tty, err := pty.StartWithSize(cmd, &pty.Winsize{Rows: 30, Cols: 100})
		if err != nil {
			t.Fatal(err)
		}
		defer tty.Close()
		screen := &syncBuffer{}
		go func() { _, _ = io.Copy(screen, tty) }()
		expect := func(what string) {
			t.Helper()
			waitFor(t, time.Minute, "the terminal shows "+what, func() bool { return strings.Contains(screen.String(), what) })
		}
		_, _ = io.WriteString(tty, "stty size; echo mark-$((40+2))\r")
		expect("30 100")
		expect("mark-42")
		if err := pty.Setsize(tty, &pty.Winsize{Rows: 41, Cols: 121}); err != nil {
			t.Fatal(err)
		}
		_, _ = io.WriteString(tty, "stty size\r")
		expect("41 121")
		_, _ = io.WriteString(tty, "exit 6\r")
		if code := exitCode(cmd.Wait()); code != 6 {
			t.Fatalf("codehub ssh with a terminal: status %d; screen:\n%s", code, screen.String())
		}

		sig := exec.Command(srv.bin, "ssh", name, `trap "echo got-int; exit 9" INT; touch sig-ready; while :; do sleep 0.2; done`)
		sig.Env = me.env
		out := &syncBuffer{}
		sig.Stdout, sig.Stderr = out, out
		if err := sig.Start(); err != nil {
			t.Fatal(err)
		}
		waitFor(t, time.Minute, "the command runs", func() bool { return me.tool("ssh", host, "test -e sig-ready").Run() == nil })
		_ = sig.Process.Signal(os.Interrupt)
		if code := exitCode(sig.Wait()); code != 9 || !strings.Contains(out.String(), "got-int") {
			t.Fatalf("codehub ssh after SIGINT: status %d: %s", code, out.String())
		}
	})

	sshAgentForwarding(t, me, host)

}

// sshAgentForwarding: ssh -A lends a key of a local ssh-agent to the
// workspace, and only with -A.
func sshAgentForwarding(t *testing.T, me *sshUser, host string) {
	t.Run("ssh -A lends the laptop's key", func(t *testing.T) {
		dir := t.TempDir()
		key := filepath.Join(dir, "id_ed25519")
		me.run(t, "ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "laptop-key", "-f", key)
		sock := filepath.Join(dir, "agent.sock")
		agent := me.tool("ssh-agent", "-D", "-a", sock)
		if err := agent.Start(); err != nil {
			t.Fatal(err)
		}
		defer func() { _ = agent.Process.Kill(); _ = agent.Wait() }()
		waitFor(t, 30*time.Second, "ssh-agent listens", func() bool { _, err := os.Stat(sock); return err == nil })
		add := me.tool("ssh-add", key)
		add.Env = append(add.Env, "SSH_AUTH_SOCK="+sock)
		if out, err := add.CombinedOutput(); err != nil {
			t.Fatalf("ssh-add: %v: %s", err, out)
		}
		list := me.tool("ssh", "-A", host, "ssh-add -L")
		list.Env = append(list.Env, "SSH_AUTH_SOCK="+sock)
		out, err := list.CombinedOutput()
		if err != nil || !strings.Contains(string(out), "laptop-key") {
			t.Fatalf("ssh -A: ssh-add -L in the workspace: %v: %s", err, out)
		}
		// Without -A the workspace holds no key of the laptop.
		out, _ = me.tool("ssh", host, "ssh-add -L").CombinedOutput()
		if strings.Contains(string(out), "laptop-key") {
			t.Fatalf("the key is lent without -A: %s", out)
		}
	})
}

// sshWake: an SSH connection wakes a stopped workspace and restores an
// archived one, showing progress, with the host key pinned before.
func sshWake(t *testing.T, admin *apiClient, me *sshUser, host, id string) {
	ws := apiWorkspace{ID: id}
	t.Run("a stopped workspace wakes and an archived one is restored, with the same host key", func(t *testing.T) {
		me.run(t, "ssh", host, "echo kept > kept.txt")
		admin.setDesired(ws.ID, "STANDBY")
		admin.settle(ws.ID, "STANDBY", time.Now())
		cmd := me.tool("ssh", host, "cat kept.txt")
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil || strings.TrimSpace(string(out)) != "kept" {
			t.Fatalf("ssh to a stopped workspace: %v: %s %s", err, out, stderr.String())
		}
		if !strings.Contains(stderr.String(), "codehub: starting") {
			t.Fatalf("no progress shown while it started: %q", stderr.String())
		}
		admin.setDesired(ws.ID, "ARCHIVED")
		admin.settle(ws.ID, "ARCHIVED", time.Now())
		cmd = me.tool("ssh", host, "cat kept.txt")
		stderr.Reset()
		cmd.Stderr = &stderr
		out, err = cmd.Output()
		if err != nil || strings.TrimSpace(string(out)) != "kept" {
			t.Fatalf("ssh to an archived workspace: %v: %s %s", err, out, stderr.String())
		}
		if !strings.Contains(stderr.String(), "restoring from archive") {
			t.Fatalf("no restore progress shown: %q", stderr.String())
		}
	})

}

// loginAs is an API client holding a session of username.
func loginAs(t *testing.T, srv *server, username, password string) *apiClient {
	t.Helper()
	jar, err := cookiejar.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	c := &apiClient{tb: t, base: srv.url, http: &http.Client{Jar: jar, Timeout: 30 * time.Second}}
	if code := c.do("POST", "/api/v1/login", map[string]string{"username": username, "password": password}, nil); code != http.StatusOK {
		t.Fatalf("log in as %s: %d", username, code)
	}
	return c
}

func exitCode(err error) int {
	if err == nil {
		return 0
	}
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.ExitCode()
	}
	return -1
}

// fakeServer builds the single-machine backend's test program, an HTTP
// server that answers /home with its HOME, once per test run.
func fakeServer(t *testing.T) string {
	return fakeServerBuild.path(t, "../local/testdata/fakeworkspace", "fakeworkspace")
}

// TestMain removes its directory.
var fakeServerBuild programBuild

// programBuild is a test program built once per run into a directory of
// its own.
type programBuild struct {
	once sync.Once
	dir  string
	bin  string
	err  error
}

// path builds the program of package pkg as name on first use and returns
// where it is.
func (b *programBuild) path(t testing.TB, pkg, name string) string {
	t.Helper()
	b.once.Do(func() {
		dir, err := os.MkdirTemp("", "codehub-e2e-"+name+"-")
		if err != nil {
			b.err = err
			return
		}
		b.dir, b.bin = dir, filepath.Join(dir, name)
		// Static, so that it runs in a container's image as well.
		cmd := exec.Command("go", "build", "-o", b.bin, pkg)
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			b.err = fmt.Errorf("%w\n%s", err, out)
		}
	})
	if b.err != nil {
		t.Fatalf("build %s: %v", pkg, b.err)
	}
	return b.bin
}
