// Package local runs workspaces on the machine codehub runs on, for trying
// CodeHub without a Nomad fleet: a home volume is a directory under the data
// dir, a running workspace is a code-server process bound to loopback, and
// archive and restore are `codehub job archive|restore` child processes with
// the same contract as the Nomad batch jobs.
//
// Every process is detached from codehub (its own process group, reparented
// away from codehub at once) and described by files under the data dir, so a
// restarted codehub observes and stops what an earlier one started. The
// processes of one launch carry its random tag in their environment, so what
// left the process tree (a tmux server) is still found and stopped with it.
// Workspaces keep running while codehub is down. With a workspace user
// configured, workspace programs run as that user and reach nothing of
// codehub's but their own home; jobs, which hold the S3 keys, stay
// codehub's. Where the machine allows mount namespaces, a workspace program
// sees its home as /home/{name} (homeview.go). The package never touches a
// process it has no state file for, and never deletes a home a live process
// of its workspace may still be using.
package local

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/codehub-io/codehub/agent"
	"github.com/codehub-io/codehub/config"
	"github.com/codehub-io/codehub/controller"
)

var (
	_ controller.Backend   = (*Backend)(nil)
	_ controller.Upstreams = (*Backend)(nil)
)

// Options configures the local backend.
type Options struct {
	// DataDir holds homes, process state and logs.
	DataDir string
	// CodeServer is the code-server executable run for each workspace
	// (a path, or a name looked up on PATH) when Command is empty.
	CodeServer string
	// Command, when set, is run instead of code-server, with Args; the
	// placeholders config.PlaceholderPort and config.PlaceholderHome in
	// Args are replaced by the port to listen on (127.0.0.1) and the home.
	Command string
	Args    []string
	// UpstreamToken, when set, gives the token of a workspace's run:
	// code-server then demands it as its session cookie (the proxy sends
	// it), and any other program finds it in HASHED_PASSWORD. Nil runs
	// code-server without auth, open to every local user.
	UpstreamToken func(workspaceID, runID string) string
	// CodehubBinary runs `job archive|restore`, and the workspace agent;
	// empty is this executable.
	CodehubBinary string
	// Agent, when set, runs every workspace program under `codehub agent`
	// (SSH, the workspace's ports) on a second loopback port, with the
	// token and host key these keys derive for the workspace. Nil runs the
	// program alone.
	Agent *agent.Keys
	// S3 is where archives live; job processes get it as the ARCHIVE_URL
	// and S3_* environment of the Nomad batch jobs.
	S3 config.S3
	// HealthTimeout bounds one readiness probe; zero means 2 s.
	HealthTimeout time.Duration
	// User, when set, is the user (a name or a numeric uid) workspace
	// programs run as, with its primary group; homes are given to it.
	// Empty runs them as codehub's own user. Archive and restore jobs
	// always run as codehub's user: they hold the S3 keys.
	User string
}

// errNotLocal is returned when the configuration selects another backend.
var errNotLocal = errors.New(`configuration has no backend "local" block`)

// OptionsFromConfig maps codehub's configuration onto backend options.
// workspace.command and args are for Nomad's exec and raw_exec drivers; on
// one machine the workspace program is code-server. UpstreamToken is the
// caller's to set.
func OptionsFromConfig(cfg *config.Config) (Options, error) {
	if cfg.Backend == nil || cfg.Backend.Local == nil {
		return Options{}, errNotLocal
	}
	l := cfg.Backend.Local
	return Options{DataDir: l.DataDir, CodeServer: l.CodeServer, User: l.User, S3: *cfg.S3}, nil
}

// Backend is the single-machine backend. It is safe for concurrent use.
type Backend struct {
	logger hclog.Logger
	opts   Options
	client *http.Client
	bootID string
	// runAs is the account workspace programs run as, nil for codehub's
	// own; setpriv is the program that switches to it.
	runAs   *account
	setpriv string
	// view shows each workspace program its home as /home/{name}; nil
	// where the machine allows no mount namespace.
	view *homeView

	// mu serialises actuators so two calls for one workspace never race on
	// its state files. Observe only reads.
	mu sync.Mutex

	// ready remembers, per workspace, the process that last passed its
	// health check, so Resolve need not probe on every request.
	readyMu sync.Mutex
	ready   map[string]identity

	// unreadable holds the paths of state files already reported as not
	// decoding, so each is logged once.
	unreadable sync.Map
}

// New checks the options, creates the data dir layout and returns the
// backend. It does not start or stop anything.
func New(logger hclog.Logger, opts Options) (*Backend, error) {
	if opts.DataDir == "" {
		return nil, errors.New("local backend: data dir is required")
	}
	dir, err := filepath.Abs(opts.DataDir)
	if err != nil {
		return nil, fmt.Errorf("local backend: data dir: %w", err)
	}
	opts.DataDir = dir
	if opts.Command == "" {
		if opts.CodeServer == "" {
			return nil, errors.New("local backend: code-server path or a command is required")
		}
		if opts.CodeServer, err = lookPath(opts.CodeServer); err != nil {
			return nil, fmt.Errorf("local backend: code-server: %w", err)
		}
	} else if opts.Command, err = lookPath(opts.Command); err != nil {
		return nil, fmt.Errorf("local backend: command: %w", err)
	}
	if opts.CodehubBinary == "" {
		if opts.CodehubBinary, err = os.Executable(); err != nil {
			return nil, fmt.Errorf("local backend: codehub binary: %w", err)
		}
	}
	if opts.HealthTimeout <= 0 {
		opts.HealthTimeout = 2 * time.Second
	}
	b := &Backend{
		logger: logger,
		opts:   opts,
		client: &http.Client{Timeout: opts.HealthTimeout},
		ready:  make(map[string]identity),
	}
	if err := b.setUser(); err != nil {
		return nil, fmt.Errorf("local backend: %w", err)
	}
	if err := b.makeLayout(); err != nil {
		return nil, fmt.Errorf("local backend: %w", err)
	}
	if b.runAs == nil && os.Geteuid() == 0 {
		logger.Warn("workspaces run as root: every workspace user can read codehub's configuration and data; set backend.local.user")
	}
	if b.view, err = newHomeView(context.Background(), runDir(dir)); err != nil {
		logger.Warn("workspaces see their home at its path in the data dir: no mount namespace to show it as /home/{name}", "error", err)
	}
	if b.bootID, err = readBootID(); err != nil {
		return nil, fmt.Errorf("local backend: %w", err)
	}
	return b, nil
}

