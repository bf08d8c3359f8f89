package e2e

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// clockTicks is the kernel's USER_HZ, the unit of /proc's CPU times: 100
// on every Linux architecture Go supports.
const clockTicks = 100

// machineBusy is the "busy" class of a cpuTime: every CPU's time outside
// idle and I/O wait, from /proc/stat.
const machineBusy = "machine busy"

// cpuTime is CPU seconds by kind of process, and the machine's busy time.
// A process's count includes its children that ended and were reaped
// (cutime, cstime): the Nomad agent's holds the helpers it ran and
// reaped, an executor's the tasks it ran that ended.
type cpuTime map[string]float64

// cpuSnapshot reads the CPU time used so far by every process on the
// machine, by kind (cpuKind), and the machine's busy time. roots names
// processes by pid (the Nomad agent, the server, the harness itself).
func cpuSnapshot(tb testing.TB, roots map[int]string) cpuTime {
	tb.Helper()
	stat, err := os.ReadFile("/proc/stat")
	if err != nil {
		tb.Fatal(err)
	}
	busy, err := busyTicks(stat)
	if err != nil {
		tb.Fatal(err)
	}
	out := cpuTime{machineBusy: busy / clockTicks}
	eachProcess(tb, func(pid int, dir string) {
		// A process may end between the listing and these reads.
		cmdline, err := os.ReadFile(filepath.Join(dir, "cmdline"))
		if err != nil {
			return
		}
		b, err := os.ReadFile(filepath.Join(dir, "stat"))
		if err != nil {
			return
		}
		ticks, err := processTicks(b)
		if err != nil {
			tb.Fatalf("%s/stat: %v", dir, err)
		}
		if ticks > 0 {
			out[cpuKind(pid, strings.Split(strings.TrimRight(string(cmdline), "\x00"), "\x00"), roots)] += ticks / clockTicks
		}
	})
	return out
}

// cpuKind names what process pid, run as args, is to the scale harness.
func cpuKind(pid int, args []string, roots map[int]string) string {
	if name, ok := roots[pid]; ok {
		return name
	}
	if len(args) == 0 || args[0] == "" {
		// Kernel threads have no command line; their time is the
		// machine's busy time less every process's.
		return "kernel threads"
	}
	base := filepath.Base(args[0])
	sub := ""
	if len(args) > 1 {
		sub = args[1]
	}
	switch {
	case base == "nomad" && sub != "":
		return "nomad " + sub
	case base == "codehub" && sub == "agent":
		return "workspace agent"
	case base == "codehub" && sub != "":
		return "codehub " + sub
	case base == "wsserver":
		return "program"
	case base == "postgres" || strings.HasPrefix(args[0], "postgres:"):
		// A backend names itself by its role ("postgres: checkpointer").
		return "postgres"
	case base == "redis-server", base == "versitygw":
		return base
	}
	return "other processes"
}

// busyTicks is the machine's busy time in /proc/stat's first line:
// every field but idle (the fourth) and iowait (the fifth); guest time is
// counted in user time already, so the fields after steal are left out.
func busyTicks(stat []byte) (float64, error) {
	line, _, _ := bytes.Cut(stat, []byte("\n"))
	fields := strings.Fields(string(line))
	if len(fields) < 9 || fields[0] != "cpu" {
		return 0, fmt.Errorf("/proc/stat begins %q, not the cpu totals", line)
	}
	var busy float64
	for i, f := range fields[1:9] {
		v, err := strconv.ParseFloat(f, 64)
		if err != nil {
			return 0, fmt.Errorf("/proc/stat cpu field %d: %w", i+1, err)
		}
		if i != 3 && i != 4 {
			busy += v
		}
	}
	return busy, nil
}

// processTicks is a process's user and system time and those of its
// reaped children, from its /proc/<pid>/stat: fields 14 to 17, counted
// after the command name, which may hold spaces and parentheses.
func processTicks(stat []byte) (float64, error) {
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, errors.New("no command name")
	}
	fields := strings.Fields(string(stat[i+1:]))
	// fields[0] is the state, field 3.
	if len(fields) < 15 {
		return 0, fmt.Errorf("%d fields after the command name", len(fields))
	}
	var ticks float64
	for _, f := range fields[11:15] {
		v, err := strconv.ParseFloat(f, 64)
		if err != nil {
			return 0, err
		}
		ticks += v
	}
	return ticks, nil
}

// phaseCPU reads the CPU time so far and returns what reads it again:
// the time used in between, with the wall time it took.
func phaseCPU(tb testing.TB, roots map[int]string) func() cpuPhase {
	began, before := time.Now(), cpuSnapshot(tb, roots)
	return func() cpuPhase {
		return cpuPhase{used: cpuSnapshot(tb, roots).since(before), wall: time.Since(began)}
	}
}

// cpuPhase is the CPU time a phase of the harness used, and how long it
// took.
type cpuPhase struct {
	used cpuTime
	wall time.Duration
}

func (p cpuPhase) report(per int) string { return p.used.report(p.wall, per) }

