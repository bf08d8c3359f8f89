package archive

import (
	"archive/tar"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"

	"github.com/hashicorp/go-hclog"
)

// stagingName is the directory a restore extracts into, inside the target
// (the only place certain to be on the same filesystem). Archives never
// contain it.
const stagingName = ".codehub-restore"

// entryKind is what the archive does with a file system object.
type entryKind int

const (
	kindSkip entryKind = iota // sockets, devices, fifos: not user data
	kindDir
	kindFile
	kindSymlink
)

func kindOf(mode fs.FileMode) entryKind {
	switch {
	case mode.IsRegular():
		return kindFile
	case mode.IsDir():
		return kindDir
	case mode&fs.ModeSymlink != 0:
		return kindSymlink
	default:
		return kindSkip
	}
}

// tarMode converts permission and special bits to the tar header's Unix
// mode. Ownership is never recorded: restore writes as whoever runs it.
func tarMode(m fs.FileMode) int64 {
	mode := int64(m.Perm())
	if m&fs.ModeSetuid != 0 {
		mode |= 0o4000
	}
	if m&fs.ModeSetgid != 0 {
		mode |= 0o2000
	}
	if m&fs.ModeSticky != 0 {
		mode |= 0o1000
	}
	return mode
}

// linkEscapes reports whether a symlink at name (slash-separated, relative
// to the archive root) with the given target points outside the root. It is
// a lexical check; extraction additionally confines itself with os.Root.
func linkEscapes(name, target string) bool {
	if target == "" || path.IsAbs(target) {
		return true
	}
	resolved := path.Join(path.Dir(name), target)
	return resolved == ".." || strings.HasPrefix(resolved, "../")
}

type fileID struct{ dev, ino uint64 }