// setUser resolves the account workspaces run as, if one is configured,
// and checks that it can run the workspace program.
func (b *Backend) setUser() error {
	if b.opts.User == "" {
		return nil
	}
	a, err := lookupAccount(b.opts.User)
	if err != nil {
		return err
	}
	if euid := os.Geteuid(); euid != 0 && euid != a.uid {
		return fmt.Errorf("running workspaces as %s needs codehub to run as root", a.name)
	}
	// Giving a home back walks a tree the user wrote; a hard link it made
	// to a file of root's would be handed over with it. The kernel forbids
	// making such links only while protected_hardlinks is on.
	if protected, err := os.ReadFile("/proc/sys/fs/protected_hardlinks"); err != nil || strings.TrimSpace(string(protected)) != "1" {
		return fmt.Errorf("running workspaces as %s needs the sysctl fs.protected_hardlinks=1 (the default)", a.name)
	}
	if b.setpriv, err = execLookPath("setpriv"); err != nil {
		return fmt.Errorf("running workspaces as %s needs setpriv (util-linux): %w", a.name, err)
	}
	program := b.opts.Command
	if program == "" {
		program = b.opts.CodeServer
	}
	if err := a.reachable(program, true); err != nil {
		return fmt.Errorf("workspace program: %w", err)
	}
	if b.opts.Agent != nil {
		if err := a.reachable(b.opts.CodehubBinary, true); err != nil {
			return fmt.Errorf("workspace agent: %w", err)
		}
	}
	b.runAs = a
	return nil
}

// makeLayout creates the data dir. Only homes are the workspaces' business:
// with a workspace user the data dir and the volumes dir let it pass to its
// home (mode 0711, nothing listed), and process state, job logs with their
// S3 locations, and deleted homes stay private to codehub (0700).
func (b *Backend) makeLayout() error {
	dir := b.opts.DataDir
	passable := os.FileMode(0o700)
	if b.runAs != nil {
		passable = 0o711
	}
	for _, d := range []struct {
		path string
		mode os.FileMode
	}{
		{dir, passable}, {volumesDir(dir), passable},
		{runDir(dir), 0o700}, {jobsDir(dir), 0o700}, {trashDir(dir), 0o700},
	} {
		if err := os.MkdirAll(d.path, d.mode); err != nil {
			return err
		}
		// An existing directory keeps the mode it was made with otherwise.
		if err := os.Chmod(d.path, d.mode); err != nil {
			return err
		}
	}
	if b.runAs == nil {
		return nil
	}
	return b.runAs.reachable(filepath.Join(volumesDir(dir), "home"), false)
}

// lookPath resolves a program name on PATH and makes a path absolute, so the
// recorded command line means the same after a restart from another dir.
func lookPath(name string) (string, error) {
	if !strings.ContainsRune(name, os.PathSeparator) {
		return execLookPath(name)
	}
	abs, err := filepath.Abs(name)
	if err != nil {
		return "", err
	}
	if _, err := os.Stat(abs); err != nil {
		return "", err
	}
	return abs, nil
}

// checkID refuses an id that is not a workspace's, so no path made from one
// can leave the data dir.
func checkID(wsID string) error {
	if !controller.ValidWorkspaceID(wsID) {
		return fmt.Errorf("invalid workspace id %q", wsID)
	}
	return nil
}

// Layout of the data dir.
func volumesDir(dataDir string) string { return filepath.Join(dataDir, "volumes") }
func runDir(dataDir string) string     { return filepath.Join(dataDir, "run") }
func jobsDir(dataDir string) string    { return filepath.Join(dataDir, "jobs") }
func trashDir(dataDir string) string   { return filepath.Join(dataDir, "trash") }

// HomeDir is the home directory (the volume) of a workspace.
func (b *Backend) HomeDir(wsID string) string {
	return filepath.Join(volumesDir(b.opts.DataDir), controller.VolumeName(wsID))
}

// homeExists is what a start or a job checks first: a home that is not
// there is controller.ErrNoVolume.
func homeExists(home string) error {
	_, err := os.Stat(home)
	if errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("%w: %w", controller.ErrNoVolume, err)
	}
	if err != nil {
		return fmt.Errorf("home: %w", err)
	}
	return nil
}

func (b *Backend) workspaceDir(wsID string) string {
	return filepath.Join(runDir(b.opts.DataDir), controller.JobName(wsID, controller.JobWorkspace))
}

func (b *Backend) batchDir(wsID string, kind controller.JobKind) string {
	return filepath.Join(jobsDir(b.opts.DataDir), controller.JobName(wsID, kind))
}
