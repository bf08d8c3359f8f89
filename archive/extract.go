package archive

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
)

// Limits that make a header absurd rather than merely large.
const (
	maxEntrySize = 5 << 40 // S3's object limit bounds any file we wrote
	maxNameLen   = 4096    // PATH_MAX
	maxComponent = 255     // NAME_MAX
)

// entry is a tar header that passed checkEntry.
type entry struct {
	kind  entryKind
	hard  bool // a hard link to an earlier regular file
	name  string
	link  string
	mode  fs.FileMode
	size  int64
	mtime time.Time
}

// checkEntry decides whether a header may be extracted and how. It rejects
// anything that could write outside the target or create what a home must
// not hold (devices, fifos); setuid and setgid bits are dropped because the
// extractor may run as root.
func checkEntry(h *tar.Header) (entry, error) {
	name := strings.TrimSuffix(h.Name, "/")
	if err := checkName(name); err != nil {
		return entry{}, fmt.Errorf("entry %q: %w", h.Name, err)
	}
	if name == stagingName || strings.HasPrefix(name, stagingName+"/") {
		// The swap would try to move it onto the staging directory itself,
		// after the old home is already gone.
		return entry{}, fmt.Errorf("entry %q: %s is the restore's staging directory", h.Name, stagingName)
	}
	e := entry{name: name, mode: fs.FileMode(h.Mode & 0o777), mtime: h.ModTime}
	if h.Mode&0o1000 != 0 {
		e.mode |= fs.ModeSticky
	}
	if h.Size < 0 || h.Size > maxEntrySize {
		return entry{}, fmt.Errorf("entry %q: absurd size %d", h.Name, h.Size)
	}
	for k := range h.PAXRecords {
		// Sparse entries expand holes into data: a few bytes of archive
		// could claim terabytes. We never write them.
		if strings.HasPrefix(k, "GNU.sparse.") {
			return entry{}, fmt.Errorf("entry %q: sparse files are not allowed", h.Name)
		}
	}
	if h.Typeflag != tar.TypeReg && h.Size != 0 {
		return entry{}, fmt.Errorf("entry %q: type %q with %d bytes of data", h.Name, h.Typeflag, h.Size)
	}
	switch h.Typeflag {
	case tar.TypeReg:
		e.kind, e.size = kindFile, h.Size
	case tar.TypeDir:
		e.kind = kindDir
	case tar.TypeSymlink:
		if strings.ContainsRune(h.Linkname, 0) || linkEscapes(name, h.Linkname) {
			return entry{}, fmt.Errorf("entry %q: symlink to %q leaves the target", h.Name, h.Linkname)
		}
		e.kind, e.link = kindSymlink, h.Linkname
	case tar.TypeLink:
		if err := checkName(h.Linkname); err != nil || h.Linkname == name {
			return entry{}, fmt.Errorf("entry %q: hard link to %q is not a file inside the target", h.Name, h.Linkname)
		}
		e.kind, e.hard, e.link = kindFile, true, h.Linkname
	default:
		return entry{}, fmt.Errorf("entry %q: type %q is not allowed", h.Name, h.Typeflag)
	}
	return e, nil
}

// checkName accepts only clean, relative, slash-separated names.
func checkName(name string) error {
	switch {
	case name == "" || name == ".":
		return errors.New("empty name")
	case len(name) > maxNameLen:
		return errors.New("name too long")
	case strings.ContainsRune(name, 0):
		return errors.New("NUL in name")
	case path.IsAbs(name):
		return errors.New("absolute name")
	case path.Clean(name) != name:
		return errors.New("name is not clean")
	}
	for _, c := range strings.Split(name, "/") {
		if c == ".." {
			return errors.New("name climbs out with ..")
		}
		if len(c) > maxComponent {
			return errors.New("name component too long")
		}
	}
	return nil
}

// extractor writes tar entries below root. os.Root confines every file
// operation to the target, even through symlinks the archive created.
type extractor struct {
	logger  hclog.Logger
	root    *os.Root
	written *atomic.Int64
	dirs    []entry         // attributes applied last, deepest first
	made    map[string]bool // directories known to exist
	buf     []byte

	// links are the archive's symlinks, by name. Each is checked on its own
	// as it comes, but a chain (a -> b/.., b -> .) escapes although every
	// link stays inside by itself, and a link may name one that comes later:
	// they are created last, once the whole set can be resolved.
	links     map[string]string
	linkOrder []string

	// The directory of the previous entry, open: entries come grouped by
	// directory, and creating a single name in it costs one system call
	// where resolving the whole path costs one per component.
	parentDir  *os.File
	parentName string
}

