package workspace

import (
	"time"

	"github.com/codehub-io/codehub/archive"
)

// Where a workspace's home is, derived once from the row and the volume the
// backend reports. The phase and every controller rule that may delete,
// overwrite or replace a home read this one value (docs/lifecycle.md).

// VolumeState is what an observation says of a workspace's volume.
type VolumeState int

const (
	VolumeAbsent VolumeState = iota
	// VolumeUnready: the volume exists but cannot be used. It is being
	// made, or its node is away: Nomad reports every volume of a node
	// that is down as present and not ready.
	VolumeUnready
	VolumeReady
)

// ReasonVolumeCreating is the volume_ready reason while the volume object
// exists but is not usable yet.
const ReasonVolumeCreating = "Creating"

// ObservedVolume reads the volume state an observation recorded in the
// storage.volume_ready condition.
func ObservedVolume(c Conditions) VolumeState {
	v := c[CondVolumeReady]
	switch {
	case v.Status == ConditionTrue:
		return VolumeReady
	case v.Reason == ReasonVolumeCreating || v.Reason == ReasonNodeDown || v.Reason == ReasonNodeGone:
		return VolumeUnready
	}
	return VolumeAbsent
}

// Home says which copy holds a workspace's home as it is now.
type Home string

const (
	// HomeNowhere: there is no home yet. No archive, and no volume, or
	// only the one PROVISIONING is making (it holds nothing until ready).
	HomeNowhere Home = "nowhere"
	// HomeInVolume: the ready volume is the only copy. Either no archive
	// exists, or the volume was restored from the current one and may
	// have changed since.
	HomeInVolume Home = "volume"
	// HomeInArchive: archive_key holds the home. A volume, if there is
	// one, holds nothing the archive lacks: a restore under way or given
	// up.
	HomeInArchive Home = "archive"
	// HomeInBoth: archive_key is the archive this op id made of the
	// volume, and the volume is still there, unchanged since.
	HomeInBoth Home = "both"
	// HomeUnknown: the volume that holds the home, or may, exists but is
	// not ready (its node is away). Nobody can read it, and no archive
	// holds the home as it is.
	HomeUnknown Home = "unknown"
	// HomeLost: the volume that held the home, or may have, is gone.
	HomeLost Home = "lost"
)

// Archived reports whether a committed archive holds the home: only then
// may its volume be deleted or restored over.
func (h Home) Archived() bool {
	return h == HomeInArchive || h == HomeInBoth
}

// LocateHome says where the home of w is. w is the stored row: its archive
// key, restore marker, op id and operation, and its conditions, the
// previous observation. volume is what the current observation says of
// the volume; it differs from the stored one only in the pass that sees a
// change.
func LocateHome(w Workspace, volume VolumeState) Home {
	if volume != VolumeAbsent {
		return withVolume(w, volume)
	}
	if stored := ObservedVolume(w.Conditions); stored != VolumeAbsent && !NeverRan(w) {
		if h := withVolume(w, stored); h == HomeInVolume || h == HomeUnknown {
			return HomeLost
		}
	}
	if w.ArchiveKey == nil {
		return HomeNowhere
	}
	return HomeInArchive
}

// withVolume places the home of w when its volume exists.
func withVolume(w Workspace, volume VolumeState) Home {
	held := HomeInVolume
	if volume != VolumeReady {
		held = HomeUnknown
	}
	switch {
	case w.ArchiveKey == nil && volume != VolumeReady && w.Operation == OpProvisioning:
		// The volume PROVISIONING makes holds nothing until it is ready.
		return HomeNowhere
	case w.ArchiveKey == nil || restored(w):
		// Restored is checked before committed: a volume restored from
		// an archive may have changed since it was made.
		return held
	case ArchiveCommitted(w):
		return HomeInBoth
	}
	return HomeInArchive
}

// NeverRan reports a home no program ever ran on and no archive filled:
// its volume is empty, so losing it (or giving it up on a drained node)
// loses nothing. Every start is a new run id, taken before the program
// or its first-start clone runs.
func NeverRan(w Workspace) bool {
	return w.ArchiveKey == nil && w.RunID == ""
}

// restored reports whether a restore from w's current archive completed on
// its volume (the restore marker).
func restored(w Workspace) bool {
	return w.ArchiveKey != nil && w.RestoreMarker != nil && *w.RestoreMarker == *w.ArchiveKey
}

// ArchiveCommitted reports whether the archive of w's op id is its
// archive_key: the archiving (or empty archive, or prebuild) that op id
// names finished.
func ArchiveCommitted(w Workspace) bool {
	return w.OpID != nil && w.ArchiveKey != nil && archive.OwnedBy(*w.ArchiveKey, w.ID) && archive.OpID(*w.ArchiveKey) == *w.OpID
}

// Building reports a builder whose prebuilt home is not made yet: its
// archiving is its prebuild (docs/templates.md).
func Building(w Workspace) bool {
	return w.PrebuildOf != nil && w.ArchiveKey == nil
}

// Recovery is the recovery point of a home: what losing the node that
// holds it would cost. Everything written since ArchivedAt, unless Current.
type Recovery struct {
	// ArchivedAt is when the newest archive of the home was made; nil
	// when it was never archived, and the node holds its only copy.
	ArchivedAt *time.Time `json:"archived_at"`
	// Current: that archive holds all of the home, which has not run
	// since (stopped and saved, or archived).
	Current bool `json:"current"`
}

// RecoveryOf reports the recovery point of w's home.
func RecoveryOf(w Workspace) Recovery {
	if w.ArchiveKey == nil {
		return Recovery{}
	}
	at := w.ArchivedAt
	if at == nil {
		if t := archiveTime(*w.ArchiveKey); !t.IsZero() {
			at = &t
		}
	}
	changed := w.RunID != "" && w.RunID != w.ArchiveRunID
	return Recovery{ArchivedAt: at, Current: !changed}
}
