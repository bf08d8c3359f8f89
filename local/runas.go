package local

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"syscall"
)

// account is the unprivileged user workspace programs run as when codehub
// runs as root: code-server hands its user a shell, and a shell as root
// would read codehub's configuration, its database and every other home.
type account struct {
	name string
	uid  int
	gid  int
	home string
}

// lookupAccount resolves a user name, or a numeric uid, from the system's
// user database.
func lookupAccount(name string) (*account, error) {
	u, err := user.Lookup(name)
	var unknown user.UnknownUserError
	if errors.As(err, &unknown) {
		if _, numErr := strconv.Atoi(name); numErr == nil {
			u, err = user.LookupId(name)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("user %q: %w", name, err)
	}
	uid, err1 := strconv.Atoi(u.Uid)
	gid, err2 := strconv.Atoi(u.Gid)
	if err := errors.Join(err1, err2); err != nil {
		return nil, fmt.Errorf("user %q: %w", name, err)
	}
	return &account{name: u.Username, uid: uid, gid: gid, home: u.HomeDir}, nil
}

// reachable reports why the account could not reach path (every directory
// above it must let it pass), or nil. The home lives below the data dir and
// the program must be executable by the account, so both are checked at
// start instead of failing every workspace later.
func (a *account) reachable(path string, wantExec bool) error {
	abs, err := filepath.Abs(path)
	if err != nil {
		return err
	}
	if wantExec {
		fi, err := os.Stat(abs)
		if err != nil {
			return err
		}
		if !a.may(fi, 0o1) {
			return fmt.Errorf("%s is not executable by user %s", abs, a.name)
		}
	}
	for dir := filepath.Dir(abs); ; dir = filepath.Dir(dir) {
		fi, err := os.Stat(dir)
		if err != nil {
			return err
		}
		if !a.may(fi, 0o1) {
			return fmt.Errorf("user %s cannot pass through %s (mode %s): let it (chmod o+x) or choose another place", a.name, dir, fi.Mode().Perm())
		}
		if dir == "/" {
			return nil
		}
	}
}

// may reports whether the account has the permission bit (1 execute,
// 2 write, 4 read) on a file, judged as the kernel does: by owner, else
// group, else others. Supplementary groups are not considered because the
// programs run without them.
func (a *account) may(fi os.FileInfo, bit os.FileMode) bool {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return false
	}
	perm := fi.Mode().Perm()
	switch {
	case int(st.Uid) == a.uid:
		return perm&(bit<<6) != 0
	case int(st.Gid) == a.gid:
		return perm&(bit<<3) != 0
	default:
		return perm&bit != 0
	}
}

// wrap returns the program line that runs program as the account. setpriv
// changes the real, effective and saved ids and drops every supplementary
// group (root's included) before it executes the program; the launcher
// around it stays root, so the state and exit files it writes remain out
// of the workspace's reach.
func (a *account) wrap(setpriv, program string, args []string) (string, []string) {
	line := []string{
		"--reuid=" + strconv.Itoa(a.uid),
		"--regid=" + strconv.Itoa(a.gid),
		"--clear-groups",
		"--",
		program,
	}
	return setpriv, append(line, args...)
}

// env is what a program of the account finds about who it is.
func (a *account) env() []string {
	return []string{"USER=" + a.name, "LOGNAME=" + a.name}
}

// chown gives path to the account.
func (a *account) chown(path string) error {
	return os.Lchown(path, a.uid, a.gid)
}

// lockHome gives the top of a home to codehub's own user while a job works
// on it. No process of the workspace user can then enter it: a restore
// writes files owned by codehub's user, and nothing may swap a directory
// for a symlink under the walk that later gives them back.
func (b *Backend) lockHome(home string) error {
	if b.runAs == nil {
		return nil
	}
	if err := os.Lchown(home, os.Geteuid(), os.Getegid()); err != nil {
		return fmt.Errorf("lock home: %w", err)
	}
	return nil
}

// adoptHome gives a home to the workspace user before its program starts.
// A home whose top the user owns is its own already; any other (locked for
// a job, restored, or written by a codehub that ran workspaces as root) is
// locked, every entry below its top is given to the user, and the top last,
// so the user gets in only once the whole tree is its.
func (b *Backend) adoptHome(home string) error {
	if b.runAs == nil {
		return nil
	}
	fi, err := os.Lstat(home)
	if err != nil {
		return fmt.Errorf("home: %w", err)
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && int(st.Uid) == b.runAs.uid && int(st.Gid) == b.runAs.gid {
		return nil
	}
	if err := b.lockHome(home); err != nil {
		return err
	}
	err = filepath.WalkDir(home, func(path string, _ fs.DirEntry, err error) error {
		if err != nil || path == home {
			return err
		}
		return b.runAs.chown(path)
	})
	if err != nil {
		return fmt.Errorf("give home to %s: %w", b.runAs.name, err)
	}
	if err := b.runAs.chown(home); err != nil {
		return fmt.Errorf("give home to %s: %w", b.runAs.name, err)
	}
	return nil
}
