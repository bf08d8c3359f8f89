package agent

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
	"golang.org/x/sys/unix"
)

// The environment through which the agent receives its secrets. It reads
// and removes them before anything else starts, and makes itself
// undumpable so no process of its user reads them from /proc.
const (
	EnvToken   = "CODEHUB_AGENT_TOKEN"
	EnvHostKey = "CODEHUB_AGENT_HOST_KEY"
	// EnvTag marks every process the agent starts as the workspace's.
	EnvTag = "CODEHUB_AGENT_TAG"
	// envProgramSecret is the program's own secret (code-server's), which
	// SSH sessions must not see any more than its terminals do.
	envProgramSecret = "HASHED_PASSWORD"
)

// RunConfig is the command line of `codehub agent`.
type RunConfig struct {
	// Listen is the address the agent serves on.
	Listen string
	// Socket, when set, is a Unix socket (a path, or an abstract name
	// starting with "@") the agent serves on as well, for a server on the
	// same machine: there it hands over the connections to ports it dials
	// instead of copying their bytes (UpgradeDescriptor).
	Socket string
	// ExcludePorts are the workbench's own ports besides the agent's.
	ExcludePorts []int
	// Home is the workspace's home: HOME of the program and of every
	// session, and where sessions start. Empty keeps $HOME. Nomad's exec
	// driver sets HOME to the task user's entry in the node's user
	// database, never the mounted home, so the job names it.
	Home string
	// Program and Args are the workspace program the agent starts.
	Program string
	Args    []string
}

// Run starts the workspace program under the agent and serves until the
// program ends; the agent exits as the program did. A signal to the agent
// goes on to the program.
func Run(ctx context.Context, logger hclog.Logger, cfg RunConfig) (int, error) {
	token, hostKey := os.Getenv(EnvToken), os.Getenv(EnvHostKey)
	os.Unsetenv(EnvToken)
	os.Unsetenv(EnvHostKey)
	_ = unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0)
	if token == "" || hostKey == "" {
		return 1, fmt.Errorf("agent: %s and %s are required", EnvToken, EnvHostKey)
	}
	key, err := DecodeHostKey(hostKey)
	if err != nil {
		return 1, err
	}
	if cfg.Program == "" {
		return 1, errors.New("agent: the workspace program is required")
	}
	l, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return 1, fmt.Errorf("agent: %w", err)
	}
	defer l.Close()
	var sl net.Listener
	if cfg.Socket != "" {
		if sl, err = net.Listen("unix", cfg.Socket); err != nil {
			return 1, fmt.Errorf("agent: %w", err)
		}
		defer sl.Close()
	}
	tag, err := newTag()
	if err != nil {
		return 1, err
	}
	env := os.Environ()
	home := cfg.Home
	if home != "" {
		env = setEnv(env, "HOME", home)
	} else if home, _ = os.UserHomeDir(); home == "" {
		home, _ = os.Getwd()
	}
	childEnv := append(env, tag)
	a, err := New(logger, os.Getpid(), Options{
		Token: token, HostKey: key, Tag: tag, Home: home, Shell: loginShell(),
		ExcludePorts: append(slices.Clone(cfg.ExcludePorts), l.Addr().(*net.TCPAddr).Port),
		Env:          slices.DeleteFunc(slices.Clone(childEnv), func(kv string) bool { return strings.HasPrefix(kv, envProgramSecret+"=") }),
	})
	if err != nil {
		return 1, err
	}

	cmd := exec.Command(cfg.Program, cfg.Args...)
	cmd.Env = childEnv
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, syscall.SIGQUIT)
	defer signal.Stop(sigs)
	if err := cmd.Start(); err != nil {
		return 1, fmt.Errorf("agent: start %s: %w", cfg.Program, err)
	}

	// The port is on the node's network: a client that never finishes its
	// request headers is dropped.
	srv := &http.Server{Handler: a.Handler(), ReadHeaderTimeout: 10 * time.Second,
		ErrorLog: logger.StandardLogger(&hclog.StandardLoggerOptions{InferLevels: true})}
	served := make(chan error, 2)
	go func() { served <- srv.Serve(l) }()
	if sl != nil {
		go func() { served <- srv.Serve(sl) }()
	}
	logger.Info("agent serving", "addr", l.Addr().String(), "program_pid", cmd.Process.Pid)

	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }()
	var werr error
loop:
	for {
		select {
		case werr = <-waited:
			break loop
		case sig := <-sigs:
			_ = cmd.Process.Signal(sig)
		case <-ctx.Done():
			_ = cmd.Process.Signal(syscall.SIGTERM)
		case err := <-served:
			_ = cmd.Process.Kill()
			<-waited
			a.proc.killAll()
			return 1, fmt.Errorf("agent: serve: %w", err)
		}
	}
	_ = srv.Close()
	<-served
	if sl != nil {
		<-served
	}
	a.Shutdown()
	// Nothing of the workspace outlives its program: what sessions left
	// (nohup, a daemon) would otherwise run on the node with no workspace.
	// A stop kills the agent itself with SIGKILL; the drivers end the rest
	// then (a PID namespace under docker and exec, the task's cgroup under
	// raw_exec).
	a.proc.killAll()
	var exit *exec.ExitError
	if errors.As(werr, &exit) {
		if ws, ok := exit.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return 128 + int(ws.Signal()), nil
		}
		return exit.ExitCode(), nil
	}
	if werr != nil {
		return 1, werr
	}
	return 0, nil
}

// setEnv is env with name set to value, in place of any value it had.
func setEnv(env []string, name, value string) []string {
	env = slices.DeleteFunc(slices.Clone(env), func(kv string) bool { return strings.HasPrefix(kv, name+"=") })
	return append(env, name+"="+value)
}

func newTag() (string, error) {
	b := make([]byte, 12)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return EnvTag + "=" + hex.EncodeToString(b), nil
}

// loginShell is the shell a terminal of the workspace opens: $SHELL, the
// user's entry in /etc/passwd, or the system's shell. A system account
// (nobody, a container's service user) has nologin or false there, which
// would end every session at once, so such an entry counts as none.
func loginShell() string {
	if sh := os.Getenv("SHELL"); usableShell(sh) {
		return sh
	}
	if sh := passwdShell("/etc/passwd", os.Getuid()); sh != "" {
		return sh
	}
	if usableShell("/bin/bash") {
		return "/bin/bash"
	}
	return "/bin/sh"
}

// usableShell reports whether sh is an executable file that opens a shell.
func usableShell(sh string) bool {
	if sh == "" {
		return false
	}
	switch filepath.Base(sh) {
	case "nologin", "false", "true":
		return false
	}
	fi, err := os.Stat(sh)
	return err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0
}

// passwdShell is the login shell of uid in the passwd file at path, if it
// is a usable one.
func passwdShell(path string, uid int) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		fields := strings.Split(s.Text(), ":")
		if len(fields) == 7 && fields[2] == strconv.Itoa(uid) {
			if usableShell(fields[6]) {
				return fields[6]
			}
			return ""
		}
	}
	return ""
}
