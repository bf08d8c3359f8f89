package controller

import (
	"testing"
	"time"

	"github.com/codehub-io/codehub/workspace"
)

func TestSnapshotsDue(t *testing.T) {
	now := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	const interval = 10 * time.Minute
	key := "archives/01jb3x7k9q2m5n8p4r6s0t1v2w/01jb3x8a000000000000000001/home.tar.zst"
	other := "archives/01jb3x7k9q2m5n8p4r6s0t1v2w/01jb3x8a000000000000000002/home.tar.zst"
	ago := func(d time.Duration) *time.Time { t := now.Add(-d); return &t }
	running := func(mod func(*workspace.Workspace)) workspace.Workspace {
		w := workspace.Workspace{ID: "ws", Phase: workspace.PhaseRunning, Operation: workspace.OpNone,
			RunID: "run2", ArchiveRunID: "run1", ArchiveKey: &key, RestoreMarker: &key,
			ArchivedAt: ago(11 * time.Minute), PhaseChangedAt: now.Add(-time.Hour)}
		if mod != nil {
			mod(&w)
		}
		return w
	}
	tests := []struct {
		name     string
		w        workspace.Workspace
		held     map[string]time.Time
		inFlight map[string]bool
		want     bool
	}{
		{"recovery point older than the interval", running(nil), nil, nil, true},
		{"recovery point younger", running(func(w *workspace.Workspace) { w.ArchivedAt = ago(9 * time.Minute) }), nil, nil, false},
		{"exactly the interval", running(func(w *workspace.Workspace) { w.ArchivedAt = ago(interval) }), nil, nil, true},
		{"never archived, running long enough", running(func(w *workspace.Workspace) {
			w.ArchiveKey, w.RestoreMarker, w.ArchivedAt, w.ArchiveRunID = nil, nil, nil, ""
		}), nil, nil, true},
		{"never archived, just started", running(func(w *workspace.Workspace) {
			w.ArchiveKey, w.RestoreMarker, w.ArchivedAt, w.ArchiveRunID = nil, nil, nil, ""
			w.PhaseChangedAt = now.Add(-time.Minute)
		}), nil, nil, false},
		{"an operation works on it", running(func(w *workspace.Workspace) { w.Operation = workspace.OpStopping }), nil, nil, false},
		{"not running", running(func(w *workspace.Workspace) { w.Phase = workspace.PhaseStandby }), nil, nil, false},
		{"no run", running(func(w *workspace.Workspace) { w.RunID = "" }), nil, nil, false},
		{"volume not from its archive", running(func(w *workspace.Workspace) { w.RestoreMarker = &other }), nil, nil, false},
		{"no restore marker", running(func(w *workspace.Workspace) { w.RestoreMarker = nil }), nil, nil, false},
		{"held back after a failure", running(nil), map[string]time.Time{"ws/run2": now.Add(30 * time.Second)}, nil, false},
		{"the hold is over", running(nil), map[string]time.Time{"ws/run2": now.Add(-time.Second)}, nil, true},
		{"an earlier run held", running(nil), map[string]time.Time{"ws/run1": now.Add(time.Hour)}, nil, true},
		{"being read", running(nil), nil, map[string]bool{"ws/run2": true}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := len(SnapshotsDue([]workspace.Workspace{tc.w}, now, interval, tc.held, tc.inFlight)) == 1
			if got != tc.want {
				t.Fatalf("due = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestSnapshotTick(t *testing.T) {
	for interval, want := range map[time.Duration]time.Duration{
		5 * time.Second:  time.Second,
		time.Minute:      6 * time.Second,
		10 * time.Minute: 30 * time.Second,
		time.Hour:        30 * time.Second,
	} {
		if got := snapshotTick(interval); got != want {
			t.Errorf("snapshotTick(%s) = %s, want %s", interval, got, want)
		}
	}
}
