package controller

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/codehub-io/codehub/workspace"
)

// TestRandomHistoriesLoseNoHome is the rule that matters, over random
// histories: whatever the user asks, whatever the backend and S3 do (failed
// calls, failed jobs, a node going away and coming back, calls lost to a
// crash, long waits), no step deletes a volume or restores over one that
// holds a home whose contents are not in the committed archive. The
// checks run inside the fake at the moment of each deletion and restore.
func TestRandomHistoriesLoseNoHome(t *testing.T) {
	const histories, steps = 32, 80
	for seed := range uint64(histories) {
		t.Run(fmt.Sprint("seed ", seed), func(t *testing.T) {
			randomHistory(t, rand.New(rand.NewPCG(seed, 0x636f646568756221)), steps)
		})
	}
}

func randomHistory(t *testing.T, rng *rand.Rand, steps int) {
	h := newHarness(t)
	h.checkVolumeDeletions()
	h.checkRestores()
	c := h.controller()
	w := h.create("random")
	desired := []workspace.DesiredState{workspace.DesiredRunning, workspace.DesiredStandby, workspace.DesiredArchived}
	methods := []string{"ProvisionVolume", "StartWorkspace", "StopWorkspace", "SubmitArchive", "SubmitRestore", "DeleteVolume", "PurgeJob", "StopJob"}
	jobCodes := []string{"S3_ACCESS_ERROR", "DISK_FULL", "UNKNOWN"}
	var history []string
	defer func() {
		if t.Failed() {
			t.Logf("history: %v", history)
		}
	}()
	crashes := 0
	h.backend.crashBefore = func() bool {
		if crashes > 0 {
			crashes--
			return true
		}
		return false
	}
	for i := range steps {
		var did string
		switch rng.IntN(11) {
		case 0, 1, 9, 10:
			// A refusal (an operation in flight, ERROR) is an answer the
			// user gets; the history goes on.
			d := desired[rng.IntN(len(desired))]
			did = "desire " + string(d)
			if _, err := h.svc.SetDesired(context.Background(), w.ID, d); errors.Is(err, workspace.ErrInvalidState) {
				did += " (refused)"
			} else if err != nil {
				t.Fatal(err)
			}
		case 8:
			if h.row(w.ID).Phase == workspace.PhaseError {
				if _, err := h.svc.Recover(context.Background(), w.ID); err != nil {
					t.Fatal(err)
				}
				did = "admin recovers"
			}
		case 2:
			// The user works: only a running workspace's home changes.
			if cont := h.backend.conts[w.ID]; cont != nil && cont.stage >= 2 && !cont.stopping {
				did = fmt.Sprintf("write v%d", i)
				h.backend.writeHome(w.ID, did)
			}
		case 3:
			if v := h.backend.volumes[w.ID]; v != nil {
				did = fmt.Sprint("node down ", !v.unavailable)
				h.backend.nodeDown(w.ID, !v.unavailable)
			}
		case 4:
			m := methods[rng.IntN(len(methods))]
			h.backend.fail[m] = errors.New("injected failure")
			did = "fail " + m
		case 5:
			code := jobCodes[rng.IntN(len(jobCodes))]
			kind := []JobKind{JobArchive, JobRestore}[rng.IntN(2)]
			h.backend.jobFail[kind] = code
			did = fmt.Sprintf("fail %s job with %s", kind, code)
		case 6:
			crashes = 1
			did = "lose the next call"
		default:
			d := time.Duration(rng.IntN(600)+1) * time.Second
			h.advance(d)
			did = "wait " + d.String()
		}
		if did != "" {
			history = append(history, did)
		}
		// A few passes, seconds apart, so operations get somewhere
		// between the events.
		for range 1 + rng.IntN(4) {
			if _, err := c.Tick(context.Background(), h.epoch); err != nil && !errors.Is(err, context.Canceled) {
				t.Fatalf("tick after %v: %v", history, err)
			}
			h.advance(2 * time.Second)
		}
	}
}

// checkRestores fails the test when a restore job would overwrite a volume
// holding data the committed archive does not hold.
func (h *harness) checkRestores() {
	h.backend.beforeRestore = func(wsID string) {
		home := h.backend.volumes[wsID].data
		if home == "" {
			return
		}
		var key *string
		if err := h.pool.QueryRow(context.Background(), `SELECT archive_key FROM workspaces WHERE id = $1`, wsID).Scan(&key); err != nil {
			h.t.Errorf("read workspace before restore: %v", err)
			return
		}
		if key == nil {
			h.t.Errorf("restore over %s's home %q with no committed archive", wsID, home)
			return
		}
		if archived, ok := h.backend.store.data(*key); !ok || archived != home {
			h.t.Errorf("restore over %s's home %q; committed archive %s holds %q", wsID, home, *key, archived)
		}
	}
}
