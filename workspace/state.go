package workspace

// The state model as pure functions: the controller derives the phase with
// them, the service layer uses them to recover an ERROR workspace, and the
// API and proxy show DisplayPhase.

// Level orders the steady phases: a transition moves one level at a time.
// Phases off the ladder (ERROR, DELETING, DELETED) have level -1.
func Level(p Phase) int {
	switch p {
	case PhasePending:
		return 0
	case PhaseArchived:
		return 5
	case PhaseStandby:
		return 10
	case PhaseRunning:
		return 20
	}
	return -1
}

// TargetPhase is the steady phase a desired state asks for.
func TargetPhase(d DesiredState) Phase {
	switch d {
	case DesiredRunning:
		return PhaseRunning
	case DesiredStandby:
		return PhaseStandby
	case DesiredArchived:
		return PhaseArchived
	}
	return PhaseDeleted
}

// ErrorFinal reports whether the recorded error stops retries: a terminal
// reason, or too many failed attempts.
func ErrorFinal(w Workspace) bool {
	if w.ErrorReason == nil {
		return false
	}
	return TerminalReason(*w.ErrorReason) || w.ErrorCount >= MaxErrorCount
}

func (c Conditions) isTrue(name string) bool {
	return c[name].Status == ConditionTrue
}

// InvariantViolated names the broken invariant of a live workspace's last
// observation, or returns "". A container running without its volume means
// the home it writes to is not the one we keep.
func InvariantViolated(w Workspace) string {
	if w.DeletedAt != nil {
		return ""
	}
	if w.Conditions.isTrue(CondContainerReady) && ObservedVolume(w.Conditions) == VolumeAbsent {
		return ReasonContainerWithoutVolume
	}
	return ""
}

// DerivePhase computes the phase from the last observation (conditions),
// where that puts the home (LocateHome), the recorded error and deletion.
// A volume counts only while it holds the home: one that is present but
// not restored from the current archive leaves the phase ARCHIVED, so
// RESTORING runs (again).
func DerivePhase(w Workspace) Phase {
	switch {
	case w.Phase == PhaseDeleted:
		return PhaseDeleted
	case w.Operation == OpDeleting:
		return PhaseDeleting
	case w.Operation == OpNone && (ErrorFinal(w) || InvariantViolated(w) != ""):
		// ERROR never carries an operation: failing one resets it in
		// the same write.
		return PhaseError
	}
	home := LocateHome(w, ObservedVolume(w.Conditions)) == HomeInVolume
	switch {
	case home && w.Conditions.isTrue(CondContainerReady):
		return PhaseRunning
	case home:
		return PhaseStandby
	case w.ArchiveKey != nil:
		return PhaseArchived
	}
	return PhasePending
}

// Display values beyond the phases: what a user sees while an operation runs.
const (
	DisplayProvisioning = "PROVISIONING"
	DisplayRestoring    = "RESTORING"
	DisplayStarting     = "STARTING"
	DisplayStopping     = "STOPPING"
	DisplayArchiving    = "ARCHIVING"
	DisplayDeleting     = "DELETING"
	// DisplayUnavailable: the home is on a node that cannot serve it now
	// (down, gone or drained); the workspace waits for it.
	DisplayUnavailable = "UNAVAILABLE"
)

// BackingUp reports whether the operation of w is a backup: an ARCHIVING
// that keeps the volume, and yields to a wake or a deletion.
func BackingUp(w Workspace) bool {
	return w.Operation == OpArchiving && w.OpBackup
}

// DisplayPhase is what the API and the proxy show. ERROR, DELETING and
// DELETED show as such; while an operation runs its progressive name shows
// (STARTING, STOPPING, ARCHIVING, RESTORING, PROVISIONING; creating the
// empty archive of a new workspace shows as ARCHIVING); otherwise the phase
// (PENDING, ARCHIVED, STANDBY, RUNNING), or UNAVAILABLE while the home's
// node cannot serve it.
func DisplayPhase(w Workspace) string {
	switch w.Phase {
	case PhaseError, PhaseDeleting, PhaseDeleted:
		return string(w.Phase)
	}
	switch w.Operation {
	case OpProvisioning:
		return DisplayProvisioning
	case OpRestoring:
		return DisplayRestoring
	case OpStarting:
		return DisplayStarting
	case OpStopping:
		return DisplayStopping
	case OpArchiving, OpCreateEmptyArchive:
		return DisplayArchiving
	case OpDeleting:
		return DisplayDeleting
	}
	if w.Phase == PhaseRunning {
		return string(w.Phase)
	}
	if _, away := Unavailable(w); away {
		return DisplayUnavailable
	}
	return string(w.Phase)
}

// Steps of bringing a workspace up or down, as error_step names the one a
// failure happened in.
const (
	StepProvision = "provision" // making the home volume
	StepRestore   = "restore"   // filling the home from its archive
	StepArchive   = "archive"   // writing the home to the archive
	StepSchedule  = "schedule"  // placing the program on a node
	StepPull      = "pull"      // fetching the program's image
	StepStart     = "start"     // starting the program
	StepHealth    = "health"    // the program answering its health check
	StepStop      = "stop"      // stopping the program
)

// FailedStep names the step the workspace's recorded failure happened
// in, or "" without one. Reasons that belong to one step say it; the
// others (a timeout, an unreachable backend) failed at the first step of
// coming up whose condition does not hold.
func FailedStep(w Workspace) string {
	if w.ErrorReason == nil {
		return ""
	}
	switch *w.ErrorReason {
	case ReasonArchiveFailed:
		return StepArchive
	case ReasonRestoreFailed, ReasonArchiveCorrupted:
		return StepRestore
	case ReasonUnschedulable:
		return StepSchedule
	case ReasonImagePullFailed:
		return StepPull
	case ReasonStartFailed, ReasonContainerWithoutVolume:
		return StepStart
	case ReasonDataLost:
		return StepProvision
	}
	switch {
	case w.DesiredState == DesiredArchived:
		return StepArchive
	case w.DesiredState == DesiredStandby:
		return StepStop
	case !w.Conditions.isTrue(CondVolumeReady) && w.ArchiveKey != nil:
		return StepRestore
	case !w.Conditions.isTrue(CondVolumeReady):
		return StepProvision
	case !w.Conditions.isTrue(CondContainerReady):
		return StepStart
	case !w.Conditions.isTrue(CondUpstreamReady):
		return StepHealth
	}
	return ""
}
