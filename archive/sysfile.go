package archive

import (
	"errors"
	"io"
	"io/fs"
	"os"
	"syscall"
	"time"
	"unsafe"
)

// sysFile is a regular file used through plain system calls. Archive and
// restore open tens of thousands of small files, and opening an *os.File
// costs three fcntl calls and an epoll registration on top of the open
// itself (the runtime tries to make every file pollable): about an eighth
// of the extracting goroutine's time in a profile of a restore.
type sysFile struct {
	fd   int
	name string // for errors
}

// openRegular opens name for reading without following a final symlink,
// so a file swapped for a link after it was listed is not followed.
func openRegular(name string) (sysFile, error) {
	fd, err := ignoringEINTR(func() (int, error) {
		return syscall.Open(name, syscall.O_RDONLY|syscall.O_CLOEXEC|syscall.O_NOFOLLOW, 0)
	})
	if err != nil {
		return sysFile{}, &fs.PathError{Op: "open", Path: name, Err: err}
	}
	return sysFile{fd: fd, name: name}, nil
}

// createIn creates the regular file base in the open directory dir, readable
// and writable by its owner only until chmod. O_EXCL makes it fail on any
// existing entry, a symlink included, so it never writes through a link.
func createIn(dir *os.File, base, name string) (sysFile, error) {
	fd, err := ignoringEINTR(func() (int, error) {
		return syscall.Openat(int(dir.Fd()), base,
			syscall.O_WRONLY|syscall.O_CREAT|syscall.O_EXCL|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0o600)
	})
	if err != nil {
		return sysFile{}, &fs.PathError{Op: "create", Path: name, Err: err}
	}
	return sysFile{fd: fd, name: name}, nil
}

func (f sysFile) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	n, err := ignoringEINTR(func() (int, error) { return syscall.Read(f.fd, p) })
	switch {
	case err != nil:
		return 0, &fs.PathError{Op: "read", Path: f.name, Err: err}
	case n == 0:
		return 0, io.EOF
	}
	return n, nil
}

// writeAt writes all of p at offset off.
func (f sysFile) writeAt(p []byte, off int64) error {
	for len(p) > 0 {
		n, err := ignoringEINTR(func() (int, error) { return syscall.Pwrite(f.fd, p, off) })
		if err != nil {
			return &fs.PathError{Op: "write", Path: f.name, Err: err}
		}
		p, off = p[n:], off+int64(n)
	}
	return nil
}

// truncate sets the file's length, leaving any extension a hole.
func (f sysFile) truncate(size int64) error {
	if err := syscall.Ftruncate(f.fd, size); err != nil {
		return &fs.PathError{Op: "truncate", Path: f.name, Err: err}
	}
	return nil
}

// chmod sets the permission and sticky bits of mode.
func (f sysFile) chmod(mode fs.FileMode) error {
	m := uint32(mode.Perm())
	if mode&fs.ModeSticky != 0 {
		m |= syscall.S_ISVTX
	}
	if err := syscall.Fchmod(f.fd, m); err != nil {
		return &fs.PathError{Op: "chmod", Path: f.name, Err: err}
	}
	return nil
}

// setTimes sets the access and modification times to t, to the
// nanosecond; utimensat with no path acts on the descriptor itself.
func (f sysFile) setTimes(t time.Time) error {
	ts := syscall.NsecToTimespec(t.UnixNano())
	times := [2]syscall.Timespec{ts, ts}
	_, _, errno := syscall.Syscall6(syscall.SYS_UTIMENSAT, uintptr(f.fd), 0, uintptr(unsafe.Pointer(&times)), 0, 0, 0)
	if errno != 0 {
		return &fs.PathError{Op: "utimensat", Path: f.name, Err: errno}
	}
	return nil
}

func (f sysFile) stat() (syscall.Stat_t, error) {
	var st syscall.Stat_t
	if err := syscall.Fstat(f.fd, &st); err != nil {
		return st, &fs.PathError{Op: "fstat", Path: f.name, Err: err}
	}
	return st, nil
}

func (f sysFile) Close() error {
	// Retrying close after EINTR could close a descriptor reused meanwhile.
	if err := syscall.Close(f.fd); err != nil {
		return &fs.PathError{Op: "close", Path: f.name, Err: err}
	}
	return nil
}

func ignoringEINTR(call func() (int, error)) (int, error) {
	for {
		n, err := call()
		if !errors.Is(err, syscall.EINTR) {
			return n, err
		}
	}
}
