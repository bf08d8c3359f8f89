package workspace

import (
	"encoding/json"
	"time"
)

// Phase is the observed level of a workspace, derived from its conditions.
type Phase string

const (
	PhasePending  Phase = "PENDING"
	PhaseArchived Phase = "ARCHIVED"
	PhaseStandby  Phase = "STANDBY"
	PhaseRunning  Phase = "RUNNING"
	PhaseError    Phase = "ERROR"
	PhaseDeleting Phase = "DELETING"
	PhaseDeleted  Phase = "DELETED"
)

// DesiredState is what the owner (or a policy acting for them) asked for.
type DesiredState string

const (
	DesiredRunning  DesiredState = "RUNNING"
	DesiredStandby  DesiredState = "STANDBY"
	DesiredArchived DesiredState = "ARCHIVED"
	DesiredDeleted  DesiredState = "DELETED"
)

// Cause is who set a workspace's desired state.
type Cause string

const (
	// CauseUser: the owner, through the API or by opening the workspace.
	CauseUser Cause = "user"
	// CauseIdle: the TTL runner, after the workspace went unused.
	CauseIdle Cause = "idle"
	// CauseSchedule: the owner's autostart schedule.
	CauseSchedule Cause = "schedule"
	// CauseAdmin: an administrator stopped or archived another user's
	// workspace.
	CauseAdmin Cause = "admin"
	// CausePrebuild: the prebuild runner made a builder, asked to be
	// archived from the start (its archiving is its prebuild).
	CausePrebuild Cause = "prebuild"
)

// Operation is the single in-flight transition of a workspace.
type Operation string

const (
	OpNone               Operation = "NONE"
	OpProvisioning       Operation = "PROVISIONING"
	OpRestoring          Operation = "RESTORING"
	OpStarting           Operation = "STARTING"
	OpStopping           Operation = "STOPPING"
	OpArchiving          Operation = "ARCHIVING"
	OpCreateEmptyArchive Operation = "CREATE_EMPTY_ARCHIVE"
	OpDeleting           Operation = "DELETING"
)

// Condition names (docs/lifecycle.md).
const (
	CondVolumeReady    = "storage.volume_ready"
	CondArchiveReady   = "storage.archive_ready"
	CondContainerReady = "infra.container_ready"
	CondUpstreamReady  = "infra.upstream_ready"
	CondHealthy        = "policy.healthy"
	// CondMoving is True while the home moves off an evacuated node,
	// until the workspace is back in its desired state elsewhere; False
	// while it waits for its turn, and once it has moved.
	CondMoving = "storage.moving"
)

// ConditionStatus is the tri-state of a condition.
type ConditionStatus string

const (
	ConditionTrue    ConditionStatus = "True"
	ConditionFalse   ConditionStatus = "False"
	ConditionUnknown ConditionStatus = "Unknown"
)

// Condition is one observed fact about a workspace.
type Condition struct {
	Status  ConditionStatus `json:"status"`
	Reason  string          `json:"reason,omitempty"`
	Message string          `json:"message,omitempty"`
	// Node names the node holding the home volume (storage.volume_ready
	// only), so admins see where a home is.
	Node               string    `json:"node,omitempty"`
	LastTransitionTime time.Time `json:"last_transition_time"`
}

// Conditions maps condition names to their latest observation.
type Conditions map[string]Condition

// Reasons recorded in error_reason. Terminal ones stop retries at once.
const (
	ReasonTimeout                = "Timeout"
	ReasonDataLost               = "DataLost"
	ReasonImagePullFailed        = "ImagePullFailed"
	ReasonContainerWithoutVolume = "ContainerWithoutVolume"
	ReasonArchiveCorrupted       = "ArchiveCorrupted"
	ReasonUnreachable            = "Unreachable"
	ReasonUnschedulable          = "Unschedulable"
	ReasonArchiveFailed          = "ArchiveFailed"
	ReasonRestoreFailed          = "RestoreFailed"
	ReasonStartFailed            = "StartFailed"
	ReasonBackendError           = "BackendError"
	// ReasonBuildFailed: a prebuild's clone or init failed; trying again
	// builds the same.
	ReasonBuildFailed = "BuildFailed"
)

