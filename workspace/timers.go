package workspace

import "time"

// Policy is the operator's idle rules: the timers every workspace starts
// with, and how far its owner may move them.
type Policy struct {
	// StandbyTTL stops a running workspace unused for that long;
	// ArchiveTTL archives a stopped one after that long in standby.
	StandbyTTL time.Duration
	ArchiveTTL time.Duration
	// MaxStandbyTTL and MaxArchiveTTL bound the timers an owner sets for
	// their own workspace (at least MinTTL each).
	MaxStandbyTTL time.Duration
	MaxArchiveTTL time.Duration
	// MaxExtend bounds how far ahead an owner may keep a workspace
	// running; zero turns keeping alive off.
	MaxExtend time.Duration
	// AutostartLead is how long before a scheduled start an archived
	// workspace is restored, so it is ready on time.
	AutostartLead time.Duration
}

// MinTTL is the shortest timer an owner may set: below it a workspace
// would stop between two uses of an open tab.
const MinTTL = time.Minute

// Timers is when the idle rules will act on a workspace left alone. The
// TTL runner acts at its next pass after each time, so the stop or archive
// request follows within one ttl_interval.
type Timers struct {
	// StandbyTTL and ArchiveTTL are the workspace's own or the defaults.
	StandbyTTL time.Duration
	ArchiveTTL time.Duration
	// StopsAt is set while the workspace runs because its owner wants it
	// running; ArchivesAt while it runs so or stands by so (after the
	// stop, for a running one).
	StopsAt    *time.Time
	ArchivesAt *time.Time
}

// TimersOf works out w's timers under p, by the rules the TTL runner
// applies (store.ListIdleWorkspaces): a running workspace stops standby
// TTL after the later of its last access and its start, or at keep_until
// if that is later; a stopped one is archived archive TTL after it stopped.
// An operation in flight decides nothing until it ends.
func TimersOf(w Workspace, p Policy) Timers {
	t := Timers{StandbyTTL: p.StandbyTTL, ArchiveTTL: p.ArchiveTTL}
	if w.StandbyTTL != nil {
		t.StandbyTTL = *w.StandbyTTL
	}
	if w.ArchiveTTL != nil {
		t.ArchiveTTL = *w.ArchiveTTL
	}
	if w.Operation != OpNone || w.DeletedAt != nil {
		return t
	}
	switch {
	case w.Phase == PhaseRunning && w.DesiredState == DesiredRunning:
		stop := w.LastAccessAt
		if w.PhaseChangedAt.After(stop) {
			stop = w.PhaseChangedAt
		}
		stop = stop.Add(t.StandbyTTL)
		if w.KeepUntil != nil && w.KeepUntil.After(stop) {
			stop = *w.KeepUntil
		}
		archive := stop.Add(t.ArchiveTTL)
		t.StopsAt, t.ArchivesAt = &stop, &archive
	case w.Phase == PhaseStandby && w.DesiredState == DesiredStandby:
		archive := w.PhaseChangedAt.Add(t.ArchiveTTL)
		t.ArchivesAt = &archive
	}
	return t
}
