package archive

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/klauspost/compress/zstd"
	"github.com/restic/chunker"

	"github.com/codehub-io/codehub/internal/testenv"
)

// BenchmarkIncremental measures what one stop uploads with and without a
// parent, on a home of 100 MiB of random bytes plus a source checkout with
// a node_modules of many small files, after each of a few typical changes:
//
//	go test -run '^$' -bench BenchmarkIncremental -benchtime 1x -timeout 20m ./archive/
//
// For each change it archives the home three ways against a real S3
// server and reports bytes and time: complete (as every archive was before
// parents), incremental on the archive before the change, and, for
// comparison, what content-defined chunking as restic does it (its chunker,
// its 512 KiB-8 MiB chunks) would upload: the compressed chunks not stored
// yet, an index entry per chunk and a tree record per changed directory.
func BenchmarkIncremental(b *testing.B) {
	store, src, _ := devHomeStore(b)
	ctx := context.Background()
	changes := []struct {
		name  string
		apply func(b *testing.B, home string, round int)
	}{
		{"1MiB-over-65-files", changeOneMiB},
		{"1KiB-append-to-50MiB", func(b *testing.B, home string, round int) {
			appendTo(b, filepath.Join(home, "data", "vm.img"), bytes.Repeat([]byte{byte('a' + round)}, 1<<10))
		}},
		{"1MiB-inside-10MiB", func(b *testing.B, home string, round int) {
			f, err := os.OpenFile(filepath.Join(home, "data", "r2.bin"), os.O_WRONLY, 0)
			if err != nil {
				b.Fatal(err)
			}
			defer f.Close()
			if _, err := f.WriteAt(bytes.Repeat([]byte{byte('a' + round)}, 1<<20), 4<<20); err != nil {
				b.Fatal(err)
			}
		}},
	}
	b.ResetTimer()
	for i := range b.N {
		op := 0
		next := func() string { op++; return Key("01jbbench0000000000000000ws", fmt.Sprintf("01jb%06d%016d", i, op)) }
		parent := next()
		if _, err := store.Archive(ctx, src, parent, nil); err != nil {
			b.Fatal(err)
		}
		seen, err := chunkSet(src, nil)
		if err != nil {
			b.Fatal(err)
		}
		for _, c := range changes {
			c.apply(b, src, i)
			fullKey, incrKey := next(), next()
			start := time.Now()
			full, err := store.Archive(ctx, src, fullKey, nil)
			if err != nil {
				b.Fatal(err)
			}
			fullTime := time.Since(start)
			start = time.Now()
			var log bytes.Buffer
			incr, err := store.ArchiveFrom(ctx, src, incrKey, parent, &log)
			if err != nil {
				b.Fatal(err)
			}
			incrTime := time.Since(start)
			if !incr.Incremental() {
				b.Fatalf("%s: archive on %s is not incremental:\n%s", c.name, parent, log.String())
			}
			start = time.Now()
			cdc, err := cdcUpload(src, seen)
			if err != nil {
				b.Fatal(err)
			}
			cdcTime := time.Since(start)
			b.Logf("%s: complete %d B object + %d B manifest in %v; incremental %d B object + %d B manifest in %v; "+
				"chunking: %d B (%d new chunks of %d B compressed, index %d B, trees %d B), chunked in %v",
				c.name, full.Size, full.Manifest.Size, fullTime.Round(time.Millisecond),
				incr.Size, incr.Manifest.Size, incrTime.Round(time.Millisecond),
				cdc.total(), cdc.chunks, cdc.data, cdc.index, cdc.trees, cdcTime.Round(time.Millisecond))
			b.Logf("%s: incremental plan %s", c.name, bytes.TrimSpace(log.Bytes()[bytes.Index(log.Bytes(), []byte("STEP=plan")):bytes.Index(log.Bytes(), []byte("\nSTEP=upload"))]))
			b.ReportMetric(float64(full.Size+full.Manifest.Size), c.name+"-complete-B")
			b.ReportMetric(float64(incr.Size+incr.Manifest.Size), c.name+"-incremental-B")
			b.ReportMetric(float64(cdc.total()), c.name+"-chunked-B")
			parent = incrKey
		}
	}
}

// devHomeStore gives a benchmark a store on a real S3 server and the
// home makeDevHome writes, with its size.
func devHomeStore(b *testing.B) (store *Store, home string, size int64) {
	b.Helper()
	s3 := testenv.NewS3(b)
	store = NewStore(hclog.NewNullLogger(), s3.Client, s3.Bucket)
	home = filepath.Join(b.TempDir(), "home")
	files, size := makeDevHome(b, home)
	b.Logf("home: %d regular files, %d bytes", files, size)
	return store, home, size
}

