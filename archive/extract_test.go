package archive

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/klauspost/compress/zstd"
)

type tarEntry struct {
	name string
	typ  byte // tar.TypeReg when zero
	body string
	link string
	mode int64
	size int64 // header size when not len(body)
}

// hostileTar builds a tar stream exactly as told, including what a sane
// archiver would never write.
func hostileTar(t testing.TB, entries []tarEntry) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		h := &tar.Header{Name: e.name, Typeflag: e.typ, Linkname: e.link, Mode: e.mode, ModTime: time.Unix(1700000000, 0), Format: tar.FormatPAX}
		if h.Typeflag == 0 {
			h.Typeflag = tar.TypeReg
		}
		if h.Mode == 0 {
			h.Mode = 0o644
		}
		if h.Typeflag == tar.TypeReg {
			h.Size = int64(len(e.body))
		}
		if e.size != 0 {
			h.Size = e.size
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatalf("header %q: %v", e.name, err)
		}
		if e.size != 0 {
			// The header lies about its data; stop here.
			return buf.Bytes()
		}
		if _, err := tw.Write([]byte(e.body)); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func compress(t testing.TB, b []byte) []byte {
	t.Helper()
	enc, err := zstd.NewWriter(nil)
	if err != nil {
		t.Fatal(err)
	}
	return enc.EncodeAll(b, nil)
}

func metaOf(body []byte) Meta {
	sum := sha256.Sum256(body)
	return newMeta(sum[:], int64(len(body)), time.Now())
}

// hostileArchives are tar streams the extractor must refuse, each for one
// reason.
var hostileArchives = map[string][]tarEntry{
	"absolute name":    {{name: "/tmp/codehub-pwned", body: "x"}},
	"dot-dot name":     {{name: "../escape", body: "x"}},
	"dot-dot inside":   {{name: "a/../../escape", body: "x"}},
	"unclean name":     {{name: "a//b", body: "x"}},
	"absolute symlink": {{name: "s", typ: tar.TypeSymlink, link: "/"}, {name: "s/pwned", body: "x"}},
	"symlink written through": {
		{name: "s", typ: tar.TypeSymlink, link: "."},
		{name: "s/t", typ: tar.TypeSymlink, link: ".."},
	},
	"climbing symlink":  {{name: "s", typ: tar.TypeSymlink, link: ".."}, {name: "s/pwned", body: "x"}},
	"deep climb":        {{name: "a/s", typ: tar.TypeSymlink, link: "../../x"}},
	"hardlink outside":  {{name: "h", typ: tar.TypeLink, link: "/etc/passwd"}},
	"hardlink climbing": {{name: "h", typ: tar.TypeLink, link: "../x"}},
	"hardlink to link": {
		{name: "s", typ: tar.TypeSymlink, link: "target"}, {name: "target", body: "x"},
		{name: "h", typ: tar.TypeLink, link: "s"},
	},
	"hardlink to missing": {{name: "h", typ: tar.TypeLink, link: "nothing"}},
	"char device":         {{name: "null", typ: tar.TypeChar}},
	"block device":        {{name: "sda", typ: tar.TypeBlock}},
	"fifo":                {{name: "pipe", typ: tar.TypeFifo}},
	"absurd size":         {{name: "huge", size: 1 << 50}},
	"short data":          {{name: "short", size: 4096}},
	"duplicate file":      {{name: "f", body: "1"}, {name: "f", body: "2"}},
	"file then dir":       {{name: "f", body: "1"}, {name: "f", typ: tar.TypeDir}},
	"dir with data":       {{name: "d", typ: tar.TypeDir, size: 10}},
	"staging name":        {{name: stagingName + "/f", body: "x"}},
	// Each link is lexically inside, but together they climb out; os.Root
	// must stop the write through them.
	"symlink chain": {
		{name: "x/y/z/b", typ: tar.TypeSymlink, link: "../../.."},
		{name: "x/y/z/a", typ: tar.TypeSymlink, link: "b/../.."},
		{name: "x/y/z/a/pwned", body: "x"},
	},
}

