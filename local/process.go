package local

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
)

var execLookPath = exec.LookPath

// identity names one process for good: a pid alone may be reused, a pid with
// its start time (in clock ticks since boot) within one boot may not.
type identity struct {
	PID        int    `json:"pid"`
	StartTicks uint64 `json:"start_ticks"`
	BootID     string `json:"boot_id"`
	// PGID is the process group (and session) the launcher created.
	PGID int `json:"pgid"`
	// Launch is the value of launchEnv in the environment of every process
	// of this launch, which descendants inherit even after they leave the
	// process tree (a tmux server, a job disowned in a closed terminal).
	// Empty in state written before it existed.
	Launch string `json:"launch,omitempty"`
}

// launchEnv tags the processes of one launch; its value is random and
// names nothing else.
const launchEnv = "CODEHUB_LAUNCH"

func newLaunchTag() (string, error) {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("launch tag: %w", err)
	}
	return hex.EncodeToString(b), nil
}

func readBootID() (string, error) {
	b, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return "", fmt.Errorf("read boot id: %w", err)
	}
	return strings.TrimSpace(string(b)), nil
}

// procStat is what we read from /proc/PID/stat.
type procStat struct {
	state      byte
	ppid       int
	pgid       int
	startTicks uint64
}

// parseStat parses the contents of /proc/PID/stat. The command name may hold
// spaces and parentheses, so fields are counted from its last ')'.
func parseStat(b []byte) (procStat, error) {
	end := bytes.LastIndexByte(b, ')')
	if end < 0 {
		return procStat{}, errors.New("stat: no command name")
	}
	f := strings.Fields(string(b[end+1:]))
	// f[0] is field 3 (state); start time is field 22.
	if len(f) < 20 || len(f[0]) != 1 {
		return procStat{}, errors.New("stat: too few fields")
	}
	ppid, err1 := strconv.Atoi(f[1])
	pgid, err2 := strconv.Atoi(f[2])
	start, err3 := strconv.ParseUint(f[19], 10, 64)
	if err := errors.Join(err1, err2, err3); err != nil {
		return procStat{}, fmt.Errorf("stat: %w", err)
	}
	return procStat{state: f[0][0], ppid: ppid, pgid: pgid, startTicks: start}, nil
}

func readStat(pid int) (procStat, error) {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return procStat{}, err
	}
	return parseStat(b)
}

// alive reports whether the process id names is still running. A zombie
// has finished; nobody but its parent can tell its exit status, which is
// why the launcher records it in a file.
func (b *Backend) alive(id identity) bool {
	if id.PID <= 0 || id.BootID != b.bootID {
		return false
	}
	st, err := readStat(id.PID)
	if err != nil {
		return false
	}
	return st.startTicks == id.StartTicks && st.state != 'Z' && st.state != 'X'
}

// launch is one program to start detached from codehub.
type launch struct {
	program string
	args    []string
	env     []string
	dir     string
	// logPath receives the program's stdout and stderr; exitPath its exit
	// status, written when it ends.
	logPath  string
	exitPath string
	// tag is the value of launchEnv for every process of this launch.
	tag string
}

// launcherScript runs the program in a background subshell that records its
// exit status, prints the subshell's pid and exits at once. The subshell is
// then orphaned: codehub is not its parent, so it behaves the same whether
// or not the codehub that started it still runs.
const launcherScript = `log=$1 exitf=$2
shift 2
( "$@" </dev/null >>"$log" 2>&1; echo $? >"$exitf.tmp" && mv "$exitf.tmp" "$exitf" ) </dev/null >/dev/null 2>&1 &
echo $!`

// start launches l in its own session and returns the identity of the
// process that lives exactly as long as the program (plus the moment it
// takes to write the exit status).
func (b *Backend) start(l launch) (identity, error) {
	args := append([]string{"-c", launcherScript, "sh", l.logPath, l.exitPath, l.program}, l.args...)
	cmd := exec.Command("/bin/sh", args...)
	cmd.Env = append(l.env[:len(l.env):len(l.env)], launchEnv+"="+l.tag)
	cmd.Dir = l.dir
	// A session of its own: no signal aimed at codehub's terminal or process
	// group (Ctrl-C on `make run`) reaches the workspace.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return identity{}, fmt.Errorf("start %s: %w: %s", l.program, err, strings.TrimSpace(stderr.String()))
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(out)))
	if err != nil {
		return identity{}, fmt.Errorf("start %s: launcher printed %q: %w", l.program, out, err)
	}
	id := identity{PID: pid, BootID: b.bootID, PGID: cmd.Process.Pid, Launch: l.tag}
	st, err := readStat(pid)
	if err != nil {
		// Already gone (it failed at once): the exit file tells the rest.
		return id, nil
	}
	id.StartTicks = st.startTicks
	return id, nil
}

