package controller

import (
	"errors"
	"fmt"
	"strings"

	"github.com/codehub-io/codehub/archive"
)

// What every backend shares beyond the Backend interface: the names of a
// workspace's objects, what the run of a batch job means as a JobResult,
// and when a job may be forgotten. They sit beside Backend, JobKind and
// JobResult because they are the same contract: a package of their own
// would take every type from here, and two backends that each wrote them
// would drift. internal/backendtest holds every backend to them.

// Errors of the Backend contract besides ErrVolumeInUse.
var (
	// ErrNoVolume: StartWorkspace, SubmitArchive or SubmitRestore found no
	// volume for the workspace and started nothing.
	ErrNoVolume = errors.New("workspace has no volume")
	// ErrJobLive: PurgeJob refused a job whose program may still run.
	ErrJobLive = errors.New("job still running")
)

// NamePrefix starts the name of every object of a workspace.
const NamePrefix = "ws-"

// volumeSuffix ends the name of a home volume.
const volumeSuffix = "-home"

// JobName names a workspace's job or process (docs/architecture.md): ws-{id} for
// the workspace itself, ws-{id}-archive and ws-{id}-restore for its batch
// jobs.
func JobName(wsID string, kind JobKind) string {
	if kind == JobWorkspace {
		return NamePrefix + wsID
	}
	return NamePrefix + wsID + "-" + string(kind)
}

// VolumeName names a workspace's home volume: ws-{id}-home.
func VolumeName(wsID string) string { return NamePrefix + wsID + volumeSuffix }

// ParseJobName returns the workspace and kind of a name JobName gave.
func ParseJobName(name string) (wsID string, kind JobKind, ok bool) {
	wsID, suffix, ok := splitName(name)
	if !ok {
		return "", "", false
	}
	switch suffix {
	case "":
		return wsID, JobWorkspace, true
	case "-" + string(JobArchive):
		return wsID, JobArchive, true
	case "-" + string(JobRestore):
		return wsID, JobRestore, true
	}
	return "", "", false
}

// ParseVolumeName returns the workspace of a name VolumeName gave.
func ParseVolumeName(name string) (wsID string, ok bool) {
	wsID, suffix, ok := splitName(name)
	if !ok || suffix != volumeSuffix {
		return "", false
	}
	return wsID, true
}

// splitName cuts a name after the workspace id it starts with.
func splitName(name string) (wsID, suffix string, ok bool) {
	rest, found := strings.CutPrefix(name, NamePrefix)
	if !found || len(rest) < workspaceIDLen {
		return "", "", false
	}
	wsID, suffix = rest[:workspaceIDLen], rest[workspaceIDLen:]
	return wsID, suffix, ValidWorkspaceID(wsID)
}

// workspaceIDLen is the length of a ULID.
const workspaceIDLen = 26

// ValidWorkspaceID accepts what workspace ids are, lower-case ULIDs
// (Crockford base32, without i, l, o and u), so a name made from one can
// never reach outside its directory or prefix.
func ValidWorkspaceID(id string) bool {
	if len(id) != workspaceIDLen {
		return false
	}
	for _, c := range id {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'z') || c == 'i' || c == 'l' || c == 'o' || c == 'u' {
			return false
		}
	}
	return true
}

// RunState is how far the program of a batch job attempt got.
type RunState int

const (
	// RunPending: not started yet (being placed, fetched or launched).
	RunPending RunState = iota
	// RunLive: started and not ended.
	RunLive
	// RunExited: ended by itself, with an exit status of its own.
	RunExited
	// RunEnded: ended without one: stopped, killed, or lost with its node.
	RunEnded
)

// JobRun is what a backend saw of the program of one archive or restore
// attempt.
type JobRun struct {
	State RunState
	// ExitCode is the exit status of a run that exited.
	ExitCode int
	// Code is the CODEHUB_ERROR of the data mover's result line, empty
	// when none was read.
	Code archive.Code
	// Message says why the run is pending or failed as only the backend
	// knows it (a placement or driver error); empty for the usual words.
	Message string
	// Output is the end of what the program printed.
	Output string
}

// Result reports attempt spec, run as r. This is the rule every backend
// reports by: only a program that exited by itself with status 0 succeeded
// (the data mover exits 0 after RESULT=OK and never otherwise); one that
// was stopped, killed or lost failed, whatever it had done, so the
// controller retries it; and a failure the data mover gave no code is
// UNKNOWN.
func (r JobRun) Result(spec JobSpec) *JobResult {
	res := &JobResult{OpID: spec.OpID, ArchiveKey: spec.ArchiveKey, Attempt: spec.Attempt}
	switch {
	case r.State == RunPending:
		res.Status, res.Message = JobPending, r.Message
		return res
	case r.State == RunLive:
		res.Status = JobRunning
		return res
	case r.State == RunExited && r.ExitCode == 0:
		res.Status = JobSucceeded
		return res
	}
	res.Status, res.ExitCode, res.ErrorCode = JobFailed, r.ExitCode, r.Code
	msg := r.Message
	if r.State != RunExited {
		res.ExitCode = -1
		if msg == "" {
			msg = "job ended before it finished (stopped, killed or lost)"
		}
	}
	if msg == "" {
		msg = fmt.Sprintf("job exited with code %d", r.ExitCode)
	}
	if res.ErrorCode == "" {
		res.ErrorCode = archive.CodeUnknown
	}
	res.Message = WithOutput(msg, r.Output)
	return res
}

// RefusePurge is the rule of every PurgeJob: job name is forgotten only
// once nothing of it runs, since a purged job would hide a live program
// from every later observation. live describes what still runs.
func RefusePurge(name string, live ...string) error {
	if len(live) == 0 {
		return nil
	}
	return fmt.Errorf("%w: refusing to purge %s: %s", ErrJobLive, name, strings.Join(live, ", "))
}