// scanTree lists the contents of root (not root itself) as manifest
// entries in walk order, which is lexical per directory, without reading
// any file: stat only. Regular files get no hash and no layer yet. The
// walk follows no symlink, not even the home's own path, which would leave
// nothing to archive, so root is resolved first.
//
// live is for a home in use (a snapshot): what vanishes or cannot be read
// while the walk passes is left out instead of failing the walk.
func scanTree(ctx context.Context, logger hclog.Logger, root string, live bool) (string, *manifest, error) {
	root, err := filepath.EvalSymlinks(root)
	if err != nil {
		return "", nil, err
	}
	volume, err := volumeID(root)
	if err != nil {
		return "", nil, err
	}
	m := &manifest{header: manifestHeader{Version: manifestVersion, Volume: volume}}
	links := make(map[fileID]string) // first name of each multiply linked file
	err = filepath.WalkDir(root, func(file string, d fs.DirEntry, err error) error {
		if err != nil {
			return skipLive(logger, live && file != root, file, d, err)
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		rel, err := filepath.Rel(root, file)
		if err != nil {
			return err
		}
		if rel == "." {
			return nil
		}
		if rel == stagingName {
			logger.Warn("skipping entry named like the restore staging directory", "path", file)
			// SkipDir on anything but a directory would skip the rest of
			// the home's top level.
			if d.IsDir() {
				return fs.SkipDir
			}
			return nil
		}
		e, ok, err := statEntry(logger, file, filepath.ToSlash(rel), links)
		if err != nil {
			return skipLive(logger, live, file, d, err)
		}
		if ok {
			m.entries = append(m.entries, e)
		}
		return nil
	})
	if err != nil {
		return "", nil, fmt.Errorf("walk %s: %w", root, err)
	}
	return root, m, nil
}

// skipLive decides what a walk does with an entry it failed to read: in a
// home in use (live), one that vanished or that its user may not read is
// left out, a directory with all it holds; otherwise err ends the walk.
func skipLive(logger hclog.Logger, live bool, file string, d fs.DirEntry, err error) error {
	if !live || !(errors.Is(err, fs.ErrNotExist) || errors.Is(err, fs.ErrPermission)) {
		return err
	}
	if errors.Is(err, fs.ErrPermission) {
		logger.Warn("snapshot leaves out what the workspace user may not read", "path", file, "error", err)
	}
	if d != nil && d.IsDir() {
		return fs.SkipDir
	}
	return nil
}

// statEntry describes one file system object; ok is false for what the
// archive leaves out.
func statEntry(logger hclog.Logger, file, name string, links map[fileID]string) (Entry, bool, error) {
	info, err := os.Lstat(file)
	if err != nil {
		return Entry{}, false, err
	}
	e := Entry{Path: name, Mode: tarMode(info.Mode())}
	e.MTime, e.MTimeNS = info.ModTime().Unix(), int64(info.ModTime().Nanosecond())
	st, _ := info.Sys().(*syscall.Stat_t)
	if st != nil {
		e.UID, e.GID = st.Uid, st.Gid
	}
	switch kindOf(info.Mode()) {
	case kindSkip:
		logger.Info("skipping special file", "path", file, "type", info.Mode().Type().String())
		return Entry{}, false, nil
	case kindDir:
		e.Type = TypeDir
		return e, true, nil
	case kindSymlink:
		target, err := os.Readlink(file)
		if err != nil {
			return Entry{}, false, err
		}
		if linkEscapes(name, target) {
			logger.Warn("skipping symlink that points outside the home", "path", file, "target", target)
			return Entry{}, false, nil
		}
		e.Type, e.Link = TypeSymlink, target
		return e, true, nil
	}
	e.Type, e.Size = TypeFile, info.Size()
	if st != nil {
		// Compared for equality only: wrapping past 2262 is harmless.
		e.Inode, e.CTime = st.Ino, st.Ctim.Sec*1e9+st.Ctim.Nsec
		if st.Nlink > 1 {
			id := fileID{dev: uint64(st.Dev), ino: st.Ino}
			if first, seen := links[id]; seen {
				return Entry{Path: name, Type: TypeHardlink, Link: first, Mode: e.Mode, UID: e.UID, GID: e.GID, MTime: e.MTime, MTimeNS: e.MTimeNS}, true, nil
			}
			links[id] = name
		}
	}
	return e, true, nil
}

// volumeID names the file system holding root: inode numbers and ctimes
// recorded by an archive are compared only on the same one. The device
// number alone could be reused by another volume mounted later, hence the
// file system id and the home directory's own inode too (not its ctime,
// which every file created in the home's top level moves). Should another
// home still match, its files' ctimes (the time they were written there,
// which no user call can set) will not.
func volumeID(root string) (string, error) {
	var st syscall.Stat_t
	if err := syscall.Stat(root, &st); err != nil {
		return "", &fs.PathError{Op: "stat", Path: root, Err: err}
	}
	var sfs syscall.Statfs_t
	if err := syscall.Statfs(root, &sfs); err != nil {
		return "", &fs.PathError{Op: "statfs", Path: root, Err: err}
	}
	return fmt.Sprintf("dev=%x fsid=%x.%x ino=%d", st.Dev, sfs.Fsid.X__val[0], sfs.Fsid.X__val[1], st.Ino), nil
}

// layerWriter writes one archive's tar stream from its manifest.
type layerWriter struct {
	tw   *tar.Writer
	root string
	read *atomic.Int64
	buf  []byte
	// live: the home is in use (a snapshot); see writeLayer.
	live bool
	// dropped are the paths a live layer left out: they vanished or could
	// not be read once the walk had listed them.
	dropped map[string]bool
}

// writeLayer writes, as tar, the entries of m that the archive at key
// stores: with full, every entry, exactly as a complete home archive;
// otherwise only the regular files m assigns to key. Files are read again
// here: one whose inode, size or mtime moved since the scan, or whose
// bytes no longer hash as the scan found, fails the archive. The hash of
// every file written is recorded in m.
//
// A live layer (a snapshot of a home in use) never fails for what its
// user does meanwhile. A file written since the scan is stored as it is
// when opened, its stat recorded from then, so the next snapshot, seeing
// it moved again, reads it anew; one that vanishes or can no longer be
// read is left out of the layer and of m, with the hard links to it.
func writeLayer(ctx context.Context, root string, m *manifest, key string, full, live bool, w io.Writer, read *atomic.Int64) error {
	lw := &layerWriter{tw: tar.NewWriter(w), root: root, read: read, buf: make([]byte, 1<<20),
		live: live, dropped: map[string]bool{}}
	for i := range m.entries {
		if err := ctx.Err(); err != nil {
			return err
		}
		e := &m.entries[i]
		hdr := &tar.Header{
			Name:    e.Path,
			Mode:    e.Mode,
			ModTime: e.modTime(),
			// PAX keeps nanosecond mtimes and long or non-ASCII names.
			Format: tar.FormatPAX,
		}
		var err error
		switch {
		case e.Type == TypeFile && e.Layer == key:
			hdr.Typeflag, hdr.Size = tar.TypeReg, e.Size
			err = lw.addFile(e, hdr)
		case e.Type == TypeHardlink && lw.dropped[e.Link]:
			lw.dropped[e.Path] = true
		case !full || e.Type == TypeFile:
			continue
		case e.Type == TypeDir:
			hdr.Typeflag = tar.TypeDir
			hdr.Name += "/"
			err = lw.tw.WriteHeader(hdr)
		case e.Type == TypeSymlink:
			hdr.Typeflag, hdr.Linkname = tar.TypeSymlink, e.Link
			err = lw.tw.WriteHeader(hdr)
		case e.Type == TypeHardlink:
			hdr.Typeflag, hdr.Linkname = tar.TypeLink, e.Link
			err = lw.tw.WriteHeader(hdr)
		}
		if err != nil {
			return err
		}
	}
	if len(lw.dropped) > 0 {
		m.entries = slices.DeleteFunc(m.entries, func(e Entry) bool { return lw.dropped[e.Path] })
	}
	return lw.tw.Close()
}

// errChangedWhileArchiving: the home was written to while it was archived.
var errChangedWhileArchiving = errors.New("file changed while archiving")

func (lw *layerWriter) addFile(e *Entry, hdr *tar.Header) error {
	file := filepath.Join(lw.root, filepath.FromSlash(e.Path))
	f, err := openRegular(file)
	if err != nil {
		if lw.live {
			lw.dropped[e.Path] = true
			return nil
		}
		return err
	}
	defer f.Close()
	st, err := f.stat()
	if err != nil {
		return err
	}
	if st.Ino != e.Inode || st.Size != e.Size || !e.sameMTime(st.Mtim) {
		if !lw.live {
			return fmt.Errorf("copy %s: %w (replaced or written since the walk)", file, errChangedWhileArchiving)
		}
		e.Inode, e.CTime, e.Size = st.Ino, st.Ctim.Sec*1e9+st.Ctim.Nsec, st.Size
		e.MTime, e.MTimeNS = st.Mtim.Sec, st.Mtim.Nsec
		e.SHA256 = ""
		hdr.Size, hdr.ModTime = e.Size, e.modTime()
	}
	if err := lw.tw.WriteHeader(hdr); err != nil {
		return err
	}
	sum := sha256.New()
	n, err := io.CopyBuffer(io.MultiWriter(lw.tw, sum), io.LimitReader(f, e.Size), lw.buf)
	lw.read.Add(n)
	if err != nil {
		return fmt.Errorf("copy %s: %w", file, err)
	}
	if lw.live {
		// What was truncated while read is stored zero-filled to the size
		// the header announced; the next snapshot stores it again.
		if n < e.Size {
			if _, err := io.CopyN(io.MultiWriter(lw.tw, sum), zeros{}, e.Size-n); err != nil {
				return err
			}
		}
		e.SHA256 = hex.EncodeToString(sum.Sum(nil))
		return nil
	}
	if n != e.Size {
		return fmt.Errorf("copy %s: file shrank from %d to %d bytes: %w", file, e.Size, n, errChangedWhileArchiving)
	}
	// Growth or a rewrite in place goes unseen by the copy, which stops at
	// the size the header announced.
	if st, err = f.stat(); err != nil {
		return err
	}
	if st.Size != e.Size || !e.sameMTime(st.Mtim) {
		return fmt.Errorf("copy %s: %w", file, errChangedWhileArchiving)
	}
	got := hex.EncodeToString(sum.Sum(nil))
	if e.SHA256 != "" && got != e.SHA256 {
		return fmt.Errorf("copy %s: %w (content differs from its hash a moment before)", file, errChangedWhileArchiving)
	}
	e.SHA256 = got
	return nil
}

// zeros reads as an endless run of zero bytes.
type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

// hashFile returns the sha256 of the file at e.Path below root, counting
// the bytes read.
func hashFile(root string, e *Entry, buf []byte, read *atomic.Int64) (string, error) {
	file := filepath.Join(root, filepath.FromSlash(e.Path))
	f, err := openRegular(file)
	if err != nil {
		return "", err
	}
	defer f.Close()
	sum := sha256.New()
	n, err := io.CopyBuffer(sum, f, buf)
	read.Add(n)
	if err != nil {
		return "", fmt.Errorf("hash %s: %w", file, err)
	}
	if n != e.Size {
		return "", fmt.Errorf("hash %s: %d bytes, %d at the walk: %w", file, n, e.Size, errChangedWhileArchiving)
	}
	return hex.EncodeToString(sum.Sum(nil)), nil
}

// compressStream runs write in a goroutine of its own, feeding enc through
// an in-memory pipe, so that producing the tar stream overlaps with
// compressing it.
func compressStream(enc io.Writer, write func(w io.Writer) error) error {
	pipe := newChunkPipe()
	walked := make(chan error, 1)
	go func() {
		err := write(pipe)
		pipe.closeWrite(err)
		walked <- err
	}()
	_, encErr := pipe.WriteTo(enc)
	pipe.closeRead(encErr)
	walkErr := <-walked
	// A failed encoder also fails the writer, with the encoder's error.
	if encErr != nil {
		return encErr
	}
	return walkErr
}
