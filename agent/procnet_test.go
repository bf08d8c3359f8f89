package agent

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestParseProcNet(t *testing.T) {
	const tcp = `  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1000        0 4242 1 0000000000000000 100 0 0 10 0
   1: 00000000:0016 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 17 1 0000000000000000 100 0 0 10 0
   2: 0100007F:1F90 0100007F:D2F0 01 00000000:00000000 00:00000000 00000000  1000        0 99 1 0000000000000000 20 4 30 10 -1
`
	const tcp6 = `  sl  local_address                         remote_address                        st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 00000000000000000000000001000000:0BB8 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000  1000        0 555 1 0000000000000000 100 0 0 10 0
   1: 00000000000000000000000000000000:0050 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000  1000        0 556 1 0000000000000000 100 0 0 10 0
`
	got, err := parseProcNet(strings.NewReader(tcp))
	if err != nil {
		t.Fatal(err)
	}
	want := []listener{
		{addr: netip.MustParseAddr("127.0.0.1"), port: 8080, inode: 4242},
		{addr: netip.MustParseAddr("0.0.0.0"), port: 22, inode: 17},
	}
	if !slices.Equal(got, want) {
		t.Fatalf("tcp: %+v, want %+v (the established socket left out)", got, want)
	}
	got6, err := parseProcNet(strings.NewReader(tcp6))
	if err != nil {
		t.Fatal(err)
	}
	want6 := []listener{
		{addr: netip.IPv6Loopback(), port: 3000, inode: 555},
		{addr: netip.IPv6Unspecified(), port: 80, inode: 556},
	}
	if !slices.Equal(got6, want6) {
		t.Fatalf("tcp6: %+v, want %+v", got6, want6)
	}
	if _, err := parseProcNet(strings.NewReader("header\n 0: zz:1F90 00000000:0000 0A 0 0 0 0 0 1 1\n")); err == nil {
		t.Fatal("a malformed address parsed")
	}
}

func TestOwnListenersAndDialAddr(t *testing.T) {
	ls := []listener{
		{addr: netip.MustParseAddr("0.0.0.0"), port: 8000, inode: 1},
		{addr: netip.IPv6Unspecified(), port: 8000, inode: 2},
		{addr: netip.MustParseAddr("127.0.0.1"), port: 9000, inode: 3}, // another workspace's
		{addr: netip.MustParseAddr("127.0.0.1"), port: 8080, inode: 4}, // the workbench's
		{addr: netip.MustParseAddr("10.0.0.5"), port: 5432, inode: 5},
	}
	procs := []process{
		{pid: 20, name: "node", sockets: []uint64{4}},
		{pid: 12, name: "python3", sockets: []uint64{1, 2}},
		{pid: 11, name: "postgres", sockets: []uint64{5}},
	}
	got := ownListeners(ls, procs, []int{8080})
	want := []Port{{Port: 5432, Process: "postgres"}, {Port: 8000, Process: "python3"}}
	if !slices.Equal(got, want) {
		t.Fatalf("ownListeners = %+v, want %+v", got, want)
	}
	for l, want := range map[listener]string{
		ls[0]: "127.0.0.1:8000", ls[1]: "[::1]:8000", ls[4]: "10.0.0.5:5432",
	} {
		if got := dialAddr(l).String(); got != want {
			t.Errorf("dialAddr(%v) = %s, want %s", l, got, want)
		}
	}
}

func TestKeys(t *testing.T) {
	k, err := NewKeys([]byte(strings.Repeat("k", 32)))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := NewKeys([]byte("short")); err == nil {
		t.Fatal("a short key was accepted")
	}
	if k.Token("a", "r1") == k.Token("a", "r2") || k.Token("a", "r1") == k.Token("b", "r1") || k.Token("ab", "") == k.Token("a", "b") {
		t.Fatal("tokens of different runs or workspaces are equal")
	}
	if !k.HostKey("a").Equal(k.HostKey("a")) || k.HostKey("a").Equal(k.HostKey("b")) {
		t.Fatal("host keys are not one per workspace")
	}
	back, err := DecodeHostKey(EncodeHostKey(k.HostKey("a")))
	if err != nil || !back.Equal(k.HostKey("a")) {
		t.Fatalf("host key does not survive encoding: %v", err)
	}
	if _, err := DecodeHostKey("bm90IGEga2V5"); err == nil {
		t.Fatal("a wrong host key decoded")
	}
}

