package archive

import (
	"context"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/minio/minio-go/v7"

	"github.com/codehub-io/codehub/internal/testenv"
)

// BenchmarkDataMover compares `codehub job archive|restore` (the real
// binary, built first, so the peak RSS measured is its alone) with tar and
// zstd from the system plus an upload or download of the file, on one tree
// of many small files and a few large ones. Run it with
//
//	go test -run '^$' -bench BenchmarkDataMover -benchtime 1x -timeout 30m ./archive/
//
// CODEHUB_BENCH_TREE_MIB sets the tree size (default 1024).
func BenchmarkDataMover(b *testing.B) {
	for _, tool := range []string{"tar", "zstd", "/usr/bin/time"} {
		if _, err := exec.LookPath(tool); err != nil {
			b.Skipf("%s not on PATH", tool)
		}
	}
	treeMiB := int64(1024)
	if v := os.Getenv("CODEHUB_BENCH_TREE_MIB"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			b.Fatalf("CODEHUB_BENCH_TREE_MIB: %v", err)
		}
		treeMiB = n
	}
	s3 := testenv.NewS3(b)
	store := NewStore(hclog.NewNullLogger(), s3.Client, s3.Bucket)
	work := b.TempDir()
	bin := filepath.Join(work, "codehub")
	if out, err := exec.Command("go", "build", "-o", bin, "../cmd/codehub").CombinedOutput(); err != nil {
		b.Fatalf("build codehub: %v\n%s", err, out)
	}
	src := filepath.Join(work, "src")
	files, size := makeBenchTree(b, src, treeMiB<<20)
	b.Logf("tree: %d regular files, %d bytes", files, size)
	ctx := context.Background()
	file := filepath.Join(work, "baseline.tar.zst")
	var r benchResult

	b.ResetTimer()
	for i := range b.N {
		before := r
		baseline := func() string {
			r.add(&r.baseCompress, measure(b, shell("tar -cf - -C "+src+" . | zstd -3 -T1 -q -f -o "+file)))
			r.baseUpload += timed(b, func() error {
				_, err := s3.Client.FPutObject(ctx, s3.Bucket, "baseline.tar.zst", file, minio.PutObjectOptions{})
				return err
			})
			r.baseDownload += timed(b, func() error {
				return s3.Client.FGetObject(ctx, s3.Bucket, "baseline.tar.zst", file, minio.GetObjectOptions{})
			})
			dst := mkdir(b, work, fmt.Sprint("baseline-restore-", i))
			r.add(&r.baseExtract, measure(b, shell("zstd -d -q -c "+file+" | tar -x -C "+dst)))
			return dst
		}
		ours := func() string {
			if err := store.Delete(ctx, testKey); err != nil {
				b.Fatal(err)
			}
			r.add(&r.archive, measure(b, jobCmd(bin, s3, "archive", "--src", src)))
			dst := mkdir(b, work, fmt.Sprint("restore-", i))
			r.add(&r.restore, measure(b, jobCmd(bin, s3, "restore", "--dst", dst)))
			return dst
		}
		// Alternate who goes first: the machine is shared and its load drifts.
		var baseDst, dst string
		if i%2 == 0 {
			baseDst, dst = baseline(), ours()
		} else {
			dst, baseDst = ours(), baseline()
		}
		for _, d := range []string{baseDst, dst} {
			if gotFiles, gotSize := treeSize(b, d); gotFiles != files || gotSize != size {
				b.Fatalf("%s: restored %d files, %d bytes; want %d, %d", d, gotFiles, gotSize, files, size)
			}
		}
		meta, err := store.Stat(ctx, testKey)
		if err != nil {
			b.Fatal(err)
		}
		r.objectSize = meta.Size
		r.logIteration(b, i, before)
		// The restored trees stay until the benchmark ends: on ext4
		// without a journal (this machine's disk) inodes freed in the last
		// minute are skipped when allocating, so an extraction that follows
		// the removal of 30 000 files spends seconds scanning past them.
		// That would time the file system's reaction to the benchmark's own
		// cleanup, differently for whichever side runs first.
	}
	b.StopTimer()
	r.report(b, size)
}

// measurement is the wall time and peak RSS (KiB) of one child process
// tree; for a pipeline, the RSS of its largest process.
type measurement struct {
	wall   time.Duration
	cpu    time.Duration // user + system
	rssKiB int64
}

type benchResult struct {
	baseCompress, baseExtract, archive, restore measurement
	baseUpload, baseDownload                    time.Duration
	objectSize                                  int64
}

