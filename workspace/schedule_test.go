package workspace_test

import (
	"errors"
	"testing"
	"time"

	"github.com/codehub-io/codehub/workspace"
)

func mustZone(t *testing.T, name string) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation(name)
	if err != nil {
		t.Fatal(err)
	}
	return loc
}

func TestParseSchedule(t *testing.T) {
	s, err := workspace.ParseSchedule([]string{"fri", "mon", "MON", "wed"}, "08:30", "Europe/Berlin")
	if err != nil {
		t.Fatal(err)
	}
	if got := s.DayBits(); got != 1<<time.Monday|1<<time.Wednesday|1<<time.Friday || s.Clock() != "08:30" || s.Location.String() != "Europe/Berlin" {
		t.Fatalf("parsed %+v (bits %b)", s, got)
	}
	for _, c := range []struct {
		name            string
		days            []string
		at, zone, field string
	}{
		{"no days", nil, "08:00", "UTC", "autostart.days"},
		{"unknown day", []string{"monday"}, "08:00", "UTC", "autostart.days"},
		{"hour past the day", []string{"mon"}, "24:00", "UTC", "autostart.time"},
		{"no leading zero", []string{"mon"}, "8:00", "UTC", "autostart.time"},
		{"seconds", []string{"mon"}, "08:00:00", "UTC", "autostart.time"},
		{"unknown zone", []string{"mon"}, "08:00", "Mars/Olympus", "autostart.time_zone"},
		{"a path", []string{"mon"}, "08:00", "../../etc/passwd", "autostart.time_zone"},
		{"absolute path", []string{"mon"}, "08:00", "/etc/localtime", "autostart.time_zone"},
		{"the server's zone", []string{"mon"}, "08:00", "Local", "autostart.time_zone"},
		{"no zone", []string{"mon"}, "08:00", "", "autostart.time_zone"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := workspace.ParseSchedule(c.days, c.at, c.zone)
			var in *workspace.InputError
			if !errors.As(err, &in) || in.Field != c.field {
				t.Fatalf("err = %v, want an input error on %s", err, c.field)
			}
		})
	}
}

func TestScheduleNext(t *testing.T) {
	berlin := mustZone(t, "Europe/Berlin")
	weekdays := workspace.Schedule{Days: []time.Weekday{time.Monday, time.Tuesday, time.Wednesday, time.Thursday, time.Friday}, Hour: 9, Location: berlin}
	monday := workspace.Schedule{Days: []time.Weekday{time.Monday}, Hour: 9, Location: berlin}
	gap := workspace.Schedule{Days: []time.Weekday{time.Sunday}, Hour: 2, Minute: 30, Location: berlin}
	at := func(s string) time.Time {
		v, err := time.ParseInLocation("2006-01-02 15:04", s, berlin)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	for _, c := range []struct {
		name  string
		s     workspace.Schedule
		after time.Time
		want  time.Time
	}{
		{"later today", weekdays, at("2026-11-26 07:00"), at("2026-11-26 09:00")},
		{"exactly at a start: the next one", weekdays, at("2026-11-26 09:00"), at("2026-11-27 09:00")},
		{"over the weekend", weekdays, at("2026-11-27 10:00"), at("2026-11-30 09:00")},
		{"one day a week, just passed", monday, at("2026-11-30 09:01"), at("2026-12-07 09:00")},
		{"in the owner's zone, not the server's", weekdays, time.Date(2026, 11, 26, 8, 30, 0, 0, time.UTC), at("2026-11-27 09:00")},
		{"across the change to summer time", monday, at("2026-03-28 12:00"), at("2026-03-30 09:00")},
		// 02:30 does not exist on 29 March 2026 in Berlin; it moves on by the gap.
		{"a start inside the gap", gap, at("2026-03-28 12:00"), time.Date(2026, 3, 29, 1, 30, 0, 0, time.UTC)},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := c.s.Next(c.after); !got.Equal(c.want) {
				t.Fatalf("Next(%v) = %v, want %v", c.after, got, c.want)
			}
		})
	}
}

func TestAutostartDue(t *testing.T) {
	utc := func(s string) time.Time {
		v, err := time.Parse("2006-01-02 15:04", s)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	str := func(s string) *string { return &s }
	base := workspace.Workspace{Phase: workspace.PhaseStandby, DesiredState: workspace.DesiredStandby,
		AutostartDays: 1 << time.Thursday, AutostartAt: str("09:00"), AutostartTZ: str("UTC")}
	ptr := func(v time.Time) *time.Time { return &v }
	const lead = 15 * time.Minute
	for _, c := range []struct {
		name string
		edit func(w *workspace.Workspace)
		now  string
		due  bool
		at   string
	}{
		{"standby, a minute ahead", nil, "2026-11-26 08:59", true, "2026-11-26 09:00"},
		{"standby, too early", nil, "2026-11-26 08:50", false, ""},
		{"archived, restored ahead", func(w *workspace.Workspace) { w.Phase = workspace.PhaseArchived }, "2026-11-26 08:46", true, "2026-11-26 09:00"},
		{"archived, before the lead", func(w *workspace.Workspace) { w.Phase = workspace.PhaseArchived }, "2026-11-26 08:44", false, ""},
		{"late, within the hour", nil, "2026-11-26 09:40", true, "2026-11-26 09:00"},
		{"missed by more than an hour", nil, "2026-11-26 10:01", false, ""},
		{"already acted on", func(w *workspace.Workspace) { w.AutostartDone = ptr(utc("2026-11-26 09:00")) }, "2026-11-26 09:05", false, ""},
		{"set after today's start", func(w *workspace.Workspace) { w.AutostartDone = ptr(utc("2026-11-26 09:10")) }, "2026-11-26 09:20", false, ""},
		{"no schedule", func(w *workspace.Workspace) { w.AutostartDays = 0 }, "2026-11-26 09:00", false, ""},
		{"in ERROR", func(w *workspace.Workspace) { w.Phase = workspace.PhaseError }, "2026-11-26 09:00", false, ""},
		{"a zone the server lost", func(w *workspace.Workspace) { w.AutostartTZ = str("Gone/Away") }, "2026-11-26 09:00", false, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			w := base
			if c.edit != nil {
				c.edit(&w)
			}
			at, due := workspace.AutostartDue(w, utc(c.now), lead)
			if due != c.due || (due && !at.Equal(utc(c.at))) {
				t.Fatalf("due %v at %v, want %v at %s", due, at, c.due, c.at)
			}
		})
	}
}
