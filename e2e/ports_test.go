package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/codehub-io/codehub/internal/nomadtest"
	"github.com/codehub-io/codehub/internal/testenv"
)

// devServer is the program the port tests run inside a workspace: the
// proxy tests' upstream, which echoes requests as JSON, streams server-sent
// events until /release and echoes WebSocket messages.
func devServer(t testing.TB) string {
	return devServerBuild.path(t, "../proxy/testdata/upstream", "devserver")
}

// TestMain removes its directory.
var devServerBuild programBuild

// echoScript is a TCP echo service, the kind of non-HTTP program
// `codehub port-forward` is for.
const echoScript = `import socketserver, sys
class Echo(socketserver.StreamRequestHandler):
    def handle(self):
        for line in self.rfile:
            self.wfile.write(line)
socketserver.TCPServer(("127.0.0.1", int(sys.argv[1])), Echo).serve_forever()
`

// visitor is a browser-like HTTP client: every workspace and port host
// resolves to the server, as *.localhost does in a browser, and cookies
// are kept per host, so the handoff of a session to a port's host runs as
// it does in a browser.
func visitor(t *testing.T, srv *server) *http.Client {
	t.Helper()
	u, err := url.Parse(srv.url)
	if err != nil {
		t.Fatal(err)
	}
	jar, _ := cookiejar.New(nil)
	var d net.Dialer
	return &http.Client{Jar: jar, Timeout: time.Minute, Transport: &http.Transport{
		DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
			return d.DialContext(ctx, network, "127.0.0.1:"+u.Port())
		},
	}}
}

// logInAs logs c in on the dashboard.
func logInAs(t *testing.T, srv *server, c *http.Client, username, password string) {
	t.Helper()
	body := fmt.Sprintf(`{"username":%q,"password":%q}`, username, password)
	res, err := c.Post(srv.url+"/api/v1/login", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusOK {
		t.Fatalf("log in %s: %d", username, res.StatusCode)
	}
}

// open loads address as a page, following the redirects of a handoff, and
// returns the final status, address and body.
func open(t *testing.T, c *http.Client, address string) (int, string, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, address, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Accept", "text/html,application/xhtml+xml")
	req.Header.Set("Sec-Fetch-Mode", "navigate")
	req.Header.Set("Sec-Fetch-Dest", "document")
	res, err := c.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", address, err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, res.Request.URL.String(), string(b)
}

// shellIn runs commands in workspace ws over `codehub ssh` as the user
// me. Servers it starts leave the session's streams, so the session ends,
// and write their pid to a *.pid file in the home, where the test ends
// them: a process that left its session outlives the workspace's stop.
//
// hostPids is false when the pids are a container's, which this host must
// not signal.
func shellIn(t testing.TB, srv *server, me *sshUser, ws apiWorkspace, home string, hostPids bool) func(command, stdin string) {
	t.Cleanup(func() {
		if !hostPids {
			return
		}
		files, _ := filepath.Glob(filepath.Join(home, "*.pid"))
		for _, f := range files {
			b, err := os.ReadFile(f)
			var pid int
			if err != nil {
				continue
			}
			if _, err := fmt.Sscan(string(b), &pid); err != nil {
				continue
			}
			if p, err := os.FindProcess(pid); err == nil {
				_ = p.Kill()
			}
		}
	})
	return func(command, stdin string) {
		t.Helper()
		cmd := exec.Command(srv.bin, "ssh", ws.Name, command)
		cmd.Env, cmd.Stdin = me.env, strings.NewReader(stdin)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("codehub ssh %s %q: %v\n%s", ws.Name, command, err, out)
		}
	}
}

// localHome is where the single-machine backend keeps a workspace's home.
func localHome(srv *server, id string) string {
	return filepath.Join(srv.dataDir, "volumes", "ws-"+id+"-home")
}

// portAddress is the address of a workspace's port on a server in
// subdomain mode on localhost.
func portAddress(srv *server, id string, port int) string {
	u, _ := url.Parse(srv.url)
	return fmt.Sprintf("http://%d--%s.localhost:%s/", port, id, u.Port())
}

// TestPorts runs real programs inside a workspace of `codehub server` with
// the single-machine backend and reaches them by their port addresses, by
// share level, over HTTP, WebSocket and server-sent events, and through
// `codehub port-forward`.
func TestPorts(t *testing.T) {
	portsScenario(t, localConfig(t), localHome, hostPrograms(t))
}

