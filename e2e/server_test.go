package e2e

import (
	"cmp"
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/codehub-io/codehub/internal/testenv"
	"github.com/codehub-io/codehub/local"
)

// program finds an executable a test needs: the variable's value, else the
// default. Missing, it skips the test, or fails it under make test; hint
// says how to get it.
func program(t testing.TB, env, def, what, hint string) string {
	t.Helper()
	path := os.Getenv(env)
	if path == "" {
		path = def
	}
	if path != "" {
		if _, err := os.Stat(path); err == nil {
			return path
		}
	}
	msg := fmt.Sprintf("%s not available: set %s (%s)", what, env, hint)
	if os.Getenv(testenv.EnvRequire) == "1" {
		t.Fatal(msg)
	}
	t.Skip(msg)
	return ""
}

type serverConfig struct {
	databaseURL, redisURL string
	s3                    testenv.S3
	codeServer            string
	// publicHost names the server in its public URL; 127.0.0.1 if empty.
	publicHost string
	// publicURL, when set, is the public URL: a front's, in front of the
	// server's own listener.
	publicURL string
	// proxyExtra holds more settings of the proxy block, one per line.
	proxyExtra string
	// subdomainBase turns on subdomain mode.
	subdomainBase string
	// maxPortShare is proxy.max_port_share; the default if empty.
	maxPortShare string
	// backend replaces the single-machine backend block with other blocks
	// (a backend "nomad" block and the workspace settings it needs).
	backend string
	// workspace is a workspace block for the single-machine backend.
	workspace string
	// maxRunning is the running limit per user; 1 if zero.
	maxRunning int
	// maxRunningGlobal is the running limit of the whole server; the
	// default if zero.
	maxRunningGlobal int
	// port is the port the server listens on; a free one if zero.
	port int
	// oidc is an oidc block for the auth block.
	oidc string
	// ttlInterval is how often the TTL runner looks for idle workspaces,
	// and standbyTTL how long a workspace may be idle (added to the
	// workspace block); the defaults if empty.
	ttlInterval, standbyTTL string
	// coordinator holds more settings of the coordinator block, one per
	// line.
	coordinator string
	// defaultPacing keeps the coordinator's default pass intervals, which
	// the tests otherwise shorten, and logs at info: what an operator
	// runs, for measurements.
	defaultPacing bool
}

// localConfig is a single-machine server on this test's own database, Redis
// and bucket, running workspaces with the code-server the test found.
func localConfig(t testing.TB) serverConfig {
	return serverConfig{
		databaseURL: testenv.PostgresURL(t),
		redisURL:    testenv.RedisURL(t),
		s3:          testenv.NewS3(t),
		codeServer:  program(t, envCodeServer, "", "code-server", "scripts/install-code-server.sh installs it"),
	}
}

type server struct {
	// bin is the codehub binary the server runs, for tests of its CLI.
	bin     string
	url     string
	dataDir string
	logPath string
	cfgPath string
	// running is the `codehub server` process, nil while none runs.
	running *serverProcess
}

type serverProcess struct {
	cmd    *exec.Cmd
	exited chan error
}

// codehubBuild is the codehub binary built once for every test of the run;
// TestMain removes its directory.
var codehubBuild struct {
	once sync.Once
	dir  string
	path string
	err  error
}

// codehubBinary is the prebuilt codehub the variable names, or else one
// built from this checkout, once per test run.
func codehubBinary(t testing.TB) string {
	t.Helper()
	if bin := os.Getenv(envCodehubBinary); bin != "" {
		return bin
	}
	codehubBuild.once.Do(func() {
		dir, err := os.MkdirTemp("", "codehub-e2e-bin-")
		if err != nil {
			codehubBuild.err = err
			return
		}
		codehubBuild.dir, codehubBuild.path = dir, filepath.Join(dir, "codehub")
		if out, err := exec.Command("go", "build", "-o", codehubBuild.path, "../cmd/codehub").CombinedOutput(); err != nil {
			codehubBuild.err = fmt.Errorf("%w\n%s", err, out)
		}
	})
	if codehubBuild.err != nil {
		t.Fatalf("build codehub: %v", codehubBuild.err)
	}
	return codehubBuild.path
}

// startServer runs `codehub server` from a configuration file on a free
// loopback port (the single-machine backend unless cfg says otherwise);
// the test's end stops it.
func startServer(t testing.TB, cfg serverConfig) *server {
	t.Helper()
	dir := t.TempDir()
	port := cfg.port
	if port == 0 {
		port = testenv.FreePort(t)
	}
	host := cfg.publicHost
	if host == "" {
		host = "127.0.0.1"
	}
	srv := &server{
		bin:     codehubBinary(t),
		url:     fmt.Sprintf("http://%s:%d", host, port),
		dataDir: filepath.Join(dir, "data"),
		logPath: filepath.Join(dir, "server.log"),
		cfgPath: filepath.Join(dir, "codehub.hcl"),
	}
	if err := os.WriteFile(srv.cfgPath, []byte(renderConfig(srv, port, cfg)), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		srv.stop()
		// Workspaces outlive codehub by design; a failed run must not
		// leave code-server processes behind. (Nomad's end with its agent.)
		if cfg.backend == "" {
			stopLocalWorkspaces(t, srv.dataDir, cfg.codeServer)
		}
		if t.Failed() {
			t.Logf("server log (%s):\n%s", srv.logPath, tail(srv.logPath, 80))
		}
	})
	srv.start(t)
	return srv
}