// since is the CPU time used between before and c. A process that was
// there before and ended since leaves its time to its parent's reaped
// count, so such a time is counted from the process's start: the harness
// reads phases that begin with little running that ends during them.
func (c cpuTime) since(before cpuTime) cpuTime {
	out := cpuTime{}
	for k, v := range c {
		if d := v - before[k]; d > 0.005 {
			out[k] = d
		}
	}
	return out
}

// report names the machine's busy time against what its cores could give
// over wall, then each kind's share, largest first, per workspace when
// per > 0; "unaccounted" is what busy time no process on the machine's
// count explains (kernel work outside processes, processes that ended
// unreaped by any process read).
func (c cpuTime) report(wall time.Duration, per int) string {
	cores := float64(numCPU())
	busy := c[machineBusy]
	kinds := slices.Collect(maps.Keys(c))
	slices.SortFunc(kinds, func(a, b string) int {
		switch {
		case c[a] > c[b]:
			return -1
		case c[a] < c[b]:
			return 1
		}
		return strings.Compare(a, b)
	})
	var accounted float64
	parts := []string{}
	for _, k := range kinds {
		if k == machineBusy {
			continue
		}
		accounted += c[k]
		parts = append(parts, fmt.Sprintf("%s %.1f s (%.0f ms each)", k, c[k], 1000*c[k]/float64(max(per, 1))))
	}
	if rest := busy - accounted; rest > 0 {
		parts = append(parts, fmt.Sprintf("unaccounted %.1f s", rest))
	}
	return fmt.Sprintf("busy %.1f of %.1f CPU-seconds (%.0f%%) over %v: %s",
		busy, cores*wall.Seconds(), 100*busy/(cores*wall.Seconds()), wall.Round(time.Millisecond), strings.Join(parts, ", "))
}

// numCPU counts the "cpuN" lines of /proc/stat: the machine's cores, not
// the ones this process may use.
func numCPU() int {
	stat, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 1
	}
	n := 0
	for line := range strings.SplitSeq(string(stat), "\n") {
		if strings.HasPrefix(line, "cpu") && !strings.HasPrefix(line, "cpu ") {
			n++
		}
	}
	return max(n, 1)
}

// TestCPUAccounting: the harness reads /proc's CPU times as the kernel
// writes them, and names each process it meets.
func TestCPUAccounting(t *testing.T) {
	busy, err := busyTicks([]byte("cpu  100 5 50 1000 20 3 2 1 7 0\ncpu0 50 2 25 500 10 1 1 0 0 0\n"))
	if err != nil || busy != 161 {
		t.Errorf("busy ticks = %v, %v; want 161 (user, nice, system, irq, softirq, steal)", busy, err)
	}
	if _, err := busyTicks([]byte("intr 1 2 3\n")); err == nil {
		t.Error("a /proc/stat without the cpu line: no error")
	}
	ticks, err := processTicks([]byte("4242 (a (b) c) S 1 4242 4242 0 -1 4194560 100 0 0 0 30 12 7 1 20 0 1 0 100 0 0"))
	if err != nil || ticks != 50 {
		t.Errorf("process ticks = %v, %v; want 50 (utime 30, stime 12, cutime 7, cstime 1)", ticks, err)
	}
	if _, err := processTicks([]byte("4242 (x) S 1 2")); err == nil {
		t.Error("a short stat line: no error")
	}
	roots := map[int]string{7: "nomad agent"}
	for _, tc := range []struct {
		pid  int
		args []string
		want string
	}{
		{7, []string{"/root/bin/nomad", "agent", "-dev"}, "nomad agent"},
		{8, []string{"/root/bin/nomad", "executor", "{}"}, "nomad executor"},
		{9, []string{"/root/bin/nomad", "logmon"}, "nomad logmon"},
		{10, []string{"/tmp/alloc/x/local/codehub", "agent", "--", "wsserver"}, "workspace agent"},
		{11, []string{"/tmp/alloc/x/local/codehub", "mover", "archive"}, "codehub mover"},
		{12, []string{"/tmp/b/wsserver", "-listen", "127.0.0.1:1"}, "program"},
		{13, []string{"postgres: checkpointer   "}, "postgres"},
		{14, []string{"/usr/lib/postgresql/15/bin/postgres", "-D", "/x"}, "postgres"},
		{15, []string{""}, "kernel threads"},
		{16, []string{"/usr/bin/make"}, "other processes"},
	} {
		if got := cpuKind(tc.pid, tc.args, roots); got != tc.want {
			t.Errorf("cpuKind(%d, %q) = %q, want %q", tc.pid, tc.args, got, tc.want)
		}
	}
	// This machine's own counters: the test process has used CPU, and so
	// has the machine, at least as much.
	self := map[int]string{os.Getpid(): "harness"}
	now := cpuSnapshot(t, self)
	if now["harness"] <= 0 || now[machineBusy] < now["harness"] {
		t.Errorf("a snapshot of this machine: %v", now)
	}
	t.Log(phaseCPU(t, self)().report(1))
	before := cpuTime{machineBusy: 10, "program": 1}
	after := cpuTime{machineBusy: 14, "program": 2.5, "nomad agent": 1}
	got := after.since(before)
	if got[machineBusy] != 4 || got["program"] != 1.5 || got["nomad agent"] != 1 {
		t.Errorf("since = %v", got)
	}
}