// fakeProc is a /proc with one socket table and processes given as pid,
// parent and the socket inodes they hold.
type fakeProc struct {
	t    *testing.T
	root string
}

func newFakeProc(t *testing.T) fakeProc {
	f := fakeProc{t: t, root: t.TempDir()}
	if err := os.MkdirAll(filepath.Join(f.root, "net"), 0o755); err != nil {
		t.Fatal(err)
	}
	return f
}

// listen makes the socket table list one listener on 127.0.0.1:port.
func (f fakeProc) listen(port int, inode uint64) {
	table := "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n" +
		fmt.Sprintf("   0: 0100007F:%04X 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1000        0 %d 1 0 100 0 0 10 0\n", port, inode)
	if err := os.WriteFile(filepath.Join(f.root, "net", "tcp"), []byte(table), 0o644); err != nil {
		f.t.Fatal(err)
	}
}

// process adds pid, a child of ppid, holding the given sockets.
func (f fakeProc) process(pid, ppid int, sockets ...uint64) {
	dir := filepath.Join(f.root, strconv.Itoa(pid))
	if err := os.MkdirAll(filepath.Join(dir, "fd"), 0o755); err != nil {
		f.t.Fatal(err)
	}
	stat := fmt.Sprintf("%d (dev server) S %d %d 0 0", pid, ppid, pid)
	if err := os.WriteFile(filepath.Join(dir, "stat"), []byte(stat), 0o644); err != nil {
		f.t.Fatal(err)
	}
	for i, ino := range sockets {
		if err := os.Symlink(fmt.Sprintf("socket:[%d]", ino), filepath.Join(dir, "fd", strconv.Itoa(3+i))); err != nil {
			f.t.Fatal(err)
		}
	}
}

func (f fakeProc) exit(pid int) {
	if err := os.RemoveAll(filepath.Join(f.root, strconv.Itoa(pid))); err != nil {
		f.t.Fatal(err)
	}
}

// TestOwnListenerRemembersSockets: a listener found held by the
// workspace is served without a new scan of the processes for a while,
// but never once the port's socket is another one, and not after that
// while.
func TestOwnListenerRemembersSockets(t *testing.T) {
	const self, port = 100, 8000
	f := newFakeProc(t)
	f.process(self, 1)
	f.process(200, self, 41)
	f.process(300, 1, 77) // another workspace's program
	f.listen(port, 41)
	now := time.Unix(1_000_000, 0)
	a := &Agent{proc: procFS{root: f.root, self: self}, now: func() time.Time { return now }}
	if _, err := a.ownListener(port); err != nil {
		t.Fatalf("the workspace's listener: %v", err)
	}
	// The program hands its socket on and exits: the socket is the one
	// found, so it is served without looking at the processes again.
	f.exit(200)
	if l, err := a.ownListener(port); err != nil || l.inode != 41 {
		t.Fatalf("the same socket, processes not scanned again: %+v %v", l, err)
	}
	// Another workspace's socket on the port is never served.
	f.listen(port, 77)
	if _, err := a.ownListener(port); !errors.Is(err, errNotOwn) {
		t.Fatalf("another workspace's socket on the port: %v, want errNotOwn", err)
	}
	// Past ownedFor the processes are scanned again: the workspace holds
	// no socket on the port any more.
	f.listen(port, 41)
	now = now.Add(ownedFor)
	if _, err := a.ownListener(port); !errors.Is(err, errNotOwn) {
		t.Fatalf("a socket no process of the workspace holds, after %v: %v, want errNotOwn", ownedFor, err)
	}
}
