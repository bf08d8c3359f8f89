// Package agent is the workspace agent: `codehub agent` runs inside every
// workspace, in the namespaces, as the user and with the environment of
// the workspace program, which it starts and outlives by nothing. It serves
// the server, and only the server (every request carries the run's agent
// token), over one loopback or allocation port: an SSH server for `codehub
// ssh` and desktop IDEs, TCP connections to the workspace's own listeners,
// the list of those listeners, when the person last did something over
// SSH, and snapshots of the home for the server to write to S3. The package also holds the server's client of it and the derivation
// of its secrets. It must never reach a listener of another workspace nor
// count a keepalive as activity.
package agent

import (
	"bufio"
	"crypto/ed25519"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"golang.org/x/sys/unix"
)

// UpgradeProtocol is the Upgrade header value of the agent's stream
// endpoints: after 101 Switching Protocols the connection carries the
// stream's bytes.
const UpgradeProtocol = "codehub-agent/1"

// UpgradeDescriptor asks, on the agent's Unix socket, for the dialled
// connection itself: the 101 answer carries its file descriptor
// (SCM_RIGHTS), and the agent keeps no part of it, so a server on the
// same machine talks to the port without a hop through the agent.
const UpgradeDescriptor = "codehub-agent-fd/1"

// Options configures the agent.
type Options struct {
	// Token is demanded as "Authorization: Bearer <token>" of every request.
	Token string
	// HostKey is the SSH server's host key.
	HostKey ed25519.PrivateKey
	// ExcludePorts are the workbench's own ports (the program's, the
	// agent's), never listed nor dialled.
	ExcludePorts []int
	// Tag is NAME=value set in the environment of every process the agent
	// starts; processes carrying it count as the workspace's.
	Tag string
	// Env is the environment of SSH sessions (the workspace program's,
	// without the agent's secrets).
	Env []string
	// Home is where sessions start.
	Home string
	// Shell is the user's login shell.
	Shell string
	// ProcRoot is /proc; tests may point elsewhere.
	ProcRoot string
}

// Agent serves the agent's endpoints. It is safe for concurrent use.
type Agent struct {
	logger hclog.Logger
	opts   Options
	ssh    *sshServer
	proc   procFS
	// lastActivity is when the person last did something over SSH, in Unix
	// nanoseconds; zero for never.
	lastActivity atomic.Int64
	// snapshotting is held while a snapshot of the home is read.
	snapshotting sync.Mutex

	// owned remembers the sockets the workspace's processes held at the
	// last scan, which scan serialises; now is the clock.
	owned ownedSockets
	scan  sync.Mutex
	now   func() time.Time

	// conns are the hijacked connections, closed by Shutdown.
	mu    sync.Mutex
	conns map[net.Conn]struct{}
	wg    sync.WaitGroup
}

// New returns an agent; it serves once given to an http.Server (Handler).
func New(logger hclog.Logger, self int, opts Options) (*Agent, error) {
	if opts.Token == "" {
		return nil, errors.New("agent: a token is required")
	}
	if len(opts.HostKey) != ed25519.PrivateKeySize {
		return nil, errors.New("agent: an ed25519 host key is required")
	}
	if opts.ProcRoot == "" {
		opts.ProcRoot = "/proc"
	}
	a := &Agent{logger: logger, opts: opts, conns: make(map[net.Conn]struct{}), now: time.Now,
		proc: procFS{root: opts.ProcRoot, self: self, tag: opts.Tag}}
	var err error
	if a.ssh, err = newSSHServer(logger.Named("ssh"), a); err != nil {
		return nil, err
	}
	return a, nil
}

// Handler is the agent's HTTP API.
func (a *Agent) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/ssh", a.serveSSH)
	mux.HandleFunc("GET /v1/tcp/{port}", a.serveTCP)
	mux.HandleFunc("GET /v1/ports", a.servePorts)
	mux.HandleFunc("GET /v1/activity", a.serveActivity)
	mux.HandleFunc("POST /v1/snapshot", a.serveSnapshot)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !a.authorized(r) {
			http.Error(w, "agent token required", http.StatusUnauthorized)
			return
		}
		mux.ServeHTTP(w, r)
	})
}