func (r *benchResult) add(to *measurement, m measurement) {
	to.wall += m.wall
	to.cpu += m.cpu
	to.rssKiB = max(to.rssKiB, m.rssKiB)
}

// jobCmd runs `codehub job` as the batch jobs do, configured by environment.
func jobCmd(bin string, s3 testenv.S3, args ...string) *exec.Cmd {
	cmd := exec.Command(bin, append([]string{"job"}, args...)...)
	cmd.Env = append(os.Environ(),
		"ARCHIVE_URL=s3://"+s3.Bucket+"/"+testKey,
		"S3_ENDPOINT="+s3.Endpoint,
		"S3_ACCESS_KEY="+s3.AccessKey,
		"S3_SECRET_KEY="+s3.SecretKey,
		"S3_REGION="+s3.Region,
	)
	return cmd
}

func shell(script string) *exec.Cmd {
	return exec.Command("sh", "-c", "set -e; "+script)
}

// measure runs cmd under /usr/bin/time, which reports the peak RSS of the
// command alone; the benchmark's own rusage would not do: a child's maxrss
// starts from the RSS of the process that forked it.
func measure(b *testing.B, cmd *exec.Cmd) measurement {
	b.Helper()
	rssFile := filepath.Join(b.TempDir(), "rss")
	timedCmd := exec.Command("/usr/bin/time", append([]string{"-f", "%M %U %S", "-o", rssFile}, cmd.Args...)...)
	timedCmd.Env = cmd.Env
	var out strings.Builder
	timedCmd.Stdout, timedCmd.Stderr = &out, &out
	settle()
	start := time.Now()
	if err := timedCmd.Run(); err != nil {
		b.Fatalf("%s: %v\n%s", cmd, err, out.String())
	}
	wall := time.Since(start)
	raw, err := os.ReadFile(rssFile)
	if err != nil {
		b.Fatal(err)
	}
	var m measurement
	var user, sys float64
	if _, err := fmt.Sscanf(string(raw), "%d %f %f", &m.rssKiB, &user, &sys); err != nil {
		b.Fatalf("parse /usr/bin/time output %q: %v", raw, err)
	}
	m.wall = wall
	m.cpu = time.Duration((user + sys) * float64(time.Second))
	return m
}

func timed(b *testing.B, f func() error) time.Duration {
	b.Helper()
	settle()
	start := time.Now()
	if err := f(); err != nil {
		b.Fatal(err)
	}
	return time.Since(start)
}

// settle flushes dirty pages so that a step does not pay for the
// write-back of the one before it.
func settle() { syscall.Sync() }

func mkdir(b *testing.B, parent, name string) string {
	b.Helper()
	dir := filepath.Join(parent, name)
	if err := os.Mkdir(dir, 0o755); err != nil {
		b.Fatal(err)
	}
	return dir
}

// logIteration logs the times of iteration i alone: r less before.
func (r *benchResult) logIteration(b *testing.B, i int, before benchResult) {
	since := func(now, then measurement) string {
		return fmt.Sprintf("%s (CPU %s)", (now.wall - then.wall).Round(10*time.Millisecond), (now.cpu - then.cpu).Round(10*time.Millisecond))
	}
	upload, download := r.baseUpload-before.baseUpload, r.baseDownload-before.baseDownload
	baseArchive := r.baseCompress.wall - before.baseCompress.wall + upload
	baseRestore := download + r.baseExtract.wall - before.baseExtract.wall
	archive, restore := r.archive.wall-before.archive.wall, r.restore.wall-before.restore.wall
	b.Logf("iteration %d: baseline archive %s + upload %s; codehub archive %s: %.2fx; "+
		"baseline restore: download %s + extract %s; codehub restore %s: %.2fx",
		i+1, since(r.baseCompress, before.baseCompress), upload.Round(10*time.Millisecond), since(r.archive, before.archive),
		baseArchive.Seconds()/archive.Seconds(),
		download.Round(10*time.Millisecond), since(r.baseExtract, before.baseExtract), since(r.restore, before.restore),
		baseRestore.Seconds()/restore.Seconds())
}

