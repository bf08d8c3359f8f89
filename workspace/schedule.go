package workspace

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"
)

// Schedule starts a workspace on the given weekdays at a wall-clock time in
// its owner's time zone, so it is ready when they sit down.
type Schedule struct {
	// Days are the weekdays it starts on, in week order, each once.
	Days []time.Weekday
	// Hour and Minute are the wall-clock time in Location.
	Hour, Minute int
	Location     *time.Location
}

var dayNames = [...]string{"sun", "mon", "tue", "wed", "thu", "fri", "sat"}

// DayName is the three-letter lower-case name the API uses for d.
func DayName(d time.Weekday) string { return dayNames[d] }

// ParseSchedule reads a schedule as the API gives it: day names ("mon"…
// "sun"), a time "HH:MM" (24 h) and an IANA time zone name.
func ParseSchedule(days []string, at, zone string) (Schedule, error) {
	var s Schedule
	if len(days) == 0 {
		return s, &InputError{Field: "autostart.days", Message: "must name at least one day (mon, tue, wed, thu, fri, sat, sun)"}
	}
	for _, name := range days {
		i := slices.Index(dayNames[:], strings.ToLower(name))
		if i < 0 {
			return s, &InputError{Field: "autostart.days", Message: fmt.Sprintf("%q is not one of mon, tue, wed, thu, fri, sat, sun", name)}
		}
		if !slices.Contains(s.Days, time.Weekday(i)) {
			s.Days = append(s.Days, time.Weekday(i))
		}
	}
	slices.Sort(s.Days)
	t, err := time.Parse("15:04", at)
	if err != nil || len(at) != 5 {
		return s, &InputError{Field: "autostart.time", Message: "must be a time HH:MM (24-hour clock)"}
	}
	s.Hour, s.Minute = t.Hour(), t.Minute()
	// LoadLocation reads names as paths under the zone database; only
	// names shaped like the database's own are accepted.
	if zone == "" || len(zone) > 64 || strings.Contains(zone, "..") || strings.HasPrefix(zone, "/") || zone == "Local" {
		return s, &InputError{Field: "autostart.time_zone", Message: "must be an IANA time zone name such as Europe/Berlin or UTC"}
	}
	loc, err := loadZone(zone)
	if err != nil {
		return s, &InputError{Field: "autostart.time_zone", Message: fmt.Sprintf("unknown time zone %q", zone)}
	}
	s.Location = loc
	return s, nil
}

// DayBits packs Days into the stored bit set (bit d for weekday d).
func (s Schedule) DayBits() int {
	bits := 0
	for _, d := range s.Days {
		bits |= 1 << d
	}
	return bits
}

// Clock is the start time as "HH:MM".
func (s Schedule) Clock() string { return fmt.Sprintf("%02d:%02d", s.Hour, s.Minute) }

// Next returns the first start strictly after t. A start that falls into a
// daylight-saving gap moves forward by the gap, as time.Date normalises it.
func (s Schedule) Next(t time.Time) time.Time {
	local := t.In(s.Location)
	for i := 0; i <= 7; i++ {
		day := local.AddDate(0, 0, i)
		if !slices.Contains(s.Days, day.Weekday()) {
			continue
		}
		at := time.Date(day.Year(), day.Month(), day.Day(), s.Hour, s.Minute, 0, 0, s.Location)
		if at.After(t) {
			return at
		}
	}
	// Only reached with no days, which ParseSchedule refuses.
	return time.Time{}
}

// zones caches loaded time zones: every list of workspaces reads theirs.
var zones sync.Map

func loadZone(name string) (*time.Location, error) {
	if loc, ok := zones.Load(name); ok {
		return loc.(*time.Location), nil
	}
	loc, err := time.LoadLocation(name)
	if err != nil {
		return nil, err
	}
	zones.Store(name, loc)
	return loc, nil
}

// Autostart returns w's schedule; ok is false without one (or with one the
// server can no longer read, such as a zone removed from the database).
func (w Workspace) Autostart() (s Schedule, ok bool) {
	if w.AutostartDays == 0 || w.AutostartAt == nil || w.AutostartTZ == nil {
		return s, false
	}
	for d := time.Sunday; d <= time.Saturday; d++ {
		if w.AutostartDays&(1<<d) != 0 {
			s.Days = append(s.Days, d)
		}
	}
	t, err := time.Parse("15:04", *w.AutostartAt)
	if err != nil {
		return s, false
	}
	s.Hour, s.Minute = t.Hour(), t.Minute()
	if s.Location, err = loadZone(*w.AutostartTZ); err != nil {
		return s, false
	}
	return s, true
}

// How far a scheduled start reaches: an archived workspace is restored
// Policy.AutostartLead ahead, any other started StartLead ahead; a start
// missed by more than MissedStart (the server was down) is skipped.
const (
	StartLead   = time.Minute
	MissedStart = time.Hour
)

// AutostartDue returns the scheduled start that w must be woken for at now,
// if any: the first start after the last one acted on (or after now less
// MissedStart), once now is within its lead.
func AutostartDue(w Workspace, now time.Time, restoreLead time.Duration) (time.Time, bool) {
	s, ok := w.Autostart()
	if !ok || w.DeletedAt != nil || w.Phase == PhaseError {
		return time.Time{}, false
	}
	base := now.Add(-MissedStart)
	if w.AutostartDone != nil && w.AutostartDone.After(base) {
		base = *w.AutostartDone
	}
	at := s.Next(base)
	lead := StartLead
	if w.Phase == PhaseArchived {
		lead = max(restoreLead, StartLead)
	}
	if now.Before(at.Add(-lead)) {
		return time.Time{}, false
	}
	return at, true
}
