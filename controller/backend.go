package controller

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/codehub-io/codehub/archive"
)

// Backend is what the controller needs from the infrastructure that runs
// workspaces (Nomad in production, local processes on one machine).
// Actuators submit and return at once; completion is judged from Observe.
// A pass acts on several workspaces at once (Config.Parallel), so
// actuators may run concurrently for different workspaces, never for one.
// Every actuator may be called again with the same arguments: the repeat
// returns nil and changes nothing, and stopping, purging or deleting what
// is gone already succeeds. Once a workspace's volume is deleted and its
// jobs purged, Observe reports nothing of it. Names and job results follow
// protocol.go; internal/backendtest holds every backend to this contract.
type Backend interface {
	// Observe returns the observed state of every workspace the backend
	// knows, in a number of backend calls that does not grow with the
	// number of workspaces.
	Observe(ctx context.Context) (Snapshot, error)
	ProvisionVolume(ctx context.Context, spec VolumeSpec) error
	// DeleteVolume deletes the workspace's volume that Observe reported as
	// volumeID, and nothing else: a volume of the same name created since
	// (a newer leader's restore) is not the one the caller judged. It
	// returns ErrVolumeInUse while the volume is still claimed, and nil
	// once the volume is gone.
	DeleteVolume(ctx context.Context, wsID, volumeID string) error
	// StartWorkspace returns ErrNoVolume when the workspace has no volume.
	StartWorkspace(ctx context.Context, spec WorkspaceSpec) error
	// StopWorkspace stops the workspace without forgetting it: the container
	// counts as gone only once Observe reports no live allocation. With
	// StopSave a backend that can saves the home as the program stops
	// (Observed.StopArchive reports it).
	StopWorkspace(ctx context.Context, wsID string, mode StopMode) error
	// GiveUpStopArchive ends the stop archive of the workspace job, which
	// keeps trying while S3 is away, with its failure as its result, so
	// the stop can end; a backup saves the home later. It reaches only an
	// attempt under way, so a caller repeats it until the stop ends. A
	// backend without stop archives does nothing.
	GiveUpStopArchive(ctx context.Context, wsID string) error
	// SubmitArchive and SubmitRestore start the attempt unless it was
	// started already, and return ErrNoVolume when the workspace has no
	// volume.
	SubmitArchive(ctx context.Context, job JobSpec) error
	SubmitRestore(ctx context.Context, job JobSpec) error
	// StopJob ends a running archive or restore job without forgetting it:
	// it counts as ended only once Observe reports its result terminal,
	// which is JobFailed unless it had finished (JobRun.Result).
	StopJob(ctx context.Context, wsID string, kind JobKind) error
	// PurgeJob forgets a terminal archive/restore job or a stopped workspace
	// job once its result is recorded. It returns ErrJobLive while the job
	// may still run (RefusePurge).
	PurgeJob(ctx context.Context, wsID string, kind JobKind) error
}

// StopMode says what a stop does with the home the program leaves behind.
type StopMode int

const (
	// StopSave archives the home as its program stops, where the backend
	// can (Nomad's stop archive), so a stopped home is in S3 and a drain
	// can move it without anything running on the drained node.
	StopSave StopMode = iota
	// StopDiscard saves nothing: the home is about to be deleted.
	StopDiscard
)

// Notifier is implemented by backends that can tell the controller early
// that something changed (an event stream). It is only a hint.
type Notifier interface {
	// Watch calls wake whenever the backend saw a change, until ctx ends.
	Watch(ctx context.Context, wake func()) error
}

// Upstreams resolves a running workspace to the address the proxy dials.
type Upstreams interface {
	Resolve(ctx context.Context, wsID string) (hostport string, err error)
}

// ErrNoUpstream is returned by Upstreams when no healthy instance exists.
var ErrNoUpstream = errors.New("no healthy upstream")

// ErrVolumeInUse means the volume is still claimed by an allocation: retry.
var ErrVolumeInUse = errors.New("volume in use")

// JobKind names the objects a workspace owns in the backend.
type JobKind string

