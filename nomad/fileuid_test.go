package nomad

import (
	"os"
	"syscall"
)

// fileUID is the owner of a file (Linux, where the e2e tests run).
func fileUID(st os.FileInfo) int {
	if s, ok := st.Sys().(*syscall.Stat_t); ok {
		return int(s.Uid)
	}
	return -1
}