func TestExtractRejectsHostileArchives(t *testing.T) {
	for name, entries := range hostileArchives {
		t.Run(name, func(t *testing.T) {
			err, outside := extractInSandbox(t, hostileTar(t, entries))
			t.Logf("rejected: %v", err)
			wantCode(t, err, CodeTarExtractFailed)
			if outside != "" {
				t.Fatal(outside)
			}
		})
	}
}

// Each of these links stays inside by itself, but followed through the
// others it leads outside the home, or loops. Restoring drops exactly
// those links (packing drops links that leave by themselves) and keeps the
// rest, so such a home stays restorable.
func TestExtractDropsSymlinkChainsThatLeave(t *testing.T) {
	data := hostileTar(t, []tarEntry{
		{name: "a", typ: tar.TypeSymlink, link: "b/.."},
		{name: "b", typ: tar.TypeSymlink, link: "c"},
		{name: "c/", typ: tar.TypeDir, mode: 0o755},
		{name: "c/d", typ: tar.TypeSymlink, link: ".."},
		{name: "c/f", body: "kept"},
		{name: "e", typ: tar.TypeSymlink, link: "c/d/.."},
		{name: "g", typ: tar.TypeSymlink, link: "b/f"},
		{name: "p", typ: tar.TypeSymlink, link: "q"},
		{name: "q", typ: tar.TypeSymlink, link: "p"},
		// Names a link that comes later in the archive.
		{name: "x", typ: tar.TypeSymlink, link: "y/.."},
		{name: "y", typ: tar.TypeSymlink, link: "."},
	})
	_, target, err := extractInto(t, data)
	if err != nil {
		t.Fatal(err)
	}
	for name, kept := range map[string]bool{"a": true, "b": true, "c/d": true, "g": true, "y": true, "e": false, "p": false, "q": false, "x": false} {
		_, err := os.Lstat(filepath.Join(target, name))
		if kept != (err == nil) {
			t.Errorf("%s: kept %v, want %v", name, err == nil, kept)
		}
	}
	if b, err := os.ReadFile(filepath.Join(target, "g")); err != nil || string(b) != "kept" {
		t.Errorf("g -> b/f reads %q, %v", b, err)
	}
	_, outside := extractInSandbox(t, data)
	if outside != "" {
		t.Fatal(outside)
	}
}

// sparseArchives were made by GNU tar -S from a 1 TiB file holding one byte.
var sparseArchives = []string{"testdata/sparse-pax.tar", "testdata/sparse-gnu.tar"}

func TestExtractRejectsSparseFiles(t *testing.T) {
	for _, name := range sparseArchives {
		data, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		err, outside := extractInSandbox(t, data)
		t.Logf("%s rejected: %v", name, err)
		wantCode(t, err, CodeTarExtractFailed)
		if outside != "" {
			t.Fatal(outside)
		}
	}
}

