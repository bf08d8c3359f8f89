package controller

import (
	"errors"
	"fmt"

	"github.com/codehub-io/codehub/archive"
	"github.com/codehub-io/codehub/workspace"
)

// Drains: Nomad places nothing on a node that is drained or ineligible, not
// even the archive job that would save a home there. A home whose archive
// holds all of it needs nothing to run there: the volume is given up for
// the archive (the restore marker cleared in the same write that asks for
// its deletion, so its going is not taken for a lost home) and the ladder
// restores it on another node and brings it back to its desired phase.
// A home that changed since its archive, or was never archived, has its
// only copy on that node: it waits, and says why.

// DrainMove reports whether the home of w, idle on a volume whose node is
// up but takes no new allocation, leaves that node without anything
// running there: it was restored from its archive (or archived as it
// stopped, which leaves the same mark) and has not run since, or it never
// ran at all (a new workspace's empty volume, made again elsewhere).
func DrainMove(w workspace.Workspace, obs Observed) bool {
	return mayDrainMove(w) && drainedNode(obs) && !obs.ContainerLive
}

// mayDrainMove is DrainMove's part that reads only the row.
func mayDrainMove(w workspace.Workspace) bool {
	return w.DeletedAt == nil && w.Operation == workspace.OpNone && w.Phase != workspace.PhaseError &&
		(archiveHoldsHome(w) || workspace.NeverRan(w))
}

// drainedNode reports a volume on a node being emptied: drained (up, so
// the volume is ready and its deletion runs there), or drained and then
// lost (its client killed, say): the volume is only forgotten, and the
// home, which its archive holds, is restored elsewhere all the same.
func drainedNode(obs Observed) bool {
	switch obs.NodeAway {
	case workspace.ReasonNodeIneligible:
		return obs.VolumeReady
	case workspace.ReasonNodeDown:
		return obs.NodeDraining && obs.VolumeExists
	}
	return false
}

// archiveHoldsHome reports whether the archive of w holds everything its
// volume does: the volume was filled from that archive (or the archive was
// made of it) and the home has not changed since.
func archiveHoldsHome(w workspace.Workspace) bool {
	return w.ArchiveKey != nil && w.RestoreMarker != nil && *w.RestoreMarker == *w.ArchiveKey && !HomeChanged(w)
}

// Every stop archives the home as its program stops: the workspace job's
// poststop task (stop-archive) uploads what changed under a key named
// after the run, whether codehub, a crash or a drain stopped it, and the
// controller commits that archive as a backup is committed (the volume
// holds what the archive does). A stopped home is therefore in S3, and it
// leaves a drained node like any other its archive holds, with nothing to
// run there.

// stopArchiveDone returns the key of the stop archive of w's current run
// once it is made and waits to be committed: the home is idle and has
// changed since its last archive.
func stopArchiveDone(w workspace.Workspace, obs Observed) string {
	j := stopArchiveOfRun(w, obs)
	if j == nil || j.Status != JobSucceeded || w.Operation != workspace.OpNone || w.DeletedAt != nil || obs.ContainerLive {
		return ""
	}
	return j.ArchiveKey
}

// stopArchiveOfRun is the observed stop archive of w's current run, while
// the home holds writes its archive lacks.
func stopArchiveOfRun(w workspace.Workspace, obs Observed) *JobResult {
	j := obs.StopArchive
	if j == nil || w.RunID == "" || j.ArchiveKey != archive.Key(w.ID, w.RunID) || !HomeChanged(w) {
		return nil
	}
	return j
}

// savingStop reports a home whose stop archive is being made.
func savingStop(w workspace.Workspace, obs Observed) bool {
	j := stopArchiveOfRun(w, obs)
	return j != nil && j.Status == JobRunning
}

// savingOnStop reports a home on a drained node whose stop archive is
// being made or waits to be committed.
func savingOnStop(w workspace.Workspace, obs Observed) bool {
	j := stopArchiveOfRun(w, obs)
	return j != nil && obs.NodeAway == workspace.ReasonNodeIneligible && (j.Status == JobRunning || j.Status == JobSucceeded)
}

// commitStopArchive records the stop archive of the current run once S3
// shows it complete, with the restore marker: the volume holds what it
// holds. Until S3 answers it waits.
func (p *planner) commitStopArchive(key string) Action {
	if p.check.Key != key || p.check.Err != nil {
		return p.settle(p.purgeStale()...)
	}
	p.next.ArchiveKey = &key
	p.next.ArchiveRunID = p.w.RunID
	p.next.RestoreMarker = &key
	return p.settle(p.purgeStale()...)
}

// stopArchiveChecked amends obs with what S3 showed of the stop archive
// waiting to be committed: one that is missing or broken there failed,
// whatever its task reported, and is never committed.
func stopArchiveChecked(w workspace.Workspace, obs Observed, check ArchiveCheck) Observed {
	key := stopArchiveDone(w, obs)
	if key == "" || check.Key != key || check.Err == nil ||
		!missing(check.Err) && !errors.Is(check.Err, archive.ErrChecksumMismatch) {
		return obs
	}
	j := *obs.StopArchive
	j.Status, j.Message = JobFailed, check.Err.Error()
	obs.StopArchive = &j
	return obs
}

// drainedMessage is storage.volume_ready's message for a home on a drained
// node: whether it is on its way, or why it waits.
func drainedMessage(w workspace.Workspace, obs Observed) string {
	node := obs.Node
	switch {
	case archiveHoldsHome(w):
		return fmt.Sprintf("node %s is drained: the home's last archive holds all of it, so it is restored on another node", node)
	case savingOnStop(w, obs):
		return fmt.Sprintf("node %s is drained: the home is being archived as its program stopped, then it is restored on another node", node)
	}
	if j := stopArchiveOfRun(w, obs); j != nil && j.Status == JobFailed {
		return fmt.Sprintf("unavailable: node %s is drained and holds the only copy of the home; archiving it as its program stopped failed (%s)", node, stopFailure(j))
	}
	switch {
	case w.ArchiveKey == nil:
		return fmt.Sprintf("unavailable: node %s is drained and holds the only copy of the home, which was never archived; an admin evacuates a node before draining it, or backups archive homes that stopped", node)
	}
	return fmt.Sprintf("unavailable: node %s is drained and holds the only copy of the home, which changed since its last archive; an admin evacuates a node before draining it, or backups archive homes that stopped", node)
}

// stopFailure says why a stop archive failed.
func stopFailure(j *JobResult) string {
	switch {
	case j.ErrorCode != "" && j.Message != "":
		return string(j.ErrorCode) + ": " + j.Message
	case j.ErrorCode != "":
		return string(j.ErrorCode)
	}
	return j.Message
}

// giveUpVolume gives up the volume of a home its archive holds (a home
// DrainMove lets go, or one stepping down to ARCHIVED): the archive is the
// home from this write on. The workspace job is stopped first: one a drain
// stopped still wants to run, and Nomad would place it on the new volume
// of the restore.
func (p *planner) giveUpVolume() Action {
	p.next.RestoreMarker = nil
	return p.settle(append(p.purgeStale(), StepStopWorkspace, StepDeleteVolume)...)
}
