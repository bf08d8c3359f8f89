package local

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"net"
	"net/http"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/codehub-io/codehub/agent"
	"github.com/codehub-io/codehub/config"
	"github.com/codehub-io/codehub/controller"
	"github.com/codehub-io/codehub/firststart"
)

// workspaceState is run/ws-{id}/state.json: the running (or last) process
// of a workspace.
type workspaceState struct {
	Process identity `json:"process"`
	RunID   string   `json:"run_id,omitempty"`
	Port    int      `json:"port"`
	// AgentPort is the loopback port of the workspace agent; zero when the
	// program runs without one.
	AgentPort int `json:"agent_port,omitempty"`
	// AgentSocket is the agent's abstract Unix socket, through which the
	// server gets the connections to ports without a hop through the
	// agent; empty for an agent started without one.
	AgentSocket string    `json:"agent_socket,omitempty"`
	StartedAt   time.Time `json:"started_at"`
	// Stopped is set by StopWorkspace: the process ending is then expected,
	// not a failure.
	Stopped bool `json:"stopped"`
}

// Files of a workspace's run dir.
const (
	stateFile = "state.json"
	logFile   = "output.log"
	exitFile  = "exit"
)

// ProvisionVolume creates the home directory. It appears under its final
// name only once complete, so an existing directory is a ready volume.
func (b *Backend) ProvisionVolume(_ context.Context, spec controller.VolumeSpec) error {
	if err := checkID(spec.WorkspaceID); err != nil {
		return err
	}
	home := b.HomeDir(spec.WorkspaceID)
	if _, err := os.Stat(home); err == nil {
		return nil
	}
	tmp, err := os.MkdirTemp(volumesDir(b.opts.DataDir), ".new-")
	if err != nil {
		return fmt.Errorf("create home of %s: %w", spec.WorkspaceID, err)
	}
	if b.runAs != nil {
		if err := b.runAs.chown(tmp); err != nil {
			_ = os.Remove(tmp)
			return fmt.Errorf("create home of %s: %w", spec.WorkspaceID, err)
		}
	}
	if err := os.Rename(tmp, home); err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("create home of %s: %w", spec.WorkspaceID, err)
	}
	b.logger.Debug("created home", "workspace_id", spec.WorkspaceID, "path", home)
	return nil
}