const (
	JobWorkspace JobKind = "workspace"
	JobArchive   JobKind = "archive"
	JobRestore   JobKind = "restore"
)

// VolumeSpec describes the home volume of a workspace.
type VolumeSpec struct {
	WorkspaceID string
	UID, GID    int
	// AvoidNodes are node ids that must not get the volume: nodes being
	// evacuated.
	AvoidNodes []string
}

// WorkspaceSpec is everything needed to render and start ws-{id}.
type WorkspaceSpec struct {
	WorkspaceID string
	// RunID names this start; the program's upstream token is derived
	// from it, and a new run replaces a program of an older one.
	RunID   string
	OwnerID string
	// ParentArchive is the workspace's archive when the run starts: the
	// stop archive of the run uploads only what changed since.
	ParentArchive string
	Image         string
	// Name is the workspace's name as its owner gave it, for display.
	Name string

	// What the workspace runs, from its template; empty or zero fields
	// keep the backend's own workspace settings. Entrypoint and Args
	// follow the image under docker; Command and Args run elsewhere.
	Entrypoint []string
	Command    string
	Args       []string
	// CPU in MHz; Memory reserved and MemoryMax the most it may use (0:
	// Memory), in MiB.
	CPU, Memory, MemoryMax int
	// Env is added to the program's environment: the template's, which
	// the operator wrote.
	Env map[string]string
	// UserEnv is added to the program's environment too: what the user
	// chose (the template's parameters). A backend passes it literally,
	// never where its orchestrator would interpolate it.
	UserEnv map[string]string
	// Repository and Dotfiles (the owner's) are git URLs cloned into the
	// home before the program starts, when the home is empty (the
	// workspace's first start); see package firststart.
	Repository string
	Dotfiles   string
	// GitToken is the owner's git credential for those clones. It is a
	// secret: never rendered, and never in the program's environment.
	GitToken string
	// Init are the template's commands run in the checkout after a first
	// start's clone (package firststart).
	Init []string
}

// FirstStart reports whether a start runs the first-start step.
func (s WorkspaceSpec) FirstStart() bool { return s.Repository != "" || s.Dotfiles != "" }

// JobSpec is one archive or restore attempt.
type JobSpec struct {
	WorkspaceID string
	OpID        string
	ArchiveKey  string
	Attempt     int
	// Parent is the workspace's archive an archive job uploads only the
	// changes since ("" for a full archive).
	Parent string
	// Backup marks the archive job of a backup: the home stays on its
	// volume, and a backend that can keeps the job trying until S3 takes
	// it, so that something holds the home's way off its node.
	Backup bool
	// Build makes the archive job a prebuild's: first Build's first start
	// (clone, init) in the empty home, as a prebuild's, then the archive
	// of what it made. ArchiveKey is then the prebuild's prefix
	// (archive.PrebuildPrefix), which the job completes with the commit
	// it built. A failed build fails the job with archive.CodeBuildFailed
	// and its output.
	Build *WorkspaceSpec
}

// Snapshot is one consistent observation of every workspace.
type Snapshot struct {
	Workspaces map[string]Observed
}

// JobStatus is the state of a batch job as the backend sees it.
type JobStatus string

const (
	JobPending   JobStatus = "pending"
	JobRunning   JobStatus = "running"
	JobSucceeded JobStatus = "succeeded"
	JobFailed    JobStatus = "failed"
)

// JobResult is the latest archive or restore job of a workspace.
type JobResult struct {
	OpID       string
	ArchiveKey string
	Attempt    int
	Status     JobStatus
	ExitCode   int
	// ErrorCode is the CODEHUB_ERROR the job printed on failure, UNKNOWN
	// when it printed none.
	ErrorCode archive.Code
	Message   string
}

