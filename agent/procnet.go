package agent

import (
	"bufio"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Under Nomad's raw_exec driver and docker's host networking every
// workspace of a node shares the node's network: a port number alone does
// not say whose listener it is. The agent therefore serves only listening
// sockets held open by a process of its own workspace, which it finds the
// way ss -p does: the socket inodes of /proc/net/tcp{,6} in state LISTEN,
// matched against the socket descriptors in /proc/<pid>/fd of its own
// processes.

// listener is a listening TCP socket of /proc/net/tcp or tcp6.
type listener struct {
	addr  netip.Addr
	port  int
	inode uint64
}

// tcpListen is the state number of a listening socket in /proc/net/tcp.
const tcpListen = "0A"

// parseProcNet reads the listening sockets of one /proc/net/tcp{,6} file.
func parseProcNet(r io.Reader) ([]listener, error) {
	var out []listener
	s := bufio.NewScanner(r)
	first := true
	for s.Scan() {
		if first {
			first = false // the header
			continue
		}
		f := strings.Fields(s.Text())
		if len(f) < 10 || f[3] != tcpListen {
			continue
		}
		addr, port, err := parseHexAddr(f[1])
		if err != nil {
			return nil, err
		}
		inode, err := strconv.ParseUint(f[9], 10, 64)
		if err != nil {
			return nil, fmt.Errorf("agent: socket inode %q: %w", f[9], err)
		}
		out = append(out, listener{addr: addr, port: port, inode: inode})
	}
	return out, s.Err()
}

// parseHexAddr reads "0100007F:1F90": the address as 32-bit words in the
// kernel's (little-endian here) byte order, the port in hex.
func parseHexAddr(s string) (netip.Addr, int, error) {
	ip, portHex, ok := strings.Cut(s, ":")
	if !ok {
		return netip.Addr{}, 0, fmt.Errorf("agent: socket address %q", s)
	}
	port, err := strconv.ParseUint(portHex, 16, 16)
	if err != nil {
		return netip.Addr{}, 0, fmt.Errorf("agent: socket port %q: %w", s, err)
	}
	raw, err := hex.DecodeString(ip)
	if err != nil || (len(raw) != 4 && len(raw) != 16) {
		return netip.Addr{}, 0, fmt.Errorf("agent: socket address %q", s)
	}
	for i := 0; i < len(raw); i += 4 {
		binary.BigEndian.PutUint32(raw[i:], binary.LittleEndian.Uint32(raw[i:]))
	}
	addr, _ := netip.AddrFromSlice(raw)
	return addr.Unmap(), int(port), nil
}

// process is a process of the workspace with the socket inodes it holds.
type process struct {
	pid     int
	name    string
	sockets []uint64
}

// Port is a TCP port the workspace listens on, with the name of the process
// holding it where the system tells it.
type Port struct {
	Port    int    `json:"port"`
	Process string `json:"process,omitempty"`
}

// ownListeners keeps the listeners held by the given processes, minus the
// excluded ports, one per port (the lowest pid names it), in port order.
func ownListeners(ls []listener, procs []process, exclude []int) []Port {
	owner := make(map[uint64]process)
	for _, p := range procs {
		for _, ino := range p.sockets {
			if cur, ok := owner[ino]; !ok || p.pid < cur.pid {
				owner[ino] = p
			}
		}
	}
	seen := make(map[int]bool)
	var out []Port
	for _, l := range ls {
		p, ok := owner[l.inode]
		if !ok || seen[l.port] || slices.Contains(exclude, l.port) {
			continue
		}
		seen[l.port] = true
		out = append(out, Port{Port: l.port, Process: p.name})
	}
	slices.SortFunc(out, func(a, b Port) int { return a.Port - b.Port })
	return out
}

// dialAddr is where to reach a listener: its own address, or loopback for
// a wildcard one.
func dialAddr(l listener) netip.AddrPort {
	addr := l.addr
	switch {
	case addr == netip.IPv4Unspecified():
		addr = netip.AddrFrom4([4]byte{127, 0, 0, 1})
	case addr == netip.IPv6Unspecified():
		addr = netip.IPv6Loopback()
	}
	return netip.AddrPortFrom(addr, uint16(l.port))
}

// procFS reads the process and socket tables of the agent's workspace.
type procFS struct {
	root string // "/proc"
	self int    // the agent's pid
	tag  string // NAME=value in the environment of the workspace's processes
}

// listeners reads every listening TCP socket the agent's network shows.
func (f procFS) listeners() ([]listener, error) {
	var all []listener
	for _, name := range []string{"net/tcp", "net/tcp6"} {
		file, err := os.Open(filepath.Join(f.root, name))
		if errors.Is(err, os.ErrNotExist) {
			continue // no IPv6
		}
		if err != nil {
			return nil, err
		}
		ls, err := parseProcNet(file)
		file.Close()
		if err != nil {
			return nil, err
		}
		all = append(all, ls...)
	}
	return all, nil
}

// processes lists the processes of the workspace: the agent's descendants
// and every process carrying its tag (a daemon that left the tree keeps
// its environment), with their sockets. A process the agent may not look
// into (another user's) is not the workspace's.
func (f procFS) processes() []process {
	var out []process
	for _, pid := range f.members() {
		socks := f.sockets(pid)
		if len(socks) == 0 {
			continue
		}
		out = append(out, process{pid: pid, name: f.comm(pid), sockets: socks})
	}
	return out
}

// members lists the pids of the workspace's processes, the agent aside:
// its descendants and every process carrying its tag.
func (f procFS) members() []int {
	entries, err := os.ReadDir(f.root)
	if err != nil {
		return nil
	}
	parent := make(map[int]int)
	dead := make(map[int]bool)
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if ppid, state, ok := f.stat(pid); ok {
			parent[pid] = ppid
			dead[pid] = state == 'Z'
		}
	}
	var out []int
	for pid := range parent {
		if pid != f.self && !dead[pid] && (f.descends(parent, pid) || f.tagged(pid)) {
			out = append(out, pid)
		}
	}
	return out
}

