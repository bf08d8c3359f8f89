package workspace

import (
	"testing"
	"time"
)

func conds(volume, container bool) Conditions {
	c := Conditions{}
	status := func(b bool) ConditionStatus {
		if b {
			return ConditionTrue
		}
		return ConditionFalse
	}
	c[CondVolumeReady] = Condition{Status: status(volume)}
	c[CondContainerReady] = Condition{Status: status(container)}
	return c
}

// away is the observation of a volume whose node is away.
func away(container bool) Conditions {
	c := conds(false, container)
	c[CondVolumeReady] = Condition{Status: ConditionFalse, Reason: ReasonVolumeCreating}
	return c
}

func ptr[T any](v T) *T { return &v }

func TestDerivePhase(t *testing.T) {
	key := "archives/x/y/home.tar.zst"
	now := time.Now()
	cases := []struct {
		name string
		w    Workspace
		want Phase
	}{
		{"nothing", Workspace{Conditions: conds(false, false)}, PhasePending},
		{"volume", Workspace{Conditions: conds(true, false)}, PhaseStandby},
		{"volume and container", Workspace{Conditions: conds(true, true)}, PhaseRunning},
		{"archive only", Workspace{Conditions: conds(false, false), ArchiveKey: &key}, PhaseArchived},
		{"volume not restored", Workspace{Conditions: conds(true, false), ArchiveKey: &key}, PhaseArchived},
		{"volume restored", Workspace{Conditions: conds(true, false), ArchiveKey: &key, RestoreMarker: &key}, PhaseStandby},
		{"restored and running", Workspace{Conditions: conds(true, true), ArchiveKey: &key, RestoreMarker: &key}, PhaseRunning},
		{"stale marker", Workspace{Conditions: conds(true, false), ArchiveKey: &key, RestoreMarker: ptr("old")}, PhaseArchived},
		{"container without volume", Workspace{Conditions: conds(false, true)}, PhaseError},
		// A volume whose node is away holds no home the phase can use,
		// and a container Nomad still counts on that node breaks nothing.
		{"restored, node away", Workspace{Conditions: away(false), ArchiveKey: &key, RestoreMarker: &key}, PhaseArchived},
		{"container with its volume away", Workspace{Conditions: away(true)}, PhasePending},
		{"container without volume, deleted", Workspace{Conditions: conds(false, true), DeletedAt: &now}, PhasePending},
		{"terminal error", Workspace{Conditions: conds(true, false), ErrorReason: ptr(ReasonTimeout), ErrorCount: 1}, PhaseError},
		{"retryable error", Workspace{Conditions: conds(true, false), ErrorReason: ptr(ReasonStartFailed), ErrorCount: 2}, PhaseStandby},
		{"retries exhausted", Workspace{Conditions: conds(true, false), ErrorReason: ptr(ReasonStartFailed), ErrorCount: 3}, PhaseError},
		{"deleting", Workspace{Conditions: conds(true, true), Operation: OpDeleting}, PhaseDeleting},
		{"deleted stays", Workspace{Phase: PhaseDeleted}, PhaseDeleted},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if c.w.Operation == "" {
				c.w.Operation = OpNone
			}
			if got := DerivePhase(c.w); got != c.want {
				t.Errorf("DerivePhase = %s, want %s", got, c.want)
			}
		})
	}
}

func TestDisplayPhase(t *testing.T) {
	cases := []struct {
		phase Phase
		op    Operation
		want  string
	}{
		{PhasePending, OpNone, "PENDING"},
		{PhasePending, OpProvisioning, "PROVISIONING"},
		{PhasePending, OpCreateEmptyArchive, "ARCHIVING"},
		{PhaseArchived, OpNone, "ARCHIVED"},
		{PhaseArchived, OpRestoring, "RESTORING"},
		{PhaseStandby, OpNone, "STANDBY"},
		{PhaseStandby, OpStarting, "STARTING"},
		{PhaseStandby, OpArchiving, "ARCHIVING"},
		{PhaseArchived, OpArchiving, "ARCHIVING"},
		{PhaseRunning, OpNone, "RUNNING"},
		{PhaseRunning, OpStopping, "STOPPING"},
		{PhaseError, OpNone, "ERROR"},
		{PhaseDeleting, OpDeleting, "DELETING"},
		{PhaseDeleted, OpNone, "DELETED"},
	}
	for _, c := range cases {
		if got := DisplayPhase(Workspace{Phase: c.phase, Operation: c.op}); got != c.want {
			t.Errorf("DisplayPhase(%s, %s) = %s, want %s", c.phase, c.op, got, c.want)
		}
	}
}

func TestFailedStep(t *testing.T) {
	ready := func(names ...string) Conditions {
		c := Conditions{}
		for _, n := range names {
			c[n] = Condition{Status: ConditionTrue}
		}
		return c
	}
	key := "archives/x/y/home.tar.zst"
	cases := []struct {
		name    string
		reason  string
		desired DesiredState
		conds   Conditions
		archive *string
		want    string
	}{
		{"no failure", "", DesiredRunning, nil, nil, ""},
		{"image", ReasonImagePullFailed, DesiredRunning, ready(CondVolumeReady), nil, StepPull},
		{"program exited", ReasonStartFailed, DesiredRunning, ready(CondVolumeReady), nil, StepStart},
		{"no node fits", ReasonUnschedulable, DesiredRunning, ready(CondVolumeReady), nil, StepSchedule},
		{"restore", ReasonRestoreFailed, DesiredRunning, ready(CondVolumeReady), &key, StepRestore},
		{"damaged archive", ReasonArchiveCorrupted, DesiredRunning, nil, &key, StepRestore},
		{"archive", ReasonArchiveFailed, DesiredArchived, ready(CondVolumeReady), nil, StepArchive},
		{"timed out making the home", ReasonTimeout, DesiredRunning, nil, nil, StepProvision},
		{"timed out before the restore", ReasonTimeout, DesiredRunning, nil, &key, StepRestore},
		{"timed out starting", ReasonTimeout, DesiredRunning, ready(CondVolumeReady), nil, StepStart},
		{"timed out answering", ReasonTimeout, DesiredRunning, ready(CondVolumeReady, CondContainerReady), nil, StepHealth},
		{"backend down while archiving", ReasonBackendError, DesiredArchived, ready(CondVolumeReady), nil, StepArchive},
		{"timed out stopping", ReasonTimeout, DesiredStandby, ready(CondVolumeReady, CondContainerReady), nil, StepStop},
		{"nothing left to blame", ReasonTimeout, DesiredRunning, ready(CondVolumeReady, CondContainerReady, CondUpstreamReady), nil, ""},
	}
	for _, c := range cases {
		w := Workspace{DesiredState: c.desired, Conditions: c.conds, ArchiveKey: c.archive}
		if c.reason != "" {
			w.ErrorReason = &c.reason
		}
		if got := FailedStep(w); got != c.want {
			t.Errorf("%s: %q, want %q", c.name, got, c.want)
		}
	}
}
