package controller

import (
	"strings"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/codehub-io/codehub/archive"
	"github.com/codehub-io/codehub/workspace"
)

// Backups: a home in standby that changed since its last archive is
// archived again once that archive is BackupInterval old, and keeps its
// volume. A backup is an ARCHIVING marked op_backup, so it runs the archive
// job and its checks exactly as an archiving does. It differs in its end:
// the archive is committed together with the restore marker (the volume
// holds what the archive holds, so the home stays in the volume and nothing
// may delete it), and a failure leaves the workspace as it was instead of
// counting toward ERROR.

// HomeChanged reports whether the home of w may hold writes its archive
// lacks: it ran since the archive at archive_key was made (each start is a
// new run id), or it ran and was never archived. A home changes only while
// its program runs; a restore writes what the archive holds.
func HomeChanged(w workspace.Workspace) bool {
	return w.RunID != "" && w.RunID != w.ArchiveRunID
}

// BackupDue reports whether the home of w, in standby on its volume, is to
// be archived again at now: it changed, and its last archive (if any) is at
// least interval old. interval 0 turns backups off.
func BackupDue(w workspace.Workspace, now time.Time, interval time.Duration) bool {
	at, ok := backupDueAt(w, interval)
	return ok && !now.Before(at)
}

// backupDueAt is when the home of w is due for a backup (zero: at once),
// false when it never is: backups are off or it has not changed.
func backupDueAt(w workspace.Workspace, interval time.Duration) (time.Time, bool) {
	if interval <= 0 || !HomeChanged(w) {
		return time.Time{}, false
	}
	if w.ArchiveKey == nil {
		return time.Time{}, true
	}
	made, ok := archiveTime(*w.ArchiveKey)
	if !ok {
		return time.Time{}, true
	}
	return made.Add(interval), true
}

// archiveTime is when the operation that made the archive at key began:
// its op id is a ULID.
func archiveTime(key string) (time.Time, bool) {
	id, err := ulid.ParseStrict(strings.ToUpper(archive.OpID(key)))
	if err != nil {
		return time.Time{}, false
	}
	return ulid.Time(id.Time()), true
}

// claimBackup claims an ARCHIVING marked as a backup (every other claim
// clears the mark).
func (p *planner) claimBackup(steps ...Step) Action {
	a := p.claim(workspace.OpArchiving, steps...)
	a.Next.OpBackup = true
	return a
}

// backupDue reports whether the idle plan archives the home again now:
// it is in standby (phase) on its ready volume, nothing runs on it, and it
// is due.
func (p *planner) backupDue(phase workspace.Phase) bool {
	return phase == workspace.PhaseStandby && p.w.DesiredState == workspace.DesiredStandby &&
		p.home == workspace.HomeInVolume && p.obs.VolumeReady && !p.obs.ContainerLive &&
		!jobLive(p.obs.Archive) && !jobLive(p.obs.Restore) &&
		(BackupDue(p.w, p.now, p.cfg.BackupInterval) || stopArchiveFailed(p.w, p.obs))
}

// stopArchiveFailed reports a home whose archive as its program stopped
// failed (S3 was down): it is backed up at once instead, whatever the
// backup interval, so that a stopped home is in S3 by default. A failed
// backup waits coordinator.backoff_max before the next.
func stopArchiveFailed(w workspace.Workspace, obs Observed) bool {
	j := stopArchiveOfRun(w, obs)
	return j != nil && j.Status == JobFailed
}

func jobLive(j *JobResult) bool { return j != nil && !terminalJob(j) }

// committed records the archive of the op id as the workspace's archive,
// made of the volume under the current run. A backup ends there: the
// volume stays the home, as if restored from that archive.
func (p *planner) committed(key string, steps ...Step) Action {
	p.next.ArchiveKey = &key
	p.next.ArchiveRunID = p.w.RunID
	if !workspace.BackingUp(p.w) {
		return p.settle(steps...)
	}
	p.next.RestoreMarker = &key
	p.next.OpBackup = false
	return p.complete(steps...)
}

// archiveFailed ends a failed ARCHIVING. A backup's failure is not the
// workspace's: the home is safe in its volume, so no error is recorded and
// nothing counts toward ERROR; the backup is tried again after BackoffMax.
func (p *planner) archiveFailed(reason, message string, terminal bool, steps ...Step) Action {
	if !workspace.BackingUp(p.w) {
		return p.fail(reason, message, terminal, steps...)
	}
	p.next = backupFailed(p.next, p.now, p.cfg)
	a := p.settle(steps...)
	a.BackupFailure = &Failure{Reason: reason, Message: message, Terminal: terminal}
	return a
}

// backupFailed ends the backup of w without an error. The retry waits, but
// a deletion does not.
func backupFailed(w workspace.Workspace, now time.Time, cfg Config) workspace.Workspace {
	w.Operation = workspace.OpNone
	w.OpBackup = false
	w.OpStartedAt = nil
	if w.DeletedAt == nil {
		at := now.Add(cfg.BackoffMax)
		w.NextAttemptAt = &at
	}
	return w
}

// yieldBackup ends a backup that stands between the user and what they
// asked for: a wake, or a deletion. A backup tries again until S3 takes
// the home, which may be long while S3 is away; the home is safe on its
// volume meanwhile, and the next stop archives it again. Its job is
// stopped first, and the backup ends once nothing of it runs, with no
// backoff: the wish goes ahead at once. On a node being emptied nothing
// yields: the backup is the home's way off it, and no wake could run
// there anyway. Nor does a backup whose archive is made: it commits.
func (p *planner) yieldBackup() (Action, bool) {
	w := p.w
	if !workspace.BackingUp(w) || nodeLeaving(p.obs) || p.home.Archived() {
		return Action{}, false
	}
	if w.DeletedAt == nil && p.target() != workspace.PhaseRunning {
		return Action{}, false
	}
	job := p.obs.Archive
	switch {
	case job != nil && job.Status == JobSucceeded && currentArchiveJob(w, p.obs) != nil:
		return Action{}, false
	case jobLive(job):
		return p.settle(StepStopArchiveJob), true
	}
	n := &p.next
	n.Operation = workspace.OpNone
	n.OpBackup = false
	n.OpStartedAt = nil
	return p.settle(), true
}