// makeDevHome writes the benchmark's home: data/ with 100 MiB of random
// bytes (a 50 MiB disk image and five 10 MiB files), and project/, a
// source checkout of 1 500 text files of 1-16 KiB with a node_modules of
// 300 packages of 40-80 small files each (a package.json, a LICENSE the
// same in all, a README and sources of 200 B-6 KiB).
func makeDevHome(b *testing.B, home string) (files int, total int64) {
	b.Helper()
	rng := rand.New(rand.NewPCG(27, 1))
	text := textPool(rng, 16<<20)
	write := func(name string, data []byte) {
		name = filepath.Join(home, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(name), 0o755); err != nil {
			b.Fatal(err)
		}
		if err := os.WriteFile(name, data, 0o644); err != nil {
			b.Fatal(err)
		}
		files++
		total += int64(len(data))
	}
	snippet := func(lo, hi int) []byte {
		n := lo + rng.IntN(hi-lo)
		off := rng.IntN(len(text) - n)
		return text[off : off+n]
	}
	if err := os.MkdirAll(filepath.Join(home, "data"), 0o755); err != nil {
		b.Fatal(err)
	}
	writeRandom(b, filepath.Join(home, "data", "vm.img"), 50<<20, 100)
	for i := range 5 {
		writeRandom(b, filepath.Join(home, "data", fmt.Sprintf("r%d.bin", i)), 10<<20, uint64(101+i))
	}
	files, total = 6, 100<<20
	for i := range 1500 {
		write(fmt.Sprintf("project/src/m%02d/p%02d/f%04d.ts", i%30, i%7, i), snippet(1<<10, 16<<10))
	}
	license := snippet(1000, 1100)
	for p := range 300 {
		dir := fmt.Sprintf("project/node_modules/pkg-%03d", p)
		write(dir+"/package.json", fmt.Appendf(nil, `{"name":"pkg-%03d","version":"1.%d.0"}`, p, p%10))
		write(dir+"/LICENSE", license)
		write(dir+"/README.md", snippet(500, 3000))
		for f := range 40 + rng.IntN(40) {
			write(fmt.Sprintf("%s/lib/%d/f%d.js", dir, f%5, f), snippet(200, 6<<10))
		}
	}
	return files, total
}

// changeOneMiB edits 64 source files by appending 8 KiB each and adds a
// 512 KiB build output: 1 MiB of changes, as a working session leaves.
func changeOneMiB(b *testing.B, home string, round int) {
	b.Helper()
	rng := rand.New(rand.NewPCG(27, uint64(2+round)))
	text := textPool(rng, 1<<20)
	for i := range 64 {
		appendTo(b, filepath.Join(home, "project", "src", fmt.Sprintf("m%02d/p%02d/f%04d.ts", (i*23)%30, (i*23)%7, i*23)), text[i<<13:(i+1)<<13])
	}
	name := filepath.Join(home, "project", "dist", "bundle.js")
	if err := os.MkdirAll(filepath.Dir(name), 0o755); err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(name, text[512<<10:], 0o644); err != nil {
		b.Fatal(err)
	}
}

func appendTo(b *testing.B, name string, data []byte) {
	b.Helper()
	f, err := os.OpenFile(name, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Write(data); err != nil {
		b.Fatal(err)
	}
}

// benchPol is a fixed irreducible polynomial for the chunker (a restic
// repository draws its own at random).
const benchPol = chunker.Pol(0x3DA3358B4DC173)

type cdcCost struct {
	chunks             int
	data, index, trees int64
	changedDirs        map[string]bool
}

func (c cdcCost) total() int64 { return c.data + c.index + c.trees }

// restic's JSON index entry (id, offset, length, uncompressed length) and
// its tree node of a file (name, type, mode, times, ids, owner, inode,
// content ids) are each about this size, before compression (counted
// uncompressed: an upper bound).
const (
	cdcIndexEntryBytes = 100
	cdcTreeNodeBytes   = 300
)

// chunkSet returns the ids of every chunk of the files below root, adding
// to seen (nil: a new set).
func chunkSet(root string, seen map[[32]byte]bool) (map[[32]byte]bool, error) {
	if seen == nil {
		seen = map[[32]byte]bool{}
	}
	buf := make([]byte, chunker.MaxSize)
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		return eachChunk(p, buf, func(data []byte) { seen[sha256.Sum256(data)] = true })
	})
	return seen, err
}

func eachChunk(name string, buf []byte, f func([]byte)) error {
	file, err := os.Open(name)
	if err != nil {
		return err
	}
	defer file.Close()
	ch := chunker.New(file, benchPol)
	for {
		c, err := ch.Next(buf)
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		f(c.Data)
	}
}

// cdcUpload chunks every file below root and counts what a chunking backup
// on a repository holding seen would upload: each new chunk compressed
// with zstd, an index entry per new chunk, and a tree node for every entry
// of every directory that holds a changed file or one of them (the tree
// objects up to the root are written anew). New chunks are added to seen.
func cdcUpload(root string, seen map[[32]byte]bool) (cdcCost, error) {
	enc, err := zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedDefault), zstd.WithEncoderConcurrency(1))
	if err != nil {
		return cdcCost{}, err
	}
	c := cdcCost{changedDirs: map[string]bool{}}
	buf := make([]byte, chunker.MaxSize)
	var out []byte
	err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		return eachChunk(p, buf, func(data []byte) {
			id := sha256.Sum256(data)
			if seen[id] {
				return
			}
			seen[id] = true
			out = enc.EncodeAll(data, out[:0])
			c.chunks++
			c.data += int64(len(out))
			c.index += cdcIndexEntryBytes
			for dir := filepath.Dir(p); ; dir = filepath.Dir(dir) {
				c.changedDirs[dir] = true
				if dir == root || dir == "/" {
					break
				}
			}
		})
	})
	if err != nil {
		return c, err
	}
	for dir := range c.changedDirs {
		entries, err := os.ReadDir(dir)
		if err != nil {
			return c, err
		}
		c.trees += int64(len(entries)) * cdcTreeNodeBytes
	}
	return c, nil
}