// TestNomadPorts is TestPorts on real Nomad under raw_exec, where the
// workspaces of a node share its network.
func TestNomadPorts(t *testing.T) {
	agent := nomadtest.Start(t, "")
	portsScenario(t, nomadConfig(t, agent), func(_ *server, id string) string { return volumePath(t, agent, id) }, hostPrograms(t))
}

// TestNomadDockerPorts is TestPorts on real Nomad under docker with the
// locally built image and host networking: the programs are the image's
// Node.js and the dev server, copied into the home; the agent in each
// container tells its own listeners from the others' on the shared
// network by the container's processes.
func TestNomadDockerPorts(t *testing.T) {
	cfg, agent, _ := dockerNomadConfig(t)
	portsScenario(t, cfg, func(_ *server, id string) string { return volumePath(t, agent, id) }, portPrograms{
		setup: []portSetup{
			{"cat > static.js", staticJS},
			{"cat > echo.js", echoJS},
		},
		dev:        "exec /home/coder/devserver --bind-addr 127.0.0.1:%d",
		devBinary:  devServer(t),
		static:     "cd site && exec node ../static.js %d",
		echo:       "exec node echo.js %d",
		staticName: "node",
		// The pid files hold the container's pids: the engine ends them.
		containerPids: true,
	})
}

// portPrograms are the servers a ports test starts in a workspace, from
// what its image has. The commands take the port as %d and run in the
// home.
type portPrograms struct {
	setup []portSetup
	// Each ends in exec, so that the pid a server's shell writes is the
	// server's. dev is the dev server (HTTP, WebSocket, server-sent events);
	// devBinary, when set, is copied into the home first as devserver.
	dev, devBinary string
	// static serves site/index.html; staticName is its process's name.
	static, staticName string
	// echo is a TCP echo service.
	echo string
	// containerPids: the pids the servers write are not this host's.
	containerPids bool
}

// portSetup is a command run before the servers start, with its stdin.
type portSetup struct{ command, stdin string }

// hostPrograms run the dev server and Python from this machine.
func hostPrograms(t *testing.T) portPrograms {
	python := program(t, "CODEHUB_TEST_PYTHON", "/usr/bin/python3", "python3", "apt-get install python3")
	return portPrograms{
		setup:      []portSetup{{"cat > echo.py", echoScript}},
		dev:        "exec " + devServer(t) + " --bind-addr 127.0.0.1:%d",
		static:     "cd site && exec " + python + " -m http.server %d --bind 127.0.0.1",
		staticName: "python3",
		echo:       "exec " + python + " echo.py %d",
	}
}

// staticJS and echoJS are the static site and the TCP echo for an image
// with Node.js only.
const staticJS = `require("http").createServer((req, res) => {
  require("fs").createReadStream("index.html").on("error", () => { res.statusCode = 404; res.end(); }).pipe(res);
}).listen(+process.argv[2], "127.0.0.1");
`
const echoJS = `require("net").createServer((c) => c.pipe(c)).listen(+process.argv[2], "127.0.0.1");
`

