package archive

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
)

// BenchmarkSnapshotDay replays a working day on a running home, one
// snapshot per default interval (10 min over 8 hours: 48), through the
// agent's stream and the server's store as they run, against a real S3
// server:
//
//	go test -run '^$' -bench BenchmarkSnapshotDay -benchtime 1x -timeout 30m ./archive/
//
// The home is BenchmarkIncremental's (100 MiB random, a source tree with a
// node_modules). Each interval brings what such a day brings: most a
// session's edits to 64 source files and a build output, one in six nothing (a
// meeting), one in sixteen a dependency install of 40 packages. Only the
// changes are written between snapshots, not the 10 minutes: the
// benchmark measures what a snapshot costs (time from request to commit,
// bytes written to S3) and so how far the recovery point lags. The worst
// age of an unsaved write is the interval, plus the runner's look-up tick
// (30 s at this interval), plus the snapshot's own time.
func BenchmarkSnapshotDay(b *testing.B) {
	store, src, size := devHomeStore(b)
	ctx := context.Background()
	const intervals = 48
	b.ResetTimer()
	for i := range b.N {
		op := 0
		next := func() string {
			op++
			return Key("01jbbench0000000000000000ws", fmt.Sprintf("01jc%06d%016d", i, op))
		}
		parent := ""
		var took []time.Duration
		var uploaded []int64
		var total int64
		unchanged, full := 0, 0
		for n := range intervals + 1 {
			// Interval 0 is the home as the workspace started: its first
			// snapshot (a stop archive, in practice, already holds it).
			if n > 0 {
				workday(b, src, i*intervals+n)
			}
			key := next()
			start := time.Now()
			res := snapshotPiped(b, ctx, store, src, key, parent)
			d := time.Since(start)
			if n == 0 {
				b.Logf("first snapshot: %d B in %v", res.Meta.Size, d.Round(time.Millisecond))
				parent = key
				continue
			}
			took = append(took, d)
			if res.Unchanged {
				unchanged++
				uploaded = append(uploaded, 0)
				continue
			}
			if res.Full {
				full++
			}
			bytes := res.Meta.Size + res.Meta.Manifest.Size
			if n <= 2 {
				b.Logf("snapshot %d: object %d B, manifest %d B, %d files stored", n, res.Meta.Size, res.Meta.Manifest.Size, res.Stored)
			}
			uploaded = append(uploaded, bytes)
			total += bytes
			parent = key
		}
		slices.Sort(took)
		slices.Sort(uploaded)
		b.Logf("%d snapshots: %d unchanged, %d complete (chain limit); time p50 %v, max %v; bytes p50 %d, max %d, day total %d (home: %d)",
			intervals, unchanged, full, took[len(took)/2].Round(time.Millisecond), took[len(took)-1].Round(time.Millisecond),
			uploaded[len(uploaded)/2], uploaded[len(uploaded)-1], total, size)
		b.ReportMetric(took[len(took)/2].Seconds(), "snapshot-p50-s")
		b.ReportMetric(took[len(took)-1].Seconds(), "snapshot-max-s")
		b.ReportMetric(float64(uploaded[len(uploaded)/2]), "snapshot-p50-B")
		b.ReportMetric(float64(total), "day-B")
		b.ReportMetric((10*time.Minute + 30*time.Second + took[len(took)-1]).Minutes(), "recovery-point-max-min")
	}
}

// workday applies interval n's changes to the home.
func workday(b *testing.B, home string, n int) {
	b.Helper()
	switch {
	case n%6 == 5:
	case n%16 == 8:
		rng := rand.New(rand.NewPCG(31, uint64(n)))
		text := textPool(rng, 4<<20)
		for p := range 40 {
			dir := filepath.Join(home, "project", "node_modules", fmt.Sprintf("new-%03d-%02d", n, p))
			for f := range 60 {
				name := filepath.Join(dir, "lib", fmt.Sprintf("f%d.js", f))
				if err := os.MkdirAll(filepath.Dir(name), 0o755); err != nil {
					b.Fatal(err)
				}
				off := rng.IntN(len(text) - 4<<10)
				if err := os.WriteFile(name, text[off:off+2<<10+rng.IntN(2<<10)], 0o644); err != nil {
					b.Fatal(err)
				}
			}
		}
	default:
		editSources(b, home, n)
	}
}

// editSources is a session's edits: 64 source files of the checkout
// rewritten with a few KiB changed each, and the 512 KiB build output
// built again.
func editSources(b *testing.B, home string, n int) {
	b.Helper()
	rng := rand.New(rand.NewPCG(37, uint64(n)))
	text := textPool(rng, 1<<20)
	for range 64 {
		i := rng.IntN(1500)
		name := filepath.Join(home, "project", "src", fmt.Sprintf("m%02d/p%02d/f%04d.ts", i%30, i%7, i))
		old, err := os.ReadFile(name)
		if err != nil {
			b.Fatal(err)
		}
		at := rng.IntN(len(old))
		edit := text[rng.IntN(len(text)-4<<10):][:1<<10+rng.IntN(3<<10)]
		changed := append(append(slices.Clone(old[:at]), edit...), old[min(len(old), at+len(edit)):]...)
		if err := os.WriteFile(name, changed, 0o644); err != nil {
			b.Fatal(err)
		}
	}
	name := filepath.Join(home, "project", "dist", "bundle.js")
	if err := os.MkdirAll(filepath.Dir(name), 0o755); err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(name, text[512<<10:], 0o644); err != nil {
		b.Fatal(err)
	}
}

// snapshotPiped streams the agent's side into the server's through a pipe,
// as the network between them does.
func snapshotPiped(b *testing.B, ctx context.Context, store *Store, src, key, parent string) SnapshotResult {
	b.Helper()
	req := store.SnapshotRequestFor(ctx, key, parent)
	pr, pw := io.Pipe()
	go func() {
		pw.CloseWithError(WriteSnapshot(ctx, hclog.NewNullLogger(), src, req, pw))
	}()
	res, err := store.StoreSnapshot(ctx, req, pr)
	pr.Close()
	if err != nil {
		b.Fatalf("snapshot %s: %v", key, err)
	}
	return res
}