// DeleteVolume deletes the home and everything in it. One machine has one
// home per workspace, at a path named for it, so the name is its identity
// and the observed volume id (always empty here) is not needed. While the
// workspace process or an archive/restore job of the workspace lives it
// returns controller.ErrVolumeInUse.
func (b *Backend) DeleteVolume(_ context.Context, wsID, _ string) error {
	if err := checkID(wsID); err != nil {
		return err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if user := b.liveUser(wsID); user != "" {
		return fmt.Errorf("%w: %s used by its %s", controller.ErrVolumeInUse, controller.VolumeName(wsID), user)
	}
	if err := b.endLeftovers(wsID); err != nil {
		return fmt.Errorf("delete home of %s: %w", wsID, err)
	}
	home := b.HomeDir(wsID)
	// Renaming is atomic: the volume is gone at once even if removing a big
	// tree takes a while or fails half way.
	trash, err := os.MkdirTemp(trashDir(b.opts.DataDir), controller.VolumeName(wsID)+"-")
	if err != nil {
		return fmt.Errorf("delete home of %s: %w", wsID, err)
	}
	if err := os.Rename(home, filepath.Join(trash, "home")); err != nil && !errors.Is(err, fs.ErrNotExist) {
		_ = os.Remove(trash)
		return fmt.Errorf("delete home of %s: %w", wsID, err)
	}
	if err := b.emptyTrash(); err != nil {
		return fmt.Errorf("remove deleted home of %s: %w", wsID, err)
	}
	b.logger.Debug("deleted home", "workspace_id", wsID)
	return nil
}

// emptyTrash removes every deleted home, including what a crash in the
// middle of an earlier removal left behind. Callers hold b.mu, so no
// deletion is moving a home in meanwhile.
func (b *Backend) emptyTrash() error {
	trash := trashDir(b.opts.DataDir)
	entries, err := os.ReadDir(trash)
	if err != nil {
		return err
	}
	var errs []error
	for _, e := range entries {
		errs = append(errs, os.RemoveAll(filepath.Join(trash, e.Name())))
	}
	return errors.Join(errs...)
}

// liveUser names what of the workspace still runs and may use its home.
func (b *Backend) liveUser(wsID string) string {
	var st workspaceState
	if found, _ := b.readRecord(filepath.Join(b.workspaceDir(wsID), stateFile), &st); found && b.alive(st.Process) {
		return "workspace process"
	}
	for _, kind := range []controller.JobKind{controller.JobArchive, controller.JobRestore} {
		var rec jobRecord
		if found, _ := b.readRecord(filepath.Join(b.batchDir(wsID, kind), jobFile), &rec); found && b.alive(rec.Process) {
			return string(kind) + " job"
		}
	}
	return ""
}

// endLeftovers kills what the last launch of the workspace left running
// after its program ended (a detached daemon): nothing may go on using the
// home once it is archived, restored over or deleted.
func (b *Backend) endLeftovers(wsID string) error {
	var st workspaceState
	found, err := b.readRecord(filepath.Join(b.workspaceDir(wsID), stateFile), &st)
	if err != nil || !found {
		return err
	}
	return b.kill(st.Process)
}

// StartWorkspace starts the workspace program on a free loopback port with
// its home as HOME. A live process of the same run is left alone; one of an
// earlier run is replaced.
func (b *Backend) StartWorkspace(_ context.Context, spec controller.WorkspaceSpec) error {
	wsID := spec.WorkspaceID
	if err := checkID(wsID); err != nil {
		return err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	dir := b.workspaceDir(wsID)
	var st workspaceState
	found, err := b.readRecord(filepath.Join(dir, stateFile), &st)
	if err != nil {
		return err
	}
	if found && b.alive(st.Process) {
		if st.Stopped {
			return fmt.Errorf("workspace %s is still stopping", wsID)
		}
		if st.RunID == spec.RunID {
			return nil
		}
		// A process of an earlier run demands that run's token, which the
		// proxy no longer sends: it is replaced below.
	}
	home := b.HomeDir(wsID)
	if err := homeExists(home); err != nil {
		return fmt.Errorf("start %s: %w", wsID, err)
	}
	// The program ended, but what it left running would lose its record.
	if found {
		if err := b.kill(st.Process); err != nil {
			return fmt.Errorf("start %s: leftovers of the last run: %w", wsID, err)
		}
	}
	if err := b.adoptHome(home); err != nil {
		return fmt.Errorf("start %s: %w", wsID, err)
	}
	if err := resetDir(dir); err != nil {
		return fmt.Errorf("start %s: %w", wsID, err)
	}
	port, err := freePort()
	if err != nil {
		return err
	}
	agentPort, agentSocket := 0, ""
	if b.opts.Agent != nil {
		if agentPort, err = freePort(); err != nil {
			return err
		}
		// Abstract, so that it needs no directory the workspace's user
		// and mount view can both reach; random, so that no other
		// workspace can take the name first. Only a client with the
		// run's token is served on it, as on the port. Where the
		// machine forbids abstract sockets (a seccomp or LSM rule), the
		// agent serves on its port alone and relays what it dials.
		suffix, err := newLaunchTag()
		if err != nil {
			return err
		}
		if abstractSockets() {
			agentSocket = "@codehub-agent-" + suffix
		}
	}
	l := b.workspaceLaunch(spec, port, agentPort, agentSocket, home)
	if l.tag, err = newLaunchTag(); err != nil {
		return err
	}
	id, err := b.start(l)
	if err != nil {
		return err
	}
	st = workspaceState{Process: id, RunID: spec.RunID, Port: port, AgentPort: agentPort, AgentSocket: agentSocket, StartedAt: time.Now().UTC()}
	if err := writeJSON(filepath.Join(dir, stateFile), st); err != nil {
		// Untracked, the process would never be stopped: stop it now.
		_ = b.kill(id)
		return fmt.Errorf("start %s: record process: %w", wsID, err)
	}
	b.logger.Info("started workspace", "workspace_id", wsID, "pid", id.PID, "port", port)
	return nil
}

// workspaceLaunch is the program line of a workspace: code-server bound to
// loopback, answering only requests that carry the workspace's upstream
// token when there is one, or the configured command with its placeholders
// filled in; under the workspace agent when agentPort is set.
func (b *Backend) workspaceLaunch(spec controller.WorkspaceSpec, port, agentPort int, agentSocket, home string) launch {
	wsID := spec.WorkspaceID
	dir := b.workspaceDir(wsID)
	// The template's environment, in a stable order; configuration keeps
	// it off the names set below.
	var env []string
	for _, name := range slices.Sorted(maps.Keys(spec.Env)) {
		env = append(env, name+"="+spec.Env[name])
	}
	for _, name := range slices.Sorted(maps.Keys(spec.UserEnv)) {
		env = append(env, name+"="+spec.UserEnv[name])
	}
	inside := b.programHome(spec.Name, wsID, home)
	env = append(env, "HOME="+inside)
	if b.runAs != nil {
		env = append(env, b.runAs.env()...)
	}
	auth := "none"
	if b.opts.UpstreamToken != nil {
		// code-server reads and then unsets it, so its terminals never see it.
		env = append(env, "HASHED_PASSWORD="+b.opts.UpstreamToken(wsID, spec.RunID))
		auth = "password"
	}
	l := launch{
		env:      childEnv(env...),
		dir:      home,
		logPath:  filepath.Join(dir, logFile),
		exitPath: filepath.Join(dir, exitFile),
	}
	if b.opts.Command != "" {
		l.program = b.opts.Command
		l.args = (&config.Workspace{Args: b.opts.Args}).ExpandArgs(port, inside)
	} else {
		l.program = b.opts.CodeServer
		l.args = codeServerArgs(port, inside, auth, spec.Name)
	}
	if agentPort != 0 {
		// Inside the first-start script, which drops the git credential
		// before it starts the agent, and inside the user and home view:
		// the agent runs where and as the program does.
		l.args = append([]string{"agent", "-listen", hostPort(agentPort), "-socket", agentSocket, "-exclude-port", strconv.Itoa(port), "--", l.program}, l.args...)
		l.program = b.opts.CodehubBinary
		l.env = append(l.env,
			agent.EnvToken+"="+b.opts.Agent.Token(wsID, spec.RunID),
			agent.EnvHostKey+"="+agent.EncodeHostKey(b.opts.Agent.HostKey(wsID)))
	}
	if spec.FirstStart() {
		// The clone runs in front of the program, as its user, and its
		// output lands in the program's log; the script drops the
		// credential before it starts the program.
		l.args = append([]string{"-c", firststart.Script, "sh", l.program}, l.args...)
		l.program = "/bin/sh"
		l.env = append(l.env, firststart.Env(spec.Repository, spec.Dotfiles, spec.GitToken, spec.Init, "")...)
	}
	if b.runAs != nil {
		l.program, l.args = b.runAs.wrap(b.setpriv, l.program, l.args)
	}
	if b.view != nil {
		// Outermost: the mounts need root, or the user namespace's root,
		// before setpriv drops to the workspace user.
		l.program, l.args = b.view.wrap(path.Base(inside), home, l.program, l.args)
	}
	return l
}

// codeServerArgs starts code-server for one workspace. Its settings and
// extensions live in the home, so they survive archive and restore.
//
// code-server opens the folder it last opened, remembered inside the home,
// before the one it is given; --ignore-last-opened makes it open the home
// as it is now, so a home restored or moved to another path never reopens
// a folder that is gone. The workspace's name names the workbench installed
// as an app (the proxy titles its window).
func codeServerArgs(port int, home, auth, name string) []string {
	args := []string{
		"--auth", auth,
		"--bind-addr", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)),
		"--disable-telemetry",
		"--disable-update-check",
		"--disable-workspace-trust",
		"--ignore-last-opened",
		"--user-data-dir", filepath.Join(home, ".local", "share", "code-server"),
		"--extensions-dir", filepath.Join(home, ".local", "share", "code-server", "extensions"),
	}
	if name != "" {
		args = append(args, "--app-name", name)
	}
	return append(args, home)
}