// extractTar extracts a tar stream into root. Every failure is classified:
// a full disk is DISK_FULL, an S3 failure keeps its code, anything the
// archive is to blame for is TAR_EXTRACT_FAILED.
func extractTar(ctx context.Context, logger hclog.Logger, r io.Reader, root *os.Root, written *atomic.Int64) error {
	buf := copyBuffers.Get().(*[]byte)
	defer copyBuffers.Put(buf)
	x := &extractor{logger: logger, root: root, written: written, made: map[string]bool{".": true}, links: map[string]string{}, buf: *buf}
	defer x.closeParent()
	return extractError(x.run(ctx, tar.NewReader(r)))
}

// copyBuffers hold the 1 MiB buffers file contents are written through.
// A job extracts once, but the fuzz test extracts tens of thousands of
// times a second, and zeroing a fresh buffer each time slowed it by half.
var copyBuffers = sync.Pool{New: func() any {
	b := make([]byte, 1<<20)
	return &b
}}

func extractError(err error) error {
	if err == nil {
		return nil
	}
	if _, coded := errors.AsType[*Error](err); coded {
		return err
	}
	if CodeOf(err) == CodeDiskFull {
		return withCode(CodeDiskFull, err)
	}
	return withCode(CodeTarExtractFailed, err)
}

func (x *extractor) run(ctx context.Context, tr *tar.Reader) error {
	for {
		if err := ctx.Err(); err != nil {
			return withCode(CodeUnknown, err)
		}
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return fmt.Errorf("read tar header: %w", err)
		}
		e, err := checkEntry(h)
		if err != nil {
			return err
		}
		if err := x.write(e, tr); err != nil {
			return err
		}
	}
	if err := x.symlinks(); err != nil {
		return err
	}
	return x.finishDirs()
}

// symlinks creates the archive's symlinks, leaving out any whose target,
// resolved through the others as the kernel would, leaves the target or
// loops: like packing, which leaves out links that point outside by
// themselves, it drops them with a warning instead of making a home that
// holds one impossible to restore. A name the archive also used for another
// entry (a directory it wrote through) is refused: the archive contradicts
// itself.
func (x *extractor) symlinks() error {
	for _, name := range x.linkOrder {
		target := x.links[name]
		if _, err := x.root.Lstat(name); err == nil {
			return fmt.Errorf("entry %q: a symlink where the archive also wrote through it", name)
		}
		if chainEscapes(name, target, x.links) {
			x.logger.Warn("skipping symlink that leads outside the home through other symlinks", "path", name, "target", target)
			continue
		}
		if err := x.parent(name); err != nil {
			return err
		}
		if err := x.root.Symlink(target, name); err != nil {
			return err
		}
	}
	return nil
}

// maxLinkHops is how many symlinks one resolution may follow, as Linux's
// 40 before ELOOP.
const maxLinkHops = 40

// chainEscapes resolves the symlink name -> target component by component
// within the archive's namespace, replacing every component that names one
// of links by that link's target. It reports whether the resolution ever
// climbs above the root, meets an absolute or empty target, or follows more
// than maxLinkHops links.
func chainEscapes(name, target string, links map[string]string) bool {
	var resolved []string
	if dir := path.Dir(name); dir != "." {
		resolved = strings.Split(dir, "/")
	}
	pending := []string{target}
	hops := 0
	for len(pending) > 0 {
		next := pending[len(pending)-1]
		pending = pending[:len(pending)-1]
		if next == "" || path.IsAbs(next) {
			return true
		}
		parts := strings.Split(next, "/")
		for i, c := range parts {
			switch c {
			case "", ".":
				continue
			case "..":
				if len(resolved) == 0 {
					return true
				}
				resolved = resolved[:len(resolved)-1]
				continue
			}
			resolved = append(resolved, c)
			link, ok := links[strings.Join(resolved, "/")]
			if !ok {
				continue
			}
			if hops++; hops > maxLinkHops {
				return true
			}
			// The link's target is resolved from its own directory, then
			// the rest of this path from wherever that leads.
			resolved = resolved[:len(resolved)-1]
			if rest := strings.Join(parts[i+1:], "/"); rest != "" {
				pending = append(pending, rest)
			}
			pending = append(pending, link)
			break
		}
	}
	return false
}

func (x *extractor) write(e entry, tr io.Reader) error {
	if e.kind == kindDir {
		return x.dir(e)
	}
	if err := x.parent(e.name); err != nil {
		return err
	}
	if e.hard {
		return x.hardlink(e)
	}
	if e.kind == kindSymlink {
		if _, dup := x.links[e.name]; dup {
			return fmt.Errorf("entry %q: a second symlink of the same name", e.name)
		}
		x.links[e.name] = e.link
		x.linkOrder = append(x.linkOrder, e.name)
		return nil
	}
	dir, err := x.openParent(path.Dir(e.name))
	if err != nil {
		return err
	}
	return x.file(dir, path.Base(e.name), e, tr)
}

