package workspace_test

import (
	"testing"
	"time"

	"github.com/codehub-io/codehub/workspace"
)

func TestTimersOf(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	p := workspace.Policy{StandbyTTL: 10 * time.Minute, ArchiveTTL: 30 * time.Minute}
	at := func(d time.Duration) *time.Time { v := t0.Add(d); return &v }
	dur := func(d time.Duration) *time.Duration { return &d }
	running := workspace.Workspace{Phase: workspace.PhaseRunning, DesiredState: workspace.DesiredRunning,
		Operation: workspace.OpNone, LastAccessAt: t0, PhaseChangedAt: t0.Add(-time.Hour)}
	cases := []struct {
		name          string
		edit          func(w *workspace.Workspace)
		stops, archiv *time.Time
		standby       time.Duration
	}{
		{"running: standby ttl after the last access", nil, at(10 * time.Minute), at(40 * time.Minute), 10 * time.Minute},
		{"running: counted from the start when that is later", func(w *workspace.Workspace) { w.PhaseChangedAt = t0.Add(5 * time.Minute) },
			at(15 * time.Minute), at(45 * time.Minute), 10 * time.Minute},
		{"running with its own timers", func(w *workspace.Workspace) { w.StandbyTTL, w.ArchiveTTL = dur(time.Hour), dur(2*time.Hour) },
			at(time.Hour), at(3 * time.Hour), time.Hour},
		{"kept running past the idle stop", func(w *workspace.Workspace) { w.KeepUntil = at(2 * time.Hour) },
			at(2 * time.Hour), at(2*time.Hour + 30*time.Minute), 10 * time.Minute},
		{"a keep-running already passed changes nothing", func(w *workspace.Workspace) { w.KeepUntil = at(time.Minute) },
			at(10 * time.Minute), at(40 * time.Minute), 10 * time.Minute},
		{"standby: archive ttl after the stop", func(w *workspace.Workspace) {
			w.Phase, w.DesiredState, w.PhaseChangedAt = workspace.PhaseStandby, workspace.DesiredStandby, t0
		}, nil, at(30 * time.Minute), 10 * time.Minute},
		{"running but asked to stop: the stop is under way", func(w *workspace.Workspace) { w.DesiredState = workspace.DesiredStandby },
			nil, nil, 10 * time.Minute},
		{"standby but asked to run", func(w *workspace.Workspace) {
			w.Phase, w.DesiredState = workspace.PhaseStandby, workspace.DesiredRunning
		}, nil, nil, 10 * time.Minute},
		{"an operation in flight", func(w *workspace.Workspace) { w.Operation = workspace.OpStarting }, nil, nil, 10 * time.Minute},
		{"archived", func(w *workspace.Workspace) {
			w.Phase, w.DesiredState = workspace.PhaseArchived, workspace.DesiredArchived
		}, nil, nil, 10 * time.Minute},
		{"deleted", func(w *workspace.Workspace) { w.DeletedAt = at(0) }, nil, nil, 10 * time.Minute},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			w := running
			if c.edit != nil {
				c.edit(&w)
			}
			got := workspace.TimersOf(w, p)
			if !sameTime(got.StopsAt, c.stops) || !sameTime(got.ArchivesAt, c.archiv) || got.StandbyTTL != c.standby {
				t.Fatalf("timers = stops %v archives %v standby %s; want %v %v %s", got.StopsAt, got.ArchivesAt, got.StandbyTTL, c.stops, c.archiv, c.standby)
			}
		})
	}
}

func sameTime(a, b *time.Time) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.Equal(*b)
}