func TestExtractKeepsModesAndLinks(t *testing.T) {
	mtime := time.Unix(1700000000, 0)
	data := hostileTar(t, []tarEntry{
		{name: "ro/", typ: tar.TypeDir, mode: 0o555},
		{name: "ro/file", body: "abc", mode: 0o4755},
		{name: "ro/hard", typ: tar.TypeLink, link: "ro/file"},
		{name: "up", typ: tar.TypeSymlink, link: "ro/../ro/file"},
		{name: "implicit/parent/f", body: "x", mode: 0o600},
	})
	parent := t.TempDir()
	root, err := os.OpenRoot(parent)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	var n atomic.Int64
	if err := extractTar(context.Background(), hclog.NewNullLogger(), bytes.NewReader(data), root, &n); err != nil {
		t.Fatal(err)
	}
	checks := []struct {
		name string
		mode fs.FileMode
	}{
		{"ro", fs.ModeDir | 0o555},
		{"ro/file", 0o755}, // setuid dropped
		{"implicit/parent", fs.ModeDir | 0o700},
		{"implicit/parent/f", 0o600},
	}
	for _, c := range checks {
		fi, err := os.Lstat(filepath.Join(parent, c.name))
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode() != c.mode {
			t.Errorf("%s: mode %v, want %v", c.name, fi.Mode(), c.mode)
		}
	}
	if fi, _ := os.Stat(filepath.Join(parent, "ro")); !fi.ModTime().Equal(mtime) {
		t.Errorf("ro mtime %v, want %v", fi.ModTime(), mtime)
	}
	a, _ := os.Stat(filepath.Join(parent, "ro/file"))
	b, _ := os.Stat(filepath.Join(parent, "ro/hard"))
	if !os.SameFile(a, b) {
		t.Error("ro/hard is not a hard link of ro/file")
	}
	if got, _ := os.Readlink(filepath.Join(parent, "up")); got != "ro/../ro/file" {
		t.Errorf("symlink up -> %q", got)
	}
	if n.Load() != 4 {
		t.Errorf("counted %d bytes written, want 4", n.Load())
	}
}

// extractInto extracts data into a fresh directory target inside a fresh
// parent and returns both with the extraction's error.
func extractInto(t *testing.T, data []byte) (parent, target string, err error) {
	t.Helper()
	parent = t.TempDir()
	target = filepath.Join(parent, "target")
	if err := os.Mkdir(target, 0o755); err != nil {
		t.Fatal(err)
	}
	root, err := os.OpenRoot(target)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	var n atomic.Int64
	return parent, target, extractTar(context.Background(), hclog.NewNullLogger(), bytes.NewReader(data), root, &n)
}

// extractInSandbox extracts data into target inside a fresh parent and
// reports anything that appeared outside target or must not be inside it.
func extractInSandbox(t *testing.T, data []byte) (err error, outside string) {
	t.Helper()
	parent, target, err := extractInto(t, data)
	entries, readErr := os.ReadDir(parent)
	if readErr != nil {
		t.Fatal(readErr)
	}
	if len(entries) != 1 || entries[0].Name() != "target" {
		return err, "extraction wrote outside its target"
	}
	walkErr := filepath.WalkDir(target, func(p string, d fs.DirEntry, werr error) error {
		if werr != nil {
			return werr
		}
		if d.Type()&(fs.ModeDevice|fs.ModeNamedPipe|fs.ModeSocket|fs.ModeCharDevice) != 0 {
			outside = "special file extracted: " + p
		}
		if d.Type()&fs.ModeSymlink != 0 && resolvesOutside(target, p) {
			link, _ := os.Readlink(p)
			outside = "escaping symlink extracted: " + p + " -> " + link
		}
		return nil
	})
	if walkErr != nil {
		t.Fatal(walkErr)
	}
	return err, outside
}

// resolvesOutside follows the symlink at p on disk, component by
// component, and reports whether it leads outside root (or loops). It reads
// the file system the extraction made, not the archive.
func resolvesOutside(root, p string) bool {
	rel, err := filepath.Rel(root, p)
	if err != nil {
		return true
	}
	var at []string
	if dir := filepath.Dir(rel); dir != "." {
		at = strings.Split(dir, "/")
	}
	link, err := os.Readlink(p)
	if err != nil {
		return true
	}
	pending := strings.Split(link, "/")
	if filepath.IsAbs(link) {
		return true
	}
	for hops := 0; len(pending) > 0; {
		c := pending[0]
		pending = pending[1:]
		switch c {
		case "", ".":
			continue
		case "..":
			if len(at) == 0 {
				return true
			}
			at = at[:len(at)-1]
			continue
		}
		at = append(at, c)
		fi, err := os.Lstat(filepath.Join(append([]string{root}, at...)...))
		if err != nil || fi.Mode()&fs.ModeSymlink == 0 {
			continue
		}
		if hops++; hops > 40 {
			return true
		}
		next, err := os.Readlink(filepath.Join(append([]string{root}, at...)...))
		if err != nil || filepath.IsAbs(next) {
			return true
		}
		at = at[:len(at)-1]
		pending = append(strings.Split(next, "/"), pending...)
	}
	return false
}