// openParent opens dir through the root, reusing the previous entry's.
func (x *extractor) openParent(dir string) (*os.File, error) {
	if x.parentDir != nil && x.parentName == dir {
		return x.parentDir, nil
	}
	x.closeParent()
	f, err := x.root.OpenFile(dir, os.O_RDONLY|syscall.O_DIRECTORY, 0)
	if err != nil {
		return nil, err
	}
	x.parentDir, x.parentName = f, dir
	return f, nil
}

func (x *extractor) closeParent() {
	if x.parentDir != nil {
		x.parentDir.Close()
		x.parentDir = nil
	}
}

// parent makes sure the directory holding name exists; directories the
// archive does not list itself stay private (0700).
func (x *extractor) parent(name string) error {
	dir := path.Dir(name)
	if x.made[dir] {
		return nil
	}
	if err := x.root.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	x.made[dir] = true
	return nil
}

func (x *extractor) dir(e entry) error {
	if err := x.parent(e.name); err != nil {
		return err
	}
	if err := x.root.Mkdir(e.name, 0o700); err != nil {
		// A directory already made as a parent is fine; anything else there
		// (a file, a symlink) means the archive is contradictory.
		fi, statErr := x.root.Lstat(e.name)
		if statErr != nil || !fi.IsDir() {
			return err
		}
	}
	x.made[e.name] = true
	x.dirs = append(x.dirs, e)
	return nil
}

func (x *extractor) hardlink(e entry) error {
	fi, err := x.root.Lstat(e.link)
	if err != nil {
		return fmt.Errorf("hard link %q: %w", e.name, err)
	}
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("hard link %q: target %q is not a regular file", e.name, e.link)
	}
	return x.root.Link(e.link, e.name)
}

func (x *extractor) file(dir *os.File, base string, e entry, tr io.Reader) error {
	f, err := createIn(dir, base, e.name)
	if err != nil {
		return err
	}
	n, err := x.copyKeepingHoles(f, tr, e.size)
	x.written.Add(n)
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		err = fmt.Errorf("entry %q: %d of %d bytes", e.name, n, e.size)
	}
	if err == nil {
		err = f.chmod(e.mode)
	}
	if err == nil {
		err = f.setTimes(e.mtime)
	}
	if closeErr := f.Close(); err == nil {
		err = closeErr
	}
	return err
}

// holeBlock is the unit in which zeros are left unwritten: the block size
// of the common file systems.
const holeBlock = 4096

var zeroBlock [holeBlock]byte

// copyKeepingHoles writes the size bytes of an entry to f, leaving every
// block of zeros a hole. An archive stores a sparse file (a disk image, a
// preallocated database) as its full length; written back densely it could
// need many times the room the home had, more than its volume holds.
func (x *extractor) copyKeepingHoles(f sysFile, r io.Reader, size int64) (int64, error) {
	var off, end int64 // end: just past the last byte written
	for off < size {
		n, err := io.ReadFull(r, x.buf[:min(int64(len(x.buf)), size-off)])
		chunkEnd, werr := writeNonZero(f, x.buf[:n], off)
		if werr != nil {
			return off, werr
		}
		end = max(end, chunkEnd)
		off += int64(n)
		if err != nil {
			return off, err
		}
	}
	if end < size {
		// The file ends in a hole: only its length is left to set.
		return off, f.truncate(size)
	}
	return off, nil
}

// writeNonZero writes the blocks of p that hold anything but zeros at
// offset off, each run of them in one call, and returns the end of the last
// one (0 if none).
func writeNonZero(f sysFile, p []byte, off int64) (int64, error) {
	var end int64
	for i := 0; i < len(p); {
		if isZeroBlock(p, i) {
			i = min(i+holeBlock, len(p))
			continue
		}
		start := i
		for i < len(p) && !isZeroBlock(p, i) {
			i = min(i+holeBlock, len(p))
		}
		if err := f.writeAt(p[start:i], off+int64(start)); err != nil {
			return 0, err
		}
		end = off + int64(i)
	}
	return end, nil
}

// isZeroBlock reports whether the block of p starting at i is all zeros.
func isZeroBlock(p []byte, i int) bool {
	block := p[i:min(i+holeBlock, len(p))]
	return bytes.Equal(block, zeroBlock[:len(block)])
}

// finishDirs applies directory modes and mtimes after their contents are
// written, deepest first, so a read-only directory can still be filled.
func (x *extractor) finishDirs() error {
	for i := len(x.dirs) - 1; i >= 0; i-- {
		d := x.dirs[i]
		if err := x.root.Chmod(d.name, d.mode); err != nil {
			return err
		}
		if err := x.root.Chtimes(d.name, d.mtime, d.mtime); err != nil {
			return err
		}
	}
	return nil
}