// TerminalReason reports whether a failure with this reason must not be retried.
func TerminalReason(reason string) bool {
	switch reason {
	case ReasonTimeout, ReasonDataLost, ReasonImagePullFailed, ReasonContainerWithoutVolume, ReasonArchiveCorrupted, ReasonBuildFailed:
		return true
	}
	return false
}

// MaxErrorCount is the number of failed attempts after which a workspace is ERROR.
const MaxErrorCount = 3

// Workspace is one row of the workspaces table.
type Workspace struct {
	ID           string       `db:"id"`
	OwnerID      string       `db:"owner_id"`
	Name         string       `db:"name"`
	Description  string       `db:"description"`
	Image        string       `db:"image"`
	DesiredState DesiredState `db:"desired_state"`
	Phase        Phase        `db:"phase"`
	Operation    Operation    `db:"operation"`
	OpID         *string      `db:"op_id"`
	OpStartedAt  *time.Time   `db:"op_started_at"`
	OpAttempt    int          `db:"op_attempt"`
	OpBackup     bool         `db:"op_backup"` // an ARCHIVING that is a backup keeps the volume
	Conditions   Conditions   `db:"conditions"`
	ArchiveKey   *string      `db:"archive_key"`
	// ArchivedAt is when the archive at ArchiveKey was made (nil when
	// unknown: see ArchiveTime).
	ArchivedAt    *time.Time `db:"archived_at"`
	RestoreMarker *string    `db:"restore_marker"`
	// RunID names the current run of the workspace's program; every
	// start is a new run (see UpstreamTokens).
	RunID        string `db:"run_id"`
	ArchiveRunID string `db:"archive_run_id"` // the RunID archive_key was made under
	// PreviousRunID is the RunID the current start replaced: a start
	// whose program never ran gives it back (its node drained first).
	PreviousRunID  string         `db:"previous_run_id"`
	ErrorReason    *string        `db:"error_reason"`
	ErrorMessage   *string        `db:"error_message"`
	ErrorCount     int            `db:"error_count"`
	NextAttemptAt  *time.Time     `db:"next_attempt_at"`
	ObservedAt     *time.Time     `db:"observed_at"`
	PhaseChangedAt time.Time      `db:"phase_changed_at"`
	LastAccessAt   time.Time      `db:"last_access_at"`
	StandbyTTL     *time.Duration `db:"standby_ttl"`
	ArchiveTTL     *time.Duration `db:"archive_ttl"`
	// DesiredBy and DesiredAt tell who last set the desired state, and
	// when: why a workspace stopped or was archived.
	DesiredBy Cause      `db:"desired_by"`
	DesiredAt *time.Time `db:"desired_at"`
	// KeepUntil: the owner asked to keep the workspace running until then;
	// it is not stopped for idleness before.
	KeepUntil *time.Time `db:"keep_until"`
	// The autostart schedule (see Schedule): weekday bits, "HH:MM", time
	// zone, and the last scheduled start acted on.
	AutostartDays int        `db:"autostart_days"`
	AutostartAt   *string    `db:"autostart_at"`
	AutostartTZ   *string    `db:"autostart_tz"`
	AutostartDone *time.Time `db:"autostart_done"`
	Version       int64      `db:"version"`
	CreatedAt     time.Time  `db:"created_at"`
	UpdatedAt     time.Time  `db:"updated_at"`
	DeletedAt     *time.Time `db:"deleted_at"`
	// Template names what the workspace is made of; TemplateVersion is
	// the version it was last started from (at creation, the one it will
	// start from; empty: started before templates); Parameters the values
	// its owner chose.
	Template        string         `db:"template"`
	TemplateVersion string         `db:"template_version"`
	Parameters      map[string]any `db:"parameters"`
	// PrebuildOf names the prebuild this workspace builds; FromPrebuild
	// the prebuild whose home it started from (docs/templates.md).
	PrebuildOf   *string `db:"prebuild_of"`
	FromPrebuild *string `db:"from_prebuild"`
	// PoolOf names the template whose warm pool holds this workspace.
	PoolOf *string `db:"pool_of"`
}

// MarshalJSON keeps the conditions map non-nil in JSON.
func (c Conditions) MarshalJSON() ([]byte, error) {
	if c == nil {
		return []byte("{}"), nil
	}
	return json.Marshal(map[string]Condition(c))
}