func FuzzExtract(f *testing.F) {
	for _, entries := range hostileArchives {
		f.Add(hostileTar(f, entries))
	}
	for _, name := range sparseArchives {
		data, err := os.ReadFile(name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Add(hostileTar(f, []tarEntry{
		{name: "d/", typ: tar.TypeDir, mode: 0o755},
		{name: "d/f", body: "hello"},
		{name: "d/h", typ: tar.TypeLink, link: "d/f"},
		{name: "d/s", typ: tar.TypeSymlink, link: "f"},
	}))
	f.Fuzz(func(t *testing.T, data []byte) {
		err, outside := extractInSandbox(t, data)
		if outside != "" {
			t.Fatal(outside)
		}
		if err != nil && CodeOf(err) != CodeTarExtractFailed {
			t.Fatalf("error %v has code %s, want %s", err, CodeOf(err), CodeTarExtractFailed)
		}
	})
}

func TestCheckName(t *testing.T) {
	tests := []struct {
		name string
		ok   bool
	}{
		{"a", true},
		{"a/b c/ü", true},
		{"..a/b..", true},
		{"", false},
		{".", false},
		{"/a", false},
		{"..", false},
		{"a/../b", false},
		{"a/..", false},
		{"./a", false},
		{"a//b", false},
		{"a\x00b", false},
		{strings.Repeat("x", 256), false},
		{strings.Repeat("x/", 2049), false},
	}
	for _, tt := range tests {
		if err := checkName(tt.name); (err == nil) != tt.ok {
			t.Errorf("checkName(%q) = %v, want ok=%v", tt.name, err, tt.ok)
		}
	}
}

func TestLinkEscapes(t *testing.T) {
	tests := []struct {
		name, target string
		escapes      bool
	}{
		{"a", "b", false},
		{"a/b", "../c", false},
		{"a/b", "../../c", true},
		{"a", "..", true},
		{"a/b", "..", false},
		{"a", "/etc", true},
		{"a", "", true},
		{"a/b/c", "../../x/../y", false},
		{"a", "../a", true},
		{"a", "..foo", false},
	}
	for _, tt := range tests {
		if got := linkEscapes(tt.name, tt.target); got != tt.escapes {
			t.Errorf("linkEscapes(%q, %q) = %v, want %v", tt.name, tt.target, got, tt.escapes)
		}
	}
}

func TestKindOfAndTarMode(t *testing.T) {
	kinds := map[fs.FileMode]entryKind{
		0o644:                     kindFile,
		fs.ModeDir | 0o755:        kindDir,
		fs.ModeSymlink | 0o777:    kindSymlink,
		fs.ModeNamedPipe | 0o644:  kindSkip,
		fs.ModeSocket | 0o755:     kindSkip,
		fs.ModeDevice | 0o660:     kindSkip,
		fs.ModeCharDevice | 0o660: kindSkip,
		fs.ModeIrregular | 0o644:  kindSkip,
	}
	for mode, want := range kinds {
		if got := kindOf(mode); got != want {
			t.Errorf("kindOf(%v) = %v, want %v", mode, got, want)
		}
	}
	modes := map[fs.FileMode]int64{
		0o644:                              0o644,
		fs.ModeSetuid | 0o755:              0o4755,
		fs.ModeDir | fs.ModeSticky | 0o777: 0o1777,
		fs.ModeSetgid | fs.ModeDir | 0o750: 0o2750,
	}
	for mode, want := range modes {
		if got := tarMode(mode); got != want {
			t.Errorf("tarMode(%v) = %o, want %o", mode, got, want)
		}
	}
}