// resetDir empties dir (state of a previous run) and recreates it.
func resetDir(dir string) error {
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	return os.MkdirAll(dir, 0o700)
}

// GiveUpStopArchive does nothing: a local stop archives nothing.
func (b *Backend) GiveUpStopArchive(context.Context, string) error { return nil }

// StopWorkspace kills the workspace process and everything it started at
// once, including processes that left its process tree. Its state stays
// until PurgeJob, so Observe keeps reporting it until it is gone. Homes
// stay on this machine's disk, which no drain takes away: a stop saves
// nothing to S3 whatever the mode (backups do, docs/local.md).
func (b *Backend) StopWorkspace(_ context.Context, wsID string, _ controller.StopMode) error {
	if err := checkID(wsID); err != nil {
		return err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	path := filepath.Join(b.workspaceDir(wsID), stateFile)
	var st workspaceState
	found, err := b.readRecord(path, &st)
	if err != nil || !found {
		return err
	}
	if !st.Stopped {
		st.Stopped = true
		if err := writeJSON(path, st); err != nil {
			return fmt.Errorf("stop %s: %w", wsID, err)
		}
	}
	b.forgetReady(wsID)
	if err := b.kill(st.Process); err != nil {
		return fmt.Errorf("stop %s: %w", wsID, err)
	}
	b.logger.Info("stopped workspace", "workspace_id", wsID, "pid", st.Process.PID)
	return nil
}

// Resolve returns the loopback address of a live workspace that passed its
// health check, probing it when no observation has yet.
func (b *Backend) Resolve(ctx context.Context, wsID string) (string, error) {
	if err := checkID(wsID); err != nil {
		return "", err
	}
	var st workspaceState
	found, err := b.readRecord(filepath.Join(b.workspaceDir(wsID), stateFile), &st)
	if err != nil {
		return "", err
	}
	if !found || st.Stopped || !b.alive(st.Process) {
		return "", controller.ErrNoUpstream
	}
	if !b.isReady(wsID, st.Process) {
		if !b.healthy(ctx, st.Port) {
			return "", controller.ErrNoUpstream
		}
		b.setReady(wsID, st.Process, true)
	}
	return hostPort(st.Port), nil
}

// ResolveAgent returns the address of the agent of a live workspace, its
// Unix socket where it has one, else its loopback port;
// controller.ErrNoUpstream when none runs, agent.ErrNoAgent when it was
// started without one.
func (b *Backend) ResolveAgent(_ context.Context, wsID string) (string, error) {
	if err := checkID(wsID); err != nil {
		return "", err
	}
	var st workspaceState
	found, err := b.readRecord(filepath.Join(b.workspaceDir(wsID), stateFile), &st)
	if err != nil {
		return "", err
	}
	if !found || st.Stopped || !b.alive(st.Process) {
		return "", controller.ErrNoUpstream
	}
	if st.AgentPort == 0 {
		return "", fmt.Errorf("%s: %w", wsID, agent.ErrNoAgent)
	}
	if st.AgentSocket != "" {
		return agent.SocketPrefix + st.AgentSocket, nil
	}
	return hostPort(st.AgentPort), nil
}

// abstractSockets reports whether this machine lets a process listen on
// an abstract Unix socket; the agent, started here, is let or refused alike.
var abstractSockets = sync.OnceValue(func() bool {
	tag, err := newLaunchTag()
	if err != nil {
		return false
	}
	l, err := net.Listen("unix", "@codehub-probe-"+tag)
	if err != nil {
		return false
	}
	l.Close()
	return true
})

func hostPort(port int) string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(port)) }

