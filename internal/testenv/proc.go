package testenv

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// Proc is a process of this machine as /proc shows it.
type Proc struct {
	PID  int
	Args []string
	// Cwd is its working directory; empty when it cannot be read.
	Cwd string
}

// Processes lists the processes of this machine that match, skipping
// those that end while they are read.
func Processes(match func(Proc) bool) []Proc {
	entries, _ := os.ReadDir("/proc")
	var out []Proc
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil || len(cmdline) == 0 {
			continue
		}
		p := Proc{PID: pid, Args: strings.Split(strings.TrimSuffix(string(cmdline), "\x00"), "\x00")}
		p.Cwd, _ = os.Readlink(filepath.Join("/proc", e.Name(), "cwd"))
		if match(p) {
			out = append(out, p)
		}
	}
	return out
}

// PIDs are the process ids of ps.
func PIDs(ps []Proc) []int {
	pids := make([]int, len(ps))
	for i, p := range ps {
		pids[i] = p.PID
	}
	return pids
}

// ResidentBytes is a process's resident memory in bytes.
func ResidentBytes(tb testing.TB, pid int) int64 {
	tb.Helper()
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		tb.Fatal(err)
	}
	v, _ := Field(status, "VmRSS:")
	kib, _ := strconv.ParseInt(strings.TrimSuffix(v, " kB"), 10, 64)
	return kib << 10
}

// Field is the value of a /proc file's "Name:" line, trimmed.
func Field(file []byte, name string) (string, bool) {
	for line := range strings.SplitSeq(string(file), "\n") {
		if v, ok := strings.CutPrefix(line, name); ok {
			return strings.TrimSpace(v), true
		}
	}
	return "", false
}
