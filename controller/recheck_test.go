package controller

import (
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/codehub-io/codehub/archive"
	"github.com/codehub-io/codehub/workspace"
)

// TestRecheckCoversTime holds Recheck to what an incremental pass relies
// on: a workspace with no operation whose plan at now leaves it as it is
// gets the same plan at every later time before Recheck, as long as its
// row and observation stay the same. Rows and observations are random; each
// row is first brought to what the controller would store (plans applied
// until they write nothing), as a pass finds it after its own writes.
func TestRecheckCoversTime(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 31))
	cfg := testCfg
	cfg.BackupInterval = 6 * time.Hour
	settled, timed := 0, 0
	for i := range 20000 {
		now := t0.Add(time.Duration(rng.IntN(48*3600)) * time.Second)
		w, obs := randomIdle(rng, now), randomObserved(rng)
		w, ok := storedFixpoint(w, obs, now, cfg)
		if !ok {
			continue
		}
		settled++
		recheck := Recheck(w, now, cfg)
		horizon := now.Add(30 * 24 * time.Hour)
		if !recheck.IsZero() {
			timed++
			horizon = recheck
		}
		span := horizon.Sub(now)
		for _, later := range []time.Duration{time.Nanosecond, time.Second, time.Duration(rng.Int64N(int64(span))), span - time.Nanosecond} {
			if later >= span {
				continue
			}
			at := now.Add(later)
			if a := Plan(w, obs, ArchiveCheck{}, at, cfg); a.Write || len(a.Steps) > 0 {
				t.Fatalf("case %d: settled at %s with recheck %v, but at %s the plan writes %v and runs %v\nrow: %+v\nobserved: %+v",
					i, now, recheck, at, a.Write, a.Steps, w, obs)
			}
		}
	}
	// The property is only worth what it covered.
	if settled < 1000 || timed < 200 {
		t.Fatalf("only %d settled rows, %d of them with a recheck time: the generator misses the cases that matter", settled, timed)
	}
	t.Logf("%d settled rows, %d with a recheck time", settled, timed)
}

// storedFixpoint applies w's plans that only write until one leaves it as
// it is; false when a plan has steps, an operation or an archive to check
// (a pass judges those every time).
func storedFixpoint(w workspace.Workspace, obs Observed, now time.Time, cfg Config) (workspace.Workspace, bool) {
	for range 4 {
		if needsArchiveCheck(w, obs) != "" {
			return w, false
		}
		a := Plan(w, obs, ArchiveCheck{}, now, cfg)
		if len(a.Steps) > 0 || a.Next.Operation != workspace.OpNone {
			return w, false
		}
		if !a.Write {
			return w, true
		}
		w = a.Next
	}
	return w, false
}

func randomIdle(rng *rand.Rand, now time.Time) workspace.Workspace {
	pick := func(s ...string) string { return s[rng.IntN(len(s))] }
	w := workspace.Workspace{
		ID:           wsID,
		DesiredState: []workspace.DesiredState{workspace.DesiredRunning, workspace.DesiredStandby, workspace.DesiredArchived}[rng.IntN(3)],
		Operation:    workspace.OpNone,
		RunID:        pick("", "run1", "run2"),
		ArchiveRunID: pick("", "run1"),
		CreatedAt:    now.Add(-72 * time.Hour),
	}
	if rng.IntN(3) > 0 {
		made := now.Add(-time.Duration(rng.IntN(12*3600)) * time.Second)
		op := strings.ToLower(ulid.MustNew(ulid.Timestamp(made), rand.NewChaCha8([32]byte{byte(rng.IntN(256))})).String())
		key := archive.Key(w.ID, op)
		w.ArchiveKey = &key
		if rng.IntN(2) == 0 {
			w.RestoreMarker = &key
		}
	}
	if rng.IntN(4) == 0 {
		w.ErrorCount = 1 + rng.IntN(workspace.MaxErrorCount)
		reason, msg := workspace.ReasonStartFailed, "failed"
		w.ErrorReason, w.ErrorMessage = &reason, &msg
		next := now.Add(time.Duration(rng.IntN(1200)-300) * time.Second)
		w.NextAttemptAt = &next
	}
	return w
}

func randomObserved(rng *rand.Rand) Observed {
	coin := func() bool { return rng.IntN(2) == 0 }
	obs := Observed{VolumeExists: coin()}
	if obs.VolumeExists {
		obs.VolumeID, obs.NodeID, obs.Node = "vol-1", "node-1", "n1"
		obs.VolumeReady = rng.IntN(4) > 0
		obs.ContainerLive = obs.VolumeReady && coin()
		obs.UpstreamReady = obs.ContainerLive && coin()
		switch rng.IntN(8) {
		case 0:
			obs.NodeAway, obs.VolumeReady, obs.ContainerLive, obs.UpstreamReady = workspace.ReasonNodeDown, false, false, false
		case 1:
			obs.NodeAway, obs.NodeDraining = workspace.ReasonNodeIneligible, true
		case 2:
			obs.Evacuating = true
			obs.Move = coin()
		}
	}
	job := func() *JobResult {
		if rng.IntN(4) > 0 {
			return nil
		}
		statuses := []JobStatus{JobPending, JobRunning, JobSucceeded, JobFailed}
		return &JobResult{OpID: "op", Status: statuses[rng.IntN(len(statuses))]}
	}
	obs.Archive, obs.Restore = job(), job()
	return obs
}
