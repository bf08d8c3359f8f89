package archive

import (
	"archive/tar"
	"context"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

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

// packer writes a directory tree as a tar stream.
type packer struct {
	logger hclog.Logger
	tw     *tar.Writer
	root   string
	read   *atomic.Int64
	links  map[fileID]string // first name of each multiply linked file
	buf    []byte
}

// writeTree writes the contents of root (not root itself) to w as tar, in
// lexical order so the same tree always gives the same bytes.
func writeTree(ctx context.Context, logger hclog.Logger, root string, w io.Writer, read *atomic.Int64) error {
	// The walk follows no symlink, not even the home's own path, which
	// would leave nothing to archive.
	root, err := filepath.EvalSymlinks(root)
	if err != nil {
		return err
	}
	p := &packer{
		logger: logger, tw: tar.NewWriter(w), root: root, read: read,
		links: make(map[fileID]string), buf: make([]byte, 1<<20),
	}
	err = filepath.WalkDir(root, func(file string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
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
		return p.add(file, filepath.ToSlash(rel))
	})
	if err != nil {
		return fmt.Errorf("walk %s: %w", root, err)
	}
	return p.tw.Close()
}

func (p *packer) add(file, name string) error {
	info, err := os.Lstat(file)
	if err != nil {
		return err
	}
	hdr := &tar.Header{
		Name:    name,
		Mode:    tarMode(info.Mode()),
		ModTime: info.ModTime(),
		// PAX keeps nanosecond mtimes and long or non-ASCII names.
		Format: tar.FormatPAX,
	}
	switch kindOf(info.Mode()) {
	case kindSkip:
		p.logger.Info("skipping special file", "path", file, "type", info.Mode().Type().String())
		return nil
	case kindDir:
		hdr.Typeflag = tar.TypeDir
		hdr.Name += "/"
		return p.tw.WriteHeader(hdr)
	case kindSymlink:
		target, err := os.Readlink(file)
		if err != nil {
			return err
		}
		if linkEscapes(name, target) {
			p.logger.Warn("skipping symlink that points outside the home", "path", file, "target", target)
			return nil
		}
		hdr.Typeflag = tar.TypeSymlink
		hdr.Linkname = target
		return p.tw.WriteHeader(hdr)
	}
	if st, ok := info.Sys().(*syscall.Stat_t); ok && st.Nlink > 1 {
		id := fileID{dev: uint64(st.Dev), ino: st.Ino}
		if first, seen := p.links[id]; seen {
			hdr.Typeflag = tar.TypeLink
			hdr.Linkname = first
			return p.tw.WriteHeader(hdr)
		}
		p.links[id] = name
	}
	hdr.Typeflag = tar.TypeReg
	hdr.Size = info.Size()
	return p.addFile(file, hdr)
}

func (p *packer) addFile(file string, hdr *tar.Header) error {
	f, err := openRegular(file)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := p.tw.WriteHeader(hdr); err != nil {
		return err
	}
	n, err := io.CopyBuffer(p.tw, io.LimitReader(f, hdr.Size), p.buf)
	p.read.Add(n)
	if err != nil {
		return fmt.Errorf("copy %s: %w", file, err)
	}
	if n != hdr.Size {
		return fmt.Errorf("copy %s: file shrank from %d to %d bytes while archiving", file, hdr.Size, n)
	}
	// Growth or a rewrite in place goes unseen by the copy, which stops at
	// the size the header announced.
	st, err := f.stat()
	if err != nil {
		return err
	}
	if st.Size != hdr.Size || !time.Unix(st.Mtim.Unix()).Equal(hdr.ModTime) {
		return fmt.Errorf("copy %s: file changed while archiving", file)
	}
	return nil
}

// compressTree writes the tar stream of root to enc, walking the tree in a
// goroutine of its own so that reading files and building headers overlap
// with compression.
func compressTree(ctx context.Context, logger hclog.Logger, root string, enc io.Writer, read *atomic.Int64) error {
	pipe := newChunkPipe()
	walked := make(chan error, 1)
	go func() {
		err := writeTree(ctx, logger, root, pipe, read)
		pipe.closeWrite(err)
		walked <- err
	}()
	_, encErr := pipe.WriteTo(enc)
	pipe.closeRead(encErr)
	walkErr := <-walked
	// A failed encoder also fails the walker, with the encoder's error.
	if encErr != nil {
		return encErr
	}
	return walkErr
}

// homeBytes is the number of file bytes writeTree reads from root: regular
// files, each multiply linked one once, the staging directory left out.
// Files that change or vanish meanwhile only make it approximate.
func homeBytes(ctx context.Context, root string) (int64, error) {
	root, err := filepath.EvalSymlinks(root)
	if err != nil {
		return 0, err
	}
	var total int64
	seen := make(map[fileID]bool)
	err = filepath.WalkDir(root, func(file string, d fs.DirEntry, err error) error {
		if err != nil {
			// What writeTree fails on, it reports; the estimate goes on.
			return nil
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if d.IsDir() && filepath.Dir(file) == root && d.Name() == stagingName {
			return fs.SkipDir
		}
		if !d.Type().IsRegular() {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return nil
		}
		if st, ok := info.Sys().(*syscall.Stat_t); ok && st.Nlink > 1 {
			id := fileID{dev: uint64(st.Dev), ino: st.Ino}
			if seen[id] {
				return nil
			}
			seen[id] = true
		}
		total += info.Size()
		return nil
	})
	return total, err
}