func (a *Agent) authorized(r *http.Request) bool {
	got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	return ok && subtle.ConstantTimeCompare([]byte(got), []byte(a.opts.Token)) == 1
}

// Shutdown closes every stream and waits for their handlers.
func (a *Agent) Shutdown() {
	a.mu.Lock()
	for c := range a.conns {
		c.Close()
	}
	a.mu.Unlock()
	a.wg.Wait()
}

// touch records that the person did something.
func (a *Agent) touch() { a.lastActivity.Store(time.Now().UnixNano()) }

// Activity is what GET /v1/activity answers.
type Activity struct {
	// LastActivity is when the person last typed into a session, moved a
	// file or opened a forwarded connection; nil for never since the
	// agent started.
	LastActivity *time.Time `json:"last_activity"`
}

func (a *Agent) serveActivity(w http.ResponseWriter, _ *http.Request) {
	var act Activity
	if n := a.lastActivity.Load(); n != 0 {
		t := time.Unix(0, n).UTC()
		act.LastActivity = &t
	}
	writeJSON(w, act)
}

func (a *Agent) servePorts(w http.ResponseWriter, _ *http.Request) {
	ports, err := a.ports()
	if err != nil {
		a.logger.Error("list ports", "error", err)
		http.Error(w, "cannot read the listening sockets", http.StatusInternalServerError)
		return
	}
	if ports == nil {
		ports = []Port{}
	}
	writeJSON(w, ports)
}

func (a *Agent) ports() ([]Port, error) {
	ls, err := a.proc.listeners()
	if err != nil {
		return nil, err
	}
	return ownListeners(ls, a.proc.processes(), a.opts.ExcludePorts), nil
}

// errNotOwn is a port no process of the workspace listens on.
var errNotOwn = errors.New("no process of this workspace listens on the port")

// ownListener finds a listener of the workspace on port. The socket
// table is read every time; the processes only when no listener on port
// is a socket the workspace was found to hold within ownedFor.
func (a *Agent) ownListener(port int) (listener, error) {
	if port < 1 || port > 65535 || a.excluded(port) {
		return listener{}, errNotOwn
	}
	ls, err := a.proc.listeners()
	if err != nil {
		return listener{}, err
	}
	onPort := slices.DeleteFunc(ls, func(l listener) bool { return l.port != port })
	if len(onPort) == 0 {
		return listener{}, errNotOwn
	}
	if l, ok := a.owned.find(onPort, a.now()); ok {
		return l, nil
	}
	// One scan at a time: the connections a proxy opens at once to a
	// new port wait for the first one's answer.
	a.scan.Lock()
	defer a.scan.Unlock()
	if l, ok := a.owned.find(onPort, a.now()); ok {
		return l, nil
	}
	var held []uint64
	for _, p := range a.proc.processes() {
		held = append(held, p.sockets...)
	}
	a.owned.record(held, a.now())
	if l, ok := a.owned.find(onPort, a.now()); ok {
		return l, nil
	}
	return listener{}, errNotOwn
}

func (a *Agent) excluded(port int) bool {
	for _, p := range a.opts.ExcludePorts {
		if p == port {
			return true
		}
	}
	return false
}