// kill sends SIGKILL to every process of a launch: the recorded process,
// every descendant of it (code-server's terminals run in sessions of their
// own), every process carrying the launch's tag wherever it moved, and the
// launcher's process group while it still holds one of them. Stopping is
// immediate by design: the home is on disk, nothing is lost but the
// editor's unsaved buffers, which live in the browser.
//
// The group is signalled only when a member is known to be ours: once the
// group is empty the kernel may give its number to a stranger's group.
func (b *Backend) kill(id identity) error {
	if id.BootID != b.bootID {
		return nil
	}
	procs := readProcs()
	// Parents before their children: the workspace agent must be gone
	// before the shells of its SSH sessions are, or it would report their
	// end to each client as a session that finished, and the client would
	// hang up before codehub tells it why the workspace went.
	var victims []int
	seen := make(map[int]bool)
	add := func(pid int) {
		if !seen[pid] {
			seen[pid] = true
			victims = append(victims, pid)
		}
	}
	if b.alive(id) {
		add(id.PID)
		for _, pid := range collectTree(procs.children(), id.PID) {
			add(pid)
		}
	}
	if id.Launch != "" {
		for _, pid := range slices.Sorted(maps.Keys(procs)) {
			if hasEnv(pid, launchEnv+"="+id.Launch) {
				add(pid)
			}
		}
	}
	ownGroup := false
	var errs []error
	for _, pid := range victims {
		if procs[pid].pgid == id.PGID {
			ownGroup = true
		}
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
			errs = append(errs, fmt.Errorf("kill %d: %w", pid, err))
		}
	}
	if ownGroup && id.PGID > 0 {
		if err := syscall.Kill(-id.PGID, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
			errs = append(errs, fmt.Errorf("kill group %d: %w", id.PGID, err))
		}
	}
	return errors.Join(errs...)
}

// procTable is every process in /proc, read in one pass.
type procTable map[int]procStat

func readProcs() procTable {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	procs := make(procTable, len(entries))
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if st, err := readStat(pid); err == nil {
			procs[pid] = st
		}
	}
	return procs
}

func (t procTable) children() map[int][]int {
	children := make(map[int][]int, len(t))
	for pid, st := range t {
		children[st.ppid] = append(children[st.ppid], pid)
	}
	return children
}

// hasEnv reports whether the environment a process started with holds the
// entry kv. Processes of other users are unreadable and never match.
func hasEnv(pid int, kv string) bool {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "environ"))
	if err != nil {
		return false
	}
	for entry := range bytes.SplitSeq(b, []byte{0}) {
		if string(entry) == kv {
			return true
		}
	}
	return false
}

// collectTree walks a parent -> children map below root, breadth first.
func collectTree(children map[int][]int, root int) []int {
	var out []int
	queue := []int{root}
	seen := map[int]bool{root: true}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		for _, c := range children[p] {
			if seen[c] {
				continue
			}
			seen[c] = true
			out = append(out, c)
			queue = append(queue, c)
		}
	}
	return out
}

// readExit returns the recorded exit status, or ok=false when none exists.
func readExit(path string) (code int, ok bool) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, false
	}
	code, err = strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return 0, false
	}
	return code, true
}

// freePort asks the kernel for a loopback port nobody uses right now.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("find a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// writeJSON replaces path atomically and durably: the new content is on
// disk before it takes the name, so a crash, even of the machine, leaves the
// old or the new content.
func writeJSON(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	_, err = f.Write(append(b, '\n'))
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		return err
	}
	return syncDir(filepath.Dir(path))
}

// syncDir makes a rename in dir durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// readJSON reads a state file; found=false when it does not exist.
func readJSON(path string, v any) (found bool, err error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if err := json.Unmarshal(b, v); err != nil {
		return false, fmt.Errorf("decode %s: %w", path, err)
	}
	return true, nil
}

// readRecord reads a state or job file like readJSON, but treats one that
// does not decode as absent. Only a crash of the machine while it was
// written (an earlier codehub wrote it without syncing) leaves such a file,
// and no process it could name survived that; refusing it would instead
// blind Observe to every workspace and leave this one stuck.
func (b *Backend) readRecord(path string, v any) (bool, error) {
	found, err := readJSON(path, v)
	var syntax *json.SyntaxError
	var typ *json.UnmarshalTypeError
	if errors.As(err, &syntax) || errors.As(err, &typ) {
		// Watch reads it five times a second until an actuator replaces it.
		if _, warned := b.unreadable.LoadOrStore(path, true); !warned {
			b.logger.Warn("ignoring unreadable state file", "path", path, "error", err)
		}
		return false, nil
	}
	return found, err
}

// logTail returns up to size bytes of the end of a log, or "".
func logTail(path string, size int64) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	if st, err := f.Stat(); err == nil && st.Size() > size {
		_, _ = f.Seek(-size, io.SeekEnd)
	}
	var buf bytes.Buffer
	_, _ = buf.ReadFrom(f)
	return buf.String()
}

// childEnv is the environment of a workspace or job: codehub's own, without
// codehub's settings (which hold secrets: its CODEHUB_* names and the Nomad
// and Consul variables it reads as their own tools do) or code-server's auth
// settings (which only workspaceLaunch may give), with extra appended.
func childEnv(extra ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if codehubSetting(k) || k == "HOME" || k == "PWD" || k == "PASSWORD" || k == "HASHED_PASSWORD" {
			continue
		}
		env = append(env, kv)
	}
	return append(env, extra...)
}

func codehubSetting(name string) bool {
	for _, prefix := range []string{"CODEHUB_", "NOMAD_", "CONSUL_HTTP_"} {
		if strings.HasPrefix(name, prefix) {
			return true
		}
	}
	return false
}