// start runs `codehub server -config` (again, after kill, with the same
// configuration) and waits until it answers its health check. Every run
// appends to the same log.
func (srv *server) start(t testing.TB) {
	t.Helper()
	if srv.running != nil {
		t.Fatal("codehub server is running already")
	}
	logFile, err := os.OpenFile(srv.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(srv.bin, "server", "-config", srv.cfgPath)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		logFile.Close()
		t.Fatalf("start codehub server: %v", err)
	}
	p := &serverProcess{cmd: cmd, exited: make(chan error, 1)}
	go func() {
		err := cmd.Wait()
		logFile.Close()
		p.exited <- err
	}()
	srv.running = p
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for {
		if resp, err := http.Get(srv.url + "/api/v1/health"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		select {
		case err := <-p.exited:
			p.exited <- err
			t.Fatalf("codehub server exited: %v\n%s", err, tail(srv.logPath, 80))
		case <-ctx.Done():
			t.Fatalf("codehub server never became healthy\n%s", tail(srv.logPath, 80))
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// stop ends the running server as an operator does (SIGTERM), with
// SIGKILL after 20 s, and waits for it.
func (srv *server) stop() {
	p := srv.running
	if p == nil {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(20 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.exited
	}
	srv.running = nil
}

// kill ends the running server with SIGKILL, as a crash or `kill -9` does:
// it gets no chance to finish anything or release anything.
func (srv *server) kill(t testing.TB) {
	t.Helper()
	p := srv.running
	if p == nil {
		t.Fatal("no codehub server to kill")
	}
	if err := p.cmd.Process.Kill(); err != nil {
		t.Fatalf("kill codehub server: %v", err)
	}
	<-p.exited
	srv.running = nil
}

func stopLocalWorkspaces(t testing.TB, dataDir, codeServer string) {
	be, err := local.New(hclog.NewNullLogger(), local.Options{DataDir: dataDir, CodeServer: codeServer})
	if err != nil {
		return
	}
	if err := be.StopAll(context.Background()); err != nil {
		t.Errorf("stop leftover workspaces: %v", err)
	}
}

func renderConfig(srv *server, port int, cfg serverConfig) string {
	proxy := ""
	if cfg.subdomainBase != "" {
		proxy += fmt.Sprintf("  subdomain_base = %q\n", cfg.subdomainBase)
	}
	if cfg.maxPortShare != "" {
		proxy += fmt.Sprintf("  max_port_share = %q\n", cfg.maxPortShare)
	}
	proxy += cfg.proxyExtra
	if proxy != "" {
		proxy = "proxy {\n" + proxy + "}\n"
	}
	backend := cfg.backend
	if backend == "" {
		backend = fmt.Sprintf(`backend "local" {
  data_dir    = %q
  code_server = %q
}
`, srv.dataDir, cfg.codeServer)
	}
	maxRunning := cfg.maxRunning
	if maxRunning == 0 {
		maxRunning = 1
	}
	global := ""
	if cfg.maxRunningGlobal > 0 {
		global = fmt.Sprintf("  max_running_global   = %d\n", cfg.maxRunningGlobal)
	}
	coordinator := cfg.coordinator
	if cfg.ttlInterval != "" {
		coordinator += fmt.Sprintf("  ttl_interval    = %q\n", cfg.ttlInterval)
	}
	workspace := cfg.workspace
	if cfg.standbyTTL != "" {
		if workspace == "" {
			workspace = "workspace {\n}\n"
		}
		// One workspace block holds every workspace setting.
		workspace = strings.Replace(workspace, "workspace {\n", fmt.Sprintf("workspace {\n  standby_ttl = %q\n", cfg.standbyTTL), 1)
	}
	logLevel, pacing := "debug", "  idle_interval   = \"2s\"\n  active_interval = \"250ms\"\n"
	if cfg.defaultPacing {
		logLevel, pacing = "info", ""
	}
	return proxy + backend + workspace + fmt.Sprintf(`listen     = "127.0.0.1:%d"
public_url = %q
log_level  = %q

database { url = %q }
redis    { url = %q }
s3 {
  endpoint   = %q
  bucket     = %q
  region     = %q
  access_key = %q
  secret_key = %q
  use_ssl    = false
}

limits {
  max_running_per_user = %d
%s}

coordinator {
%s%s}

auth {
  bootstrap_admin {
    username = "admin"
    password = %q
  }
%s}
`, port, cmp.Or(cfg.publicURL, srv.url), logLevel, cfg.databaseURL, cfg.redisURL, cfg.s3.Endpoint, cfg.s3.Bucket, cfg.s3.Region,
		cfg.s3.AccessKey, cfg.s3.SecretKey, maxRunning, global, pacing, coordinator, adminPassword, cfg.oidc)
}

func tail(path string, lines int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	all := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(all) > lines {
		all = all[len(all)-lines:]
	}
	return strings.Join(all, "\n")
}