func (a *Agent) serveTCP(w http.ResponseWriter, r *http.Request) {
	port, err := strconv.Atoi(r.PathValue("port"))
	if err != nil {
		http.Error(w, "the port must be a number", http.StatusBadRequest)
		return
	}
	handOver := strings.EqualFold(r.Header.Get("Upgrade"), UpgradeDescriptor)
	if !isUpgrade(r) && !handOver {
		http.Error(w, "upgrade to "+UpgradeProtocol+" required", http.StatusUpgradeRequired)
		return
	}
	l, err := a.ownListener(port)
	if errors.Is(err, errNotOwn) {
		http.Error(w, fmt.Sprintf("port %d: %v", port, err), http.StatusForbidden)
		return
	}
	if err != nil {
		a.logger.Error("find listener", "port", port, "error", err)
		http.Error(w, "cannot read the listening sockets", http.StatusInternalServerError)
		return
	}
	var d net.Dialer
	up, err := d.DialContext(r.Context(), "tcp", dialAddr(l).String())
	if err != nil {
		http.Error(w, fmt.Sprintf("port %d: %v", port, err), http.StatusBadGateway)
		return
	}
	if handOver {
		a.handOver(w, up)
		return
	}
	conn, ok := a.upgrade(w)
	if !ok {
		up.Close()
		return
	}
	defer a.release(conn)
	pipe(conn, up, nil)
}

// handOver answers 101 on a Unix socket with up's descriptor attached to
// the answer's bytes, and closes the agent's copy of it.
func (a *Agent) handOver(w http.ResponseWriter, up net.Conn) {
	defer up.Close()
	file, err := up.(*net.TCPConn).File()
	if err != nil {
		http.Error(w, "cannot hand the connection over", http.StatusInternalServerError)
		return
	}
	defer file.Close()
	conn, _, err := http.NewResponseController(w).Hijack()
	if err != nil {
		http.Error(w, "cannot switch protocols", http.StatusInternalServerError)
		return
	}
	defer conn.Close()
	uc, ok := conn.(*net.UnixConn)
	if !ok {
		// Only a Unix socket carries descriptors.
		_, _ = conn.Write([]byte("HTTP/1.1 400 Bad Request\r\nConnection: close\r\nContent-Length: 0\r\n\r\n"))
		return
	}
	head := "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: " + UpgradeDescriptor + "\r\n\r\n"
	if _, _, err := uc.WriteMsgUnix([]byte(head), unix.UnixRights(int(file.Fd())), nil); err != nil {
		a.logger.Debug("hand over a port connection", "error", err)
	}
}

func (a *Agent) serveSSH(w http.ResponseWriter, r *http.Request) {
	if !isUpgrade(r) {
		http.Error(w, "upgrade to "+UpgradeProtocol+" required", http.StatusUpgradeRequired)
		return
	}
	conn, ok := a.upgrade(w)
	if !ok {
		return
	}
	defer a.release(conn)
	a.ssh.serve(conn)
}

func isUpgrade(r *http.Request) bool {
	return strings.EqualFold(r.Header.Get("Upgrade"), UpgradeProtocol)
}

// upgrade answers 101 and takes the connection over; the handler owns it
// until release.
func (a *Agent) upgrade(w http.ResponseWriter) (net.Conn, bool) {
	conn, rw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		http.Error(w, "cannot switch protocols", http.StatusInternalServerError)
		return nil, false
	}
	_ = conn.SetDeadline(time.Time{})
	if _, err := rw.WriteString("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: " + UpgradeProtocol + "\r\n\r\n"); err != nil {
		conn.Close()
		return nil, false
	}
	if err := rw.Flush(); err != nil {
		conn.Close()
		return nil, false
	}
	c := &bufferedConn{Conn: conn, r: rw.Reader}
	a.mu.Lock()
	a.conns[c] = struct{}{}
	a.wg.Add(1)
	a.mu.Unlock()
	return c, true
}

func (a *Agent) release(c net.Conn) {
	c.Close()
	a.mu.Lock()
	delete(a.conns, c)
	a.mu.Unlock()
	a.wg.Done()
}

// bufferedConn reads first what the HTTP server had already buffered.
type bufferedConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *bufferedConn) Read(p []byte) (int, error) { return c.r.Read(p) }

// CloseWrite half closes the connection where it is TCP.
func (c *bufferedConn) CloseWrite() error {
	if cw, ok := c.Conn.(closeWriter); ok {
		return cw.CloseWrite()
	}
	return c.Conn.Close()
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}
