package workspace

import (
	"testing"

	"github.com/codehub-io/codehub/archive"
)

// volumeConds are the conditions an observation of the volume records.
func volumeConds(v VolumeState) Conditions {
	switch v {
	case VolumeReady:
		return Conditions{CondVolumeReady: {Status: ConditionTrue, Reason: "Ready"}}
	case VolumeUnready:
		return Conditions{CondVolumeReady: {Status: ConditionFalse, Reason: ReasonVolumeCreating}}
	}
	return Conditions{CondVolumeReady: {Status: ConditionFalse, Reason: "NotFound"}}
}

func TestObservedVolume(t *testing.T) {
	for _, v := range []VolumeState{VolumeAbsent, VolumeUnready, VolumeReady} {
		if got := ObservedVolume(volumeConds(v)); got != v {
			t.Errorf("ObservedVolume(%v) = %v", volumeConds(v), got)
		}
	}
	if got := ObservedVolume(nil); got != VolumeAbsent {
		t.Errorf("ObservedVolume of a row never observed = %v", got)
	}
}

func TestLocateHome(t *testing.T) {
	const id = "01jb3x7k9q2m5n8p4r6s0t1v2w"
	opOld, opNew := "01jb3x7k9q2m5n8p4r6s0t1v20", "01jb3x7k9q2m5n8p4r6s0t1v21"
	keyOld, keyNew := archive.Key(id, opOld), archive.Key(id, opNew)
	const ran = "01jb3x7k9q2m5n8p4r6s0t1ran"
	type row struct {
		key, marker, opID, run string
		op                     Operation
		stored                 VolumeState
	}
	cases := []struct {
		name string
		row  row
		now  VolumeState
		want Home
	}{
		{"new workspace", row{}, VolumeAbsent, HomeNowhere},
		{"provisioning, volume being made", row{op: OpProvisioning}, VolumeUnready, HomeNowhere},
		{"provisioning, volume ready", row{op: OpProvisioning, stored: VolumeUnready}, VolumeReady, HomeInVolume},
		{"provisioning, its volume vanished", row{op: OpProvisioning, stored: VolumeUnready}, VolumeAbsent, HomeNowhere},
		{"never archived", row{stored: VolumeReady}, VolumeReady, HomeInVolume},
		{"never archived, node goes away", row{stored: VolumeReady}, VolumeUnready, HomeUnknown},
		{"never archived, node still away", row{stored: VolumeUnready}, VolumeUnready, HomeUnknown},
		{"never archived, volume gone", row{run: ran, stored: VolumeReady}, VolumeAbsent, HomeLost},
		{"never archived, gone while away", row{run: ran, stored: VolumeUnready}, VolumeAbsent, HomeLost},
		// No program ever ran on it: an empty volume, given up on a
		// drained node, loses nothing.
		{"never ran, volume gone", row{stored: VolumeReady}, VolumeAbsent, HomeNowhere},
		{"archiving a never-archived home", row{opID: opNew, op: OpArchiving, stored: VolumeReady}, VolumeReady, HomeInVolume},
		{"empty archive made", row{key: keyOld, opID: opOld}, VolumeAbsent, HomeInArchive},
		{"archived", row{key: keyOld}, VolumeAbsent, HomeInArchive},
		{"restoring, volume being made", row{key: keyOld, op: OpRestoring}, VolumeUnready, HomeInArchive},
		{"restoring, volume ready", row{key: keyOld, op: OpRestoring, stored: VolumeUnready}, VolumeReady, HomeInArchive},
		{"restore given up, its volume left", row{key: keyNew, marker: keyOld, stored: VolumeReady}, VolumeReady, HomeInArchive},
		{"restore given up, its volume gone", row{key: keyOld, stored: VolumeReady}, VolumeAbsent, HomeInArchive},
		{"restored", row{key: keyOld, marker: keyOld, stored: VolumeReady}, VolumeReady, HomeInVolume},
		// The down-node case: Nomad reports the volume of a node that is
		// down as present and not ready. A restore from the current
		// archive completed on it, so it holds a home newer than the
		// archive.
		{"restored, node goes away", row{key: keyOld, marker: keyOld, stored: VolumeReady}, VolumeUnready, HomeUnknown},
		{"restored, node still away", row{key: keyOld, marker: keyOld, stored: VolumeUnready}, VolumeUnready, HomeUnknown},
		{"restored, node away while starting", row{key: keyOld, marker: keyOld, op: OpStarting, stored: VolumeReady}, VolumeUnready, HomeUnknown},
		{"restored, volume gone", row{key: keyOld, marker: keyOld, stored: VolumeReady}, VolumeAbsent, HomeLost},
		{"restored, gone while away", row{key: keyOld, marker: keyOld, stored: VolumeUnready}, VolumeAbsent, HomeLost},
		{"restored home recorded lost", row{key: keyOld, marker: keyOld}, VolumeAbsent, HomeInArchive},
		{"archiving a restored home", row{key: keyOld, marker: keyOld, opID: opNew, op: OpArchiving, stored: VolumeReady}, VolumeReady, HomeInVolume},
		{"archive committed, volume left", row{key: keyNew, marker: keyOld, opID: opNew, stored: VolumeReady}, VolumeReady, HomeInBoth},
		{"archive committed, volume away", row{key: keyNew, marker: keyOld, opID: opNew, stored: VolumeReady}, VolumeUnready, HomeInBoth},
		{"archive committed, volume deleted", row{key: keyNew, marker: keyOld, opID: opNew, op: OpArchiving, stored: VolumeReady}, VolumeAbsent, HomeInArchive},
		{"archive of an older op id", row{key: keyOld, opID: opNew, stored: VolumeReady}, VolumeReady, HomeInArchive},
		// A volume restored from the very archive its op id made may have
		// changed since: the restore wins over the commit.
		{"restored from the op id's own archive", row{key: keyOld, marker: keyOld, opID: opOld, stored: VolumeReady}, VolumeReady, HomeInVolume},
	}
	opt := func(s string) *string {
		if s == "" {
			return nil
		}
		return &s
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			w := Workspace{ID: id, Operation: OpNone, ArchiveKey: opt(c.row.key), RestoreMarker: opt(c.row.marker),
				OpID: opt(c.row.opID), RunID: c.row.run, Conditions: volumeConds(c.row.stored)}
			if c.row.op != "" {
				w.Operation = c.row.op
			}
			if got := LocateHome(w, c.now); got != c.want {
				t.Errorf("LocateHome = %s, want %s", got, c.want)
			}
		})
	}
}

func TestHomeArchived(t *testing.T) {
	for h, want := range map[Home]bool{HomeNowhere: false, HomeInVolume: false, HomeInArchive: true,
		HomeInBoth: true, HomeUnknown: false, HomeLost: false} {
		if got := h.Archived(); got != want {
			t.Errorf("%s.Archived() = %v, want %v", h, got, want)
		}
	}
}