// Observed is what the backend reports for one workspace.
type Observed struct {
	// VolumeExists: a volume object exists (possibly still being created).
	VolumeExists bool
	// VolumeReady: the volume is created and usable.
	VolumeReady bool
	// VolumeID is the backend's id of that volume.
	VolumeID string
	// Node names the node holding the volume ("" where the backend has
	// no nodes). NodeAway is set while that node cannot serve the volume:
	// workspace.ReasonNodeDown or ReasonNodeGone (the volume then is not
	// ready), or ReasonNodeIneligible (ready, but nothing new can be
	// placed on it).
	NodeID   string
	Node     string
	NodeAway string
	// NodeDraining: that node was drained or made ineligible, whatever
	// its status (it may also be down): its operator means to empty it.
	NodeDraining bool
	// Evacuating is set by the controller when the volume's node is being
	// evacuated (an admin asked for every home to leave it); Move when
	// this home's move is under way (a bounded number at a time).
	Evacuating bool
	Move       bool
	// ContainerLive: some allocation/process of ws-{id} is not terminal.
	ContainerLive bool
	// RunStarted: an allocation of the workspace job's current
	// registration was placed and left pending (its program may have run
	// and written to the home). Read only for a start on a node that
	// takes no new allocation.
	RunStarted bool
	// Preparing: an allocation of that registration is placed on a node
	// that is still preparing it (fetching an artifact or an image) before
	// the program runs. RunningSince is when the program of the current
	// allocation began running, zero when none runs or the backend cannot
	// say. A start's deadline counts the program's own time, not a busy
	// node's queue (plan.go, deadlineSince).
	Preparing    bool
	RunningSince time.Time
	// Submitted is when the workspace job's current registration, not
	// stopped, was submitted, and SubmittedRun the run it starts; zero
	// when there is none. Only a backend that says so reports them
	// (SubmissionReporter): a start's deadline then does not run while
	// the controller has yet to submit it.
	Submitted    time.Time
	SubmittedRun string
	// UpstreamReady: the workspace passes its health check.
	UpstreamReady bool
	// Failure is set when the workspace job cannot run (image pull failure,
	// nothing can place it, crash loop).
	Failure *Failure
	Archive *JobResult
	Restore *JobResult
	// StopArchive is the archive a workspace job's poststop task made of
	// the home when something other than codehub (a node drain) stopped
	// its program: OpID is the run, ArchiveKey archive.Key(id, run).
	// Backends without such a task never report one, nor does a stop
	// codehub asked for.
	StopArchive *JobResult
}

// SubmissionReporter is a backend that reports each workspace job's
// submission (Observed.Submitted, SubmittedRun). A backend whose start
// returns only once the program is launched (single-machine mode) has no
// submission to report: there the deadline counts from the operation.
type SubmissionReporter interface {
	ReportsSubmissions() bool
}

// Failure is a classified backend problem.
type Failure struct {
	Reason   string // one of the workspace.Reason* constants
	Message  string
	Terminal bool
}

func (f *Failure) Error() string { return fmt.Sprintf("%s: %s", f.Reason, f.Message) }

// How much of a failed program's output a failure message carries: enough
// for a stack trace's cause (code-server prints the error a few lines above
// its last one, "Node.js v20…"). Backends read about OutputBytes of the
// output's end and pass it through WithOutput.
const (
	OutputLines = 12
	OutputBytes = 2 << 10
)

// WithOutput appends to a failure message the last OutputLines non-blank
// lines of what the program printed, within OutputBytes; msg alone when it
// printed nothing.
func WithOutput(msg, output string) string {
	var kept []string
	size := 0
	lines := strings.Split(output, "\n")
	for i := len(lines) - 1; i >= 0 && len(kept) < OutputLines; i-- {
		l := strings.TrimRight(lines[i], " \t\r")
		if strings.TrimSpace(l) == "" {
			continue
		}
		if size+len(l)+1 > OutputBytes {
			break
		}
		size += len(l) + 1
		kept = append(kept, l)
	}
	if len(kept) == 0 {
		return msg
	}
	slices.Reverse(kept)
	return msg + ", its output ending:\n" + strings.Join(kept, "\n")
}

// JobProgress is the latest progress report of a workspace's archive or
// restore job, of the attempt of operation OpID.
type JobProgress struct {
	OpID string
	archive.Progress
}

// ErrNoProgress means the job has reported no progress yet (or does not
// exist).
var ErrNoProgress = errors.New("no progress reported")
