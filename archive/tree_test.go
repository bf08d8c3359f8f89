package archive

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// writeRandom writes size pseudo-random (incompressible) bytes to name.
func writeRandom(t testing.TB, name string, size int64, seed uint64) {
	t.Helper()
	f, err := os.Create(name)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var key [32]byte
	key[0] = byte(seed)
	key[1] = byte(seed >> 8)
	if _, err := io.CopyN(f, rand.NewChaCha8(key), size); err != nil {
		t.Fatal(err)
	}
}

func mustWrite(t testing.TB, name, content string, mode fs.FileMode) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(name), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(name, []byte(content), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(name, mode); err != nil {
		t.Fatal(err)
	}
}

// makeTree builds a home with every kind of entry the archive keeps or
// skips, plus bigBytes of incompressible data.
func makeTree(t testing.TB, dir string, bigBytes int64) {
	t.Helper()
	mustWrite(t, filepath.Join(dir, "README.md"), "# hello\n", 0o644)
	mustWrite(t, filepath.Join(dir, "bin", "run.sh"), "#!/bin/sh\necho hi\n", 0o755)
	mustWrite(t, filepath.Join(dir, ".ssh", "id_ed25519"), "secret\n", 0o600)
	mustWrite(t, filepath.Join(dir, "with space", "ünïcødé 文件.txt"), "odd names\n", 0o644)
	mustWrite(t, filepath.Join(dir, "quote\"and=equals", "tab\tname"), "more odd names\n", 0o640)
	mustWrite(t, filepath.Join(dir, "readonly.txt"), "do not touch\n", 0o444)
	mustWrite(t, filepath.Join(dir, "empty-file"), "", 0o644)
	for i := range 200 {
		mustWrite(t, filepath.Join(dir, "src", fmt.Sprintf("pkg%02d", i%10), fmt.Sprintf("file%03d.go", i)),
			fmt.Sprintf("package pkg\n\nconst N%d = %d\n", i, i), 0o644)
	}
	for _, d := range []string{"empty-dir", "nested/empty/dirs"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// A read-only directory with content, as Go's module cache has.
	mustWrite(t, filepath.Join(dir, "go", "pkg", "mod", "m@v1", "m.go"), "package m\n", 0o444)
	if err := os.Chmod(filepath.Join(dir, "go", "pkg", "mod", "m@v1"), 0o555); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, "sticky"), 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Join(dir, "sticky"), 0o1777); err != nil {
		t.Fatal(err)
	}
	links := map[string]string{
		"link-to-readme":   "README.md",
		"bin/up":           "../README.md",
		"link-to-dir":      "src/pkg01",
		"dangling-inside":  "not-there-yet",
		"with space/ünï ↗": "ünïcødé 文件.txt",
	}
	for name, target := range links {
		if err := os.Symlink(target, filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Link(filepath.Join(dir, "README.md"), filepath.Join(dir, "src", "README.hardlink")); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(filepath.Join(dir, "README.md"), filepath.Join(dir, "with space", "README also")); err != nil {
		t.Fatal(err)
	}
	if bigBytes > 0 {
		if err := os.MkdirAll(filepath.Join(dir, "data"), 0o755); err != nil {
			t.Fatal(err)
		}
		third := bigBytes / 3
		for i := range 3 {
			writeRandom(t, filepath.Join(dir, "data", fmt.Sprintf("blob%d.bin", i)), third+int64(i), uint64(i+1))
		}
	}
	// Skipped by the archive: a fifo and symlinks leaving the home.
	if err := syscall.Mkfifo(filepath.Join(dir, "a-fifo"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/etc/passwd", filepath.Join(dir, "abs-link")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("../../outside", filepath.Join(dir, "bin", "escape")); err != nil {
		t.Fatal(err)
	}
	// Distinct nanosecond mtimes, set last (children change dir mtimes).
	base := time.Date(2024, 2, 29, 12, 34, 56, 123456789, time.UTC)
	i := 0
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.Type()&fs.ModeSymlink != 0 || p == dir {
			return err
		}
		i++
		mt := base.Add(time.Duration(i) * 1001 * time.Microsecond)
		return os.Chtimes(p, mt, mt)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// skippedByArchive lists what makeTree adds that an archive must not keep.
var skippedByArchive = []string{"a-fifo", "abs-link", "bin/escape"}

// snapshot describes every entry below dir: type, mode, mtime, content hash
// or link target, and which names share an inode.
func snapshot(t testing.TB, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	inodes := map[uint64]string{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		if rel == "." {
			return nil
		}
		fi, err := os.Lstat(p)
		if err != nil {
			return err
		}
		desc := fi.Mode().String()
		switch {
		case fi.Mode()&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			desc += " -> " + target
		case fi.Mode().IsRegular():
			sum, err := fileSHA(p)
			if err != nil {
				return err
			}
			st := fi.Sys().(*syscall.Stat_t)
			group, seen := inodes[st.Ino]
			if !seen {
				group = rel
				inodes[st.Ino] = rel
			}
			desc += fmt.Sprintf(" size=%d sha=%s inode-of=%s mtime=%d", fi.Size(), sum, group, fi.ModTime().UnixNano())
		case fi.IsDir():
			desc += fmt.Sprintf(" mtime=%d", fi.ModTime().UnixNano())
		}
		out[rel] = desc
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func fileSHA(p string) (string, error) {
	f, err := os.Open(p)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil))[:16], nil
}

// expectedSnapshot is the snapshot of src as a restore must reproduce it.
func expectedSnapshot(t testing.TB, src string) map[string]string {
	t.Helper()
	want := snapshot(t, src)
	for _, name := range skippedByArchive {
		delete(want, name)
	}
	return want
}

func compareTrees(t testing.TB, want, got map[string]string) {
	t.Helper()
	for name, w := range want {
		if g, ok := got[name]; !ok {
			t.Errorf("missing %q (%s)", name, w)
		} else if g != w {
			t.Errorf("%q differs:\n got %s\nwant %s", name, g, w)
		}
	}
	for name, g := range got {
		if _, ok := want[name]; !ok {
			t.Errorf("unexpected %q (%s)", name, g)
		}
	}
}