// healthy reports whether GET /healthz on the port answers 200.
func (b *Backend) healthy(ctx context.Context, port int) bool {
	ctx, cancel := context.WithTimeout(ctx, b.opts.HealthTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+hostPort(port)+"/healthz", nil)
	if err != nil {
		return false
	}
	resp, err := b.client.Do(req)
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

func (b *Backend) isReady(wsID string, id identity) bool {
	b.readyMu.Lock()
	defer b.readyMu.Unlock()
	got, ok := b.ready[wsID]
	return ok && got == id
}

func (b *Backend) setReady(wsID string, id identity, ready bool) {
	b.readyMu.Lock()
	defer b.readyMu.Unlock()
	if ready {
		b.ready[wsID] = id
		return
	}
	delete(b.ready, wsID)
}

func (b *Backend) forgetReady(wsID string) { b.setReady(wsID, identity{}, false) }

// StopAll stops every workspace process and every archive or restore job
// this data dir knows, for tearing a single-machine installation down while
// codehub is not running (workspaces outlive codehub by design). A job
// killed half way is observed as failed and retried by the next codehub.
func (b *Backend) StopAll(ctx context.Context) error {
	runs, err := readNames(runDir(b.opts.DataDir))
	if err != nil {
		return err
	}
	var errs []error
	for _, name := range runs {
		if wsID, kind, ok := controller.ParseJobName(name); ok && kind == controller.JobWorkspace {
			errs = append(errs, b.StopWorkspace(ctx, wsID, controller.StopDiscard))
		}
	}
	jobs, err := readNames(jobsDir(b.opts.DataDir))
	if err != nil {
		return errors.Join(append(errs, err)...)
	}
	for _, name := range jobs {
		if wsID, kind, ok := controller.ParseJobName(name); ok && kind != controller.JobWorkspace {
			errs = append(errs, b.stopJob(wsID, kind))
		}
	}
	return errors.Join(errs...)
}

func (b *Backend) stopJob(wsID string, kind controller.JobKind) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	var rec jobRecord
	found, err := b.readRecord(filepath.Join(b.batchDir(wsID, kind), jobFile), &rec)
	if err != nil || !found {
		return err
	}
	if err := b.kill(rec.Process); err != nil {
		return fmt.Errorf("stop %s: %w", controller.JobName(wsID, kind), err)
	}
	return nil
}