// killAll kills every process of the workspace. A process may fork
// between the listing and its kill; its child carries the tag and is
// found in the next round.
func (f procFS) killAll() {
	for range 10 {
		pids := f.members()
		if len(pids) == 0 {
			return
		}
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func (f procFS) descends(parent map[int]int, pid int) bool {
	for range len(parent) {
		p, ok := parent[pid]
		if !ok || p <= 1 {
			return false
		}
		if p == f.self {
			return true
		}
		pid = p
	}
	return false
}

// stat reads the state and parent of pid from /proc/<pid>/stat, whose
// second field (the name) may hold spaces and parentheses.
func (f procFS) stat(pid int) (ppid int, state byte, ok bool) {
	b, err := os.ReadFile(filepath.Join(f.root, strconv.Itoa(pid), "stat"))
	if err != nil {
		return 0, 0, false
	}
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return 0, 0, false
	}
	rest := strings.Fields(string(b[i+1:]))
	if len(rest) < 2 || len(rest[0]) != 1 {
		return 0, 0, false
	}
	ppid, err = strconv.Atoi(rest[1])
	return ppid, rest[0][0], err == nil
}

func (f procFS) tagged(pid int) bool {
	b, err := os.ReadFile(filepath.Join(f.root, strconv.Itoa(pid), "environ"))
	if err != nil {
		return false
	}
	return slices.Contains(strings.Split(string(b), "\x00"), f.tag)
}

func (f procFS) comm(pid int) string {
	b, _ := os.ReadFile(filepath.Join(f.root, strconv.Itoa(pid), "comm"))
	return strings.TrimSpace(string(b))
}

// sockets lists the socket inodes among pid's open descriptors.
func (f procFS) sockets(pid int) []uint64 {
	dir := filepath.Join(f.root, strconv.Itoa(pid), "fd")
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	var out []uint64
	for _, e := range entries {
		target, err := os.Readlink(filepath.Join(dir, e.Name()))
		if err != nil {
			continue
		}
		num, ok := strings.CutPrefix(target, "socket:[")
		if !ok {
			continue
		}
		if ino, err := strconv.ParseUint(strings.TrimSuffix(num, "]"), 10, 64); err == nil {
			out = append(out, ino)
		}
	}
	return out
}

// ownedFor is how long a socket found in a process of the workspace
// counts as the workspace's without a new scan of the processes. A socket
// inode names one socket for as long as it exists, and only a process
// that holds a socket can hand it to another, so within this time a
// listener on the port with the same inode is still the workspace's. A
// listener with another inode (the program restarted, or another
// workspace now has the port) is scanned for anew.
const ownedFor = 5 * time.Second

// ownedSockets is the socket inodes the workspace's processes held at the
// last scan of them, and when that scan ran.
type ownedSockets struct {
	mu      sync.Mutex
	inodes  map[uint64]struct{}
	scanned time.Time
}

// record replaces what is known by the sockets a scan at now found.
func (o *ownedSockets) record(held []uint64, now time.Time) {
	inodes := make(map[uint64]struct{}, len(held))
	for _, ino := range held {
		inodes[ino] = struct{}{}
	}
	o.mu.Lock()
	o.inodes, o.scanned = inodes, now
	o.mu.Unlock()
}

// find returns the first of ls whose socket the last scan found held by
// the workspace, while that scan is younger than ownedFor at now.
func (o *ownedSockets) find(ls []listener, now time.Time) (listener, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.inodes == nil || now.Sub(o.scanned) >= ownedFor || now.Before(o.scanned) {
		return listener{}, false
	}
	for _, l := range ls {
		if _, ok := o.inodes[l.inode]; ok {
			return l, true
		}
	}
	return listener{}, false
}