func portsScenario(t *testing.T, cfg serverConfig, homeOf func(srv *server, id string) string, progs portPrograms) {
	cfg.publicHost, cfg.subdomainBase, cfg.maxPortShare = "localhost", "localhost", "authenticated"
	cfg.maxRunning = 2
	srv := startServer(t, cfg)
	admin := login(t, srv)
	const bobPassword = "bob-password-1"
	if code := admin.do("POST", "/api/v1/admin/users", map[string]any{"username": "bob", "password": bobPassword}, nil); code != http.StatusCreated {
		t.Fatalf("create bob: %d", code)
	}
	web := createRunning(t, admin, "web")
	other := createRunning(t, admin, "other")
	me := newSSHUser(t, srv, admin)
	home := homeOf(srv, web.ID)
	run := shellIn(t, srv, me, web, home, !progs.containerPids)
	if progs.devBinary != "" {
		copyExecutable(t, progs.devBinary, filepath.Join(home, "devserver"))
	}
	for _, c := range progs.setup {
		run(c.command, c.stdin)
	}
	devPort, httpPort, echoPort := testenv.FreePort(t), testenv.FreePort(t), testenv.FreePort(t)
	// A hangup when the session ends must not end the server; images
	// may lack nohup, so the shell ignores it, across the exec.
	start := func(command, pidFile string) {
		run(fmt.Sprintf(`sh -c 'trap "" HUP; %s' </dev/null >/dev/null 2>&1 & echo $! > %s`, command, pidFile), "")
	}
	start(fmt.Sprintf(progs.dev, devPort), "dev.pid")
	run("mkdir -p site && echo hello-from-the-site > site/index.html", "")
	start(fmt.Sprintf(progs.static, httpPort), "http.pid")
	start(fmt.Sprintf(progs.echo, echoPort), "echo.pid")

	portURL := func(id string, port int) string { return portAddress(srv, id, port) }
	owner, bob, anon := visitor(t, srv), visitor(t, srv), visitor(t, srv)
	logInAs(t, srv, owner, "admin", adminPassword)
	logInAs(t, srv, bob, "bob", bobPassword)
	share := func(port int, level string) int {
		t.Helper()
		return admin.do("PUT", fmt.Sprintf("/api/v1/workspaces/%s/ports/%d", web.ID, port), map[string]string{"share": level}, nil)
	}

	t.Run("the owner reaches the dev servers", func(t *testing.T) {
		waitFor(t, time.Minute, "the dev servers listen", func() bool {
			status, _, _ := open(t, owner, portURL(web.ID, devPort)+"echo")
			hs, _, _ := open(t, owner, portURL(web.ID, httpPort))
			return status == http.StatusOK && hs == http.StatusOK
		})
		status, _, body := open(t, owner, portURL(web.ID, devPort)+"echo?x=1")
		var e struct {
			Path    string              `json:"path"`
			Host    string              `json:"host"`
			Headers map[string][]string `json:"headers"`
		}
		if err := json.Unmarshal([]byte(body), &e); err != nil || status != http.StatusOK {
			t.Fatalf("the dev server: %d %v %s", status, err, body)
		}
		h := http.Header(e.Headers)
		if want := strings.TrimPrefix(strings.TrimSuffix(portURL(web.ID, devPort), "/"), "http://"); e.Path != "/echo" || e.Host != want || h.Get("X-Forwarded-Host") != want {
			t.Fatalf("the dev server saw %s on host %q (forwarded %q), want /echo on %q", e.Path, e.Host, h.Get("X-Forwarded-Host"), want)
		}
		if c := h.Get("Cookie"); c != "" {
			t.Fatalf("the dev server got cookies %q", c)
		}
		if status, _, body := open(t, owner, portURL(web.ID, httpPort)); status != http.StatusOK || !strings.Contains(body, "hello-from-the-site") {
			t.Fatalf("the static site: %d %s", status, body)
		}
	})

	t.Run("another user and a visitor wait for their level", func(t *testing.T) {
		if status, _, _ := open(t, bob, portURL(web.ID, devPort)); status != http.StatusForbidden {
			t.Fatalf("bob on an owner port: %d, want 403", status)
		}
		if _, final, _ := open(t, anon, portURL(web.ID, devPort)); !strings.HasPrefix(final, srv.url+"/login") {
			t.Fatalf("a visitor on an owner port ended at %s, want the login page", final)
		}
		if code := share(devPort, "public"); code != http.StatusBadRequest {
			t.Fatalf("share public above the cap: %d, want 400", code)
		}
		if code := share(devPort, "authenticated"); code != http.StatusOK {
			t.Fatalf("share authenticated: %d", code)
		}
		if status, _, _ := open(t, bob, portURL(web.ID, devPort)); status != http.StatusOK {
			t.Fatalf("bob on an authenticated port: %d, want 200", status)
		}
		if _, final, _ := open(t, anon, portURL(web.ID, devPort)); !strings.HasPrefix(final, srv.url+"/login") {
			t.Fatalf("a visitor on an authenticated port ended at %s, want the login page", final)
		}
	})

	t.Run("a port of one workspace is not another's, nor the node's", func(t *testing.T) {
		status, _, body := open(t, owner, portURL(other.ID, devPort)+"echo")
		if status != http.StatusBadGateway {
			t.Fatalf("workspace other's address of web's port: %d %s, want 502", status, body)
		}
		// codehub server listens on the same machine, not in the workspace.
		u, _ := url.Parse(srv.url)
		var serverPort int
		fmt.Sscan(u.Port(), &serverPort)
		if status, _, body := open(t, owner, portURL(web.ID, serverPort)+"api/v1/health"); status != http.StatusBadGateway {
			t.Fatalf("web's address of the server's own port: %d %s, want 502", status, body)
		}
	})

	t.Run("websocket and server-sent events, cut when the level goes down", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		base := strings.TrimSuffix(portURL(web.ID, devPort), "/")
		sse, err := bob.Get(base + "/sse")
		if err != nil {
			t.Fatal(err)
		}
		defer sse.Body.Close()
		events := bufio.NewReader(sse.Body)
		if line, err := events.ReadString('\n'); err != nil || line != "data: first\n" {
			t.Fatalf("first event: %q %v (%d)", line, err, sse.StatusCode)
		}
		if status, _, _ := open(t, bob, base+"/release"); status != http.StatusOK {
			t.Fatalf("release: %d", status)
		}
		if rest, err := io.ReadAll(events); err != nil || string(rest) != "\ndata: second\n\n" {
			t.Fatalf("rest of the events: %q %v", rest, err)
		}

		conn, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(base, "http")+"/ws", &websocket.DialOptions{
			HTTPClient: bob, HTTPHeader: http.Header{"Origin": {base}}})
		if err != nil {
			t.Fatalf("bob's socket: %v", err)
		}
		defer conn.CloseNow()
		if err := conn.Write(ctx, websocket.MessageText, []byte("hi")); err != nil {
			t.Fatal(err)
		}
		if _, got, err := conn.Read(ctx); err != nil || string(got) != "hi" {
			t.Fatalf("echo: %q %v", got, err)
		}
		if code := share(devPort, "owner"); code != http.StatusOK {
			t.Fatalf("lower to owner: %d", code)
		}
		if _, _, err := conn.Read(ctx); websocket.CloseStatus(err) != websocket.StatusPolicyViolation {
			t.Fatalf("bob's socket after the level went down: %v, want a close frame with status %d", err, websocket.StatusPolicyViolation)
		}
	})

	t.Run("ws ports lists what listens", func(t *testing.T) {
		out, err := me.codehub("ws", "ports", "web")
		if err != nil {
			t.Fatalf("codehub ws ports: %v\n%s", err, out)
		}
		for _, want := range []string{fmt.Sprint(devPort), fmt.Sprint(httpPort), fmt.Sprint(echoPort), progs.staticName, portURL(web.ID, httpPort)} {
			if !strings.Contains(out, want) {
				t.Fatalf("codehub ws ports lacks %q:\n%s", want, out)
			}
		}
	})

	t.Run("port-forward round trip", func(t *testing.T) {
		cmd := exec.Command(srv.bin, "port-forward", "web", fmt.Sprintf("0:%d", echoPort))
		cmd.Env = me.env
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		var stderr syncBuffer
		cmd.Stderr = &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
		line, err := bufio.NewReader(stdout).ReadString('\n')
		if err != nil || !strings.HasPrefix(line, "Forwarding ") {
			t.Fatalf("port-forward said %q %v; stderr %s", line, err, stderr.String())
		}
		conn, err := net.Dial("tcp", strings.Fields(line)[1])
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		for _, msg := range []string{"ping\n", strings.Repeat("x", 200000) + "\n"} {
			go func() { _, _ = io.WriteString(conn, msg) }()
			got, err := bufio.NewReader(io.LimitReader(conn, int64(len(msg)))).ReadString('\n')
			if err != nil || got != msg {
				t.Fatalf("echo of %d bytes: %d back, %v", len(msg), len(got), err)
			}
		}
	})

	t.Run("public after the operator raised the cap", func(t *testing.T) {
		srv.stop()
		cfg.maxPortShare = "public"
		u, _ := url.Parse(srv.url)
		port := 0
		fmt.Sscan(u.Port(), &port)
		if err := os.WriteFile(srv.cfgPath, []byte(renderConfig(srv, port, cfg)), 0o600); err != nil {
			t.Fatal(err)
		}
		srv.start(t)
		if code := share(devPort, "public"); code != http.StatusOK {
			t.Fatalf("share public: %d", code)
		}
		if status, final, _ := open(t, anon, portURL(web.ID, devPort)+"echo"); status != http.StatusOK {
			t.Fatalf("a visitor on a public port: %d at %s", status, final)
		}
	})
}
