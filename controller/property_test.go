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
// calls, failed jobs, a node going away and coming back or lost for good,
// calls lost to a crash, long waits), no step deletes a volume or restores
// over one unless LocateHome places the home in a committed archive that
// holds the volume's contents; and wherever LocateHome places the home,
// the user's latest files are there. The first checks run inside the fake
// at the moment of each deletion and restore, the last after every event.
func TestRandomHistoriesLoseNoHome(t *testing.T) {
	const histories, steps = 32, 80
	for seed := range uint64(histories) {
		t.Run(fmt.Sprint("seed ", seed), func(t *testing.T) {
			randomHistory(t, rand.New(rand.NewPCG(seed, 0x636f646568756221)), steps, 0)
		})
	}
}

// randomHistory runs one history; backups every backupInterval (0: off).
func randomHistory(t *testing.T, rng *rand.Rand, steps int, backupInterval time.Duration) {
	h := newHarness(t)
	h.checkVolumeDeletions()
	h.checkRestores()
	cfg := DefaultConfig()
	cfg.BackupInterval = backupInterval
	c := h.controllerWith(cfg)
	w := h.create("random")
	desired := []workspace.DesiredState{workspace.DesiredRunning, workspace.DesiredStandby, workspace.DesiredArchived}
	methods := []string{"ProvisionVolume", "StartWorkspace", "StopWorkspace", "SubmitArchive", "SubmitRestore", "DeleteVolume", "PurgeJob", "StopJob"}
	jobCodes := []string{"S3_ACCESS_ERROR", "DISK_FULL", "UNKNOWN"}
	// want is the home as the user last left it.
	var want string
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
		lost := false
		switch rng.IntN(12) {
		case 0, 1, 9, 10:
			// A refusal (an operation in flight, ERROR) is an answer the
			// user gets; the history goes on.
			d := desired[rng.IntN(len(desired))]
			did = "desire " + string(d)
			if _, err := h.svc.SetDesired(context.Background(), w.ID, d, workspace.CauseUser); errors.Is(err, workspace.ErrInvalidState) {
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
				want = did
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
		case 11:
			// Only outside ERROR: a workspace in ERROR keeps the reason
			// it has, and the admin who recovers it judges what is left.
			if row := h.row(w.ID); h.backend.volumes[w.ID] != nil && row.Phase != workspace.PhaseError {
				h.backend.loseNode(w.ID)
				did, lost = "lose the node", true
			}
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
		h.checkHome(w.ID, &want, lost)
	}
}

// checkHome holds LocateHome to what the backend and the bucket really
// hold: wherever it places the home, the user's latest files (want) must be
// there. A node lost in this event may have taken the only copy; then the
// row must say DataLost, and what is left becomes the home.
func (h *harness) checkHome(id string, want *string, lost bool) {
	h.t.Helper()
	row := h.row(id)
	h.backend.mu.Lock()
	volume := h.backend.volumeState(id)
	var data string
	if v := h.backend.volumes[id]; v != nil {
		data = v.data
	}
	h.backend.mu.Unlock()
	var archived string
	archiveOK := false
	if row.ArchiveKey != nil {
		archived, archiveOK = h.backend.store.data(*row.ArchiveKey)
	}
	home := workspace.LocateHome(row, volume)
	if lost && deref(row.ErrorReason) == workspace.ReasonDataLost {
		*want = archived
	}
	inVolume := volume != workspace.VolumeAbsent && data == *want
	inArchive := archiveOK && archived == *want
	var holds bool
	switch home {
	case workspace.HomeNowhere:
		holds = *want == ""
	case workspace.HomeInVolume, workspace.HomeUnknown:
		holds = inVolume
	case workspace.HomeInArchive:
		holds = inArchive
	case workspace.HomeInBoth:
		holds = inVolume && inArchive
	case workspace.HomeLost:
		// The pass that sees the volume gone records DataLost, so a
		// stored row never says lost after it.
		holds = false
	}
	if !holds {
		h.t.Fatalf("home %s (phase %s, op %s, error %s), but the user's %q: volume %v holds %q, archive %q holds %q",
			home, row.Phase, row.Operation, deref(row.ErrorReason), *want, volume, data, deref(row.ArchiveKey), archived)
	}
}

// checkRestores fails the test when a restore job would overwrite a volume
// while LocateHome does not place the home in a committed archive, or
// holding data that archive does not hold.
func (h *harness) checkRestores() {
	h.backend.beforeRestore = func(wsID string) {
		row, ok := h.archivedBefore("restore", wsID)
		if !ok {
			return
		}
		home := h.backend.volumes[wsID].data
		if home == "" {
			return
		}
		if archived, ok := h.backend.store.data(*row.ArchiveKey); !ok || archived != home {
			h.t.Errorf("restore over %s's home %q; committed archive %s holds %q", wsID, home, *row.ArchiveKey, archived)
		}
	}
}