func (r *benchResult) report(b *testing.B, treeBytes int64) {
	n := time.Duration(b.N)
	rate := func(d time.Duration) float64 { return float64(treeBytes) / 1e6 / (d / n).Seconds() }
	baseArchive := r.baseCompress.wall + r.baseUpload
	baseRestore := r.baseDownload + r.baseExtract.wall
	b.ReportMetric(rate(r.archive.wall), "archive-MB/s")
	b.ReportMetric(rate(r.restore.wall), "restore-MB/s")
	b.ReportMetric(baseArchive.Seconds()/r.archive.wall.Seconds(), "archive/baseline")
	b.ReportMetric(r.baseExtract.wall.Seconds()/r.restore.wall.Seconds(), "restore/extract-only")
	b.ReportMetric(baseRestore.Seconds()/r.restore.wall.Seconds(), "restore/baseline")
	b.ReportMetric(float64(r.archive.rssKiB)/1024, "archive-RSS-MiB")
	b.ReportMetric(float64(r.restore.rssKiB)/1024, "restore-RSS-MiB")
	per := func(d time.Duration) string { return (d / n).Round(10 * time.Millisecond).String() }
	b.Logf("archive object: %d bytes (%.1f%% of the tree)", r.objectSize, 100*float64(r.objectSize)/float64(treeBytes))
	b.Logf("baseline archive: tar | zstd -3 -T1 %s (CPU %s, peak RSS %d KiB) + upload %s = %s",
		per(r.baseCompress.wall), per(r.baseCompress.cpu), r.baseCompress.rssKiB, per(r.baseUpload), per(baseArchive))
	b.Logf("codehub archive: %s (CPU %s, peak RSS %d KiB)", per(r.archive.wall), per(r.archive.cpu), r.archive.rssKiB)
	b.Logf("baseline restore: download %s + zstd -d | tar -x %s (CPU %s, peak RSS %d KiB) = %s",
		per(r.baseDownload), per(r.baseExtract.wall), per(r.baseExtract.cpu), r.baseExtract.rssKiB, per(baseRestore))
	b.Logf("codehub restore: %s (CPU %s, peak RSS %d KiB)", per(r.restore.wall), per(r.restore.cpu), r.restore.rssKiB)
}

// makeBenchTree writes about size bytes: three quarters in four large files
// (two incompressible, two text-like), the rest in small text-like files of
// 1-16 KiB spread over nested directories, the shape of a developer home.
func makeBenchTree(b *testing.B, dir string, size int64) (files int, total int64) {
	b.Helper()
	rng := rand.New(rand.NewPCG(1, 2))
	text := textPool(rng, 64<<20)
	large := size * 3 / 4 / 4
	for i := range 4 {
		name := filepath.Join(dir, "large", fmt.Sprintf("big-%d.bin", i))
		if err := os.MkdirAll(filepath.Dir(name), 0o755); err != nil {
			b.Fatal(err)
		}
		if i < 2 {
			writeRandom(b, name, large, uint64(i+10))
		} else {
			writeText(b, name, text, rng, large)
		}
		files++
		total += large
	}
	for total < size {
		n := min(int64(1<<10+rng.IntN(15<<10)), size-total)
		name := filepath.Join(dir, "src", fmt.Sprintf("d%02d", rng.IntN(40)), fmt.Sprintf("m%02d", rng.IntN(40)), fmt.Sprintf("f%06d.txt", files))
		if err := os.MkdirAll(filepath.Dir(name), 0o755); err != nil {
			b.Fatal(err)
		}
		off := rng.Int64N(int64(len(text)) - n)
		if err := os.WriteFile(name, text[off:off+n], 0o644); err != nil {
			b.Fatal(err)
		}
		files++
		total += n
	}
	return files, total
}

// textPool returns size bytes of random words: compressible like source
// code, but with no long repeats for zstd to find across files.
func textPool(rng *rand.Rand, size int) []byte {
	words := make([]string, 4096)
	for i := range words {
		w := make([]byte, 2+rng.IntN(10))
		for j := range w {
			w[j] = byte('a' + rng.IntN(26))
		}
		words[i] = string(w)
	}
	buf := make([]byte, 0, size+64)
	for len(buf) < size {
		buf = append(buf, words[rng.IntN(len(words))]...)
		if rng.IntN(12) == 0 {
			buf = append(buf, '\n')
		} else {
			buf = append(buf, ' ')
		}
	}
	return buf[:size]
}

func writeText(b *testing.B, name string, pool []byte, rng *rand.Rand, size int64) {
	b.Helper()
	f, err := os.Create(name)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	for written := int64(0); written < size; {
		n := min(int64(1<<20), size-written)
		off := rng.Int64N(int64(len(pool)) - n)
		if _, err := f.Write(pool[off : off+n]); err != nil {
			b.Fatal(err)
		}
		written += n
	}
}

func treeSize(b *testing.B, dir string) (files int, total int64) {
	b.Helper()
	err := filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		files++
		total += fi.Size()
		return nil
	})
	if err != nil {
		b.Fatal(err)
	}
	return files, total
}
