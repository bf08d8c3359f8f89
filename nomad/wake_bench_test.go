package nomad

import (
	"os"
	"slices"
	"testing"
	"time"

	"github.com/codehub-io/codehub/controller"
	"github.com/codehub-io/codehub/internal/nomadtest"
	"github.com/codehub-io/codehub/internal/testenv"
)

// BenchmarkWakeToReady measures, on a real agent with raw_exec, the time
// from StartWorkspace of a stopped workspace (STANDBY, volume kept) until
// Observe reports its upstream passing its check. Observe is polled every
// 100 ms, as the controller's active interval would at best.
func BenchmarkWakeToReady(b *testing.B) {
	nomadtest.Binary(b)
	s3 := testenv.S3{Bucket: "unused"}
	bins := b.TempDir()
	nomadtest.BuildProgram(b, bins, "./testdata/wsserver", "wsserver")
	a := nomadtest.Start(b, "")
	backend := e2eBackend(b, a, bins, e2eConfig{s3: s3})
	ctx := b.Context()
	const wsID = "01jb3x7k9q2m5n8p4r6s0twake"
	if err := backend.ProvisionVolume(ctx, controller.VolumeSpec{WorkspaceID: wsID, UID: os.Getuid(), GID: os.Getgid()}); err != nil {
		b.Fatal(err)
	}
	waitObserved(b, backend, wsID, func(o controller.Observed) bool { return o.VolumeReady })
	spec := controller.WorkspaceSpec{WorkspaceID: wsID}

	var samples []time.Duration
	for b.Loop() {
		start := time.Now()
		if err := backend.StartWorkspace(ctx, spec); err != nil {
			b.Fatal(err)
		}
		waitObserved(b, backend, wsID, func(o controller.Observed) bool { return o.UpstreamReady })
		samples = append(samples, time.Since(start))

		b.StopTimer()
		if err := backend.StopWorkspace(ctx, wsID, controller.StopSave); err != nil {
			b.Fatal(err)
		}
		waitObserved(b, backend, wsID, func(o controller.Observed) bool { return !o.ContainerLive })
		b.StartTimer()
	}
	slices.Sort(samples)
	b.ReportMetric(samples[len(samples)/2].Seconds(), "p50-s")
	b.ReportMetric(samples[len(samples)*9/10].Seconds(), "p90-s")
	b.ReportMetric(samples[len(samples)-1].Seconds(), "max-s")
}

func waitObserved(tb testing.TB, backend *Backend, wsID string, cond func(controller.Observed) bool) {
	tb.Helper()
	deadline := time.Now().Add(90 * time.Second)
	for {
		snap, err := backend.Observe(tb.Context())
		if err == nil && cond(snap.Workspaces[wsID]) {
			return
		}
		if time.Now().After(deadline) {
			tb.Fatalf("workspace %s never reached the expected state (last error %v)", wsID, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
