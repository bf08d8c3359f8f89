package local

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	"github.com/codehub-io/codehub/archive"
	"github.com/codehub-io/codehub/controller"
	"github.com/codehub-io/codehub/firststart"
)

// jobRecord is jobs/ws-{id}-{kind}/job.json: one archive or restore attempt.
type jobRecord struct {
	OpID       string    `json:"op_id"`
	ArchiveKey string    `json:"archive_key"`
	Attempt    int       `json:"attempt"`
	Process    identity  `json:"process"`
	StartedAt  time.Time `json:"started_at"`
}

const jobFile = "job.json"

// SubmitArchive runs `codehub job archive --src HOME` for this attempt.
func (b *Backend) SubmitArchive(ctx context.Context, job controller.JobSpec) error {
	return b.submit(ctx, controller.JobArchive, job)
}

// SubmitRestore runs `codehub job restore --dst HOME` for this attempt.
func (b *Backend) SubmitRestore(ctx context.Context, job controller.JobSpec) error {
	return b.submit(ctx, controller.JobRestore, job)
}

// submit starts the job unless this very attempt was already started
// (running or finished): like an identical Nomad registration, resubmitting
// never reruns a finished job. A different attempt replaces the old one.
func (b *Backend) submit(_ context.Context, kind controller.JobKind, job controller.JobSpec) error {
	wsID := job.WorkspaceID
	if err := checkID(wsID); err != nil {
		return err
	}
	if job.ArchiveKey == "" {
		return fmt.Errorf("%s job of %s: no archive key", kind, wsID)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	dir := b.batchDir(wsID, kind)
	var prev jobRecord
	found, err := b.readRecord(filepath.Join(dir, jobFile), &prev)
	if err != nil {
		return err
	}
	if found && prev.OpID == job.OpID && prev.ArchiveKey == job.ArchiveKey && prev.Attempt == job.Attempt &&
		started(dir, prev) {
		return nil
	}
	if found {
		if err := b.kill(prev.Process); err != nil {
			return fmt.Errorf("replace %s: %w", controller.JobName(wsID, kind), err)
		}
	}
	// Second guard behind the controller's: the job must not read or write
	// a home the workspace is using.
	var ws workspaceState
	if ok, _ := b.readRecord(filepath.Join(b.workspaceDir(wsID), stateFile), &ws); ok && b.alive(ws.Process) {
		return fmt.Errorf("%w: workspace %s is still running", controller.ErrVolumeInUse, wsID)
	}
	if err := b.endLeftovers(wsID); err != nil {
		return fmt.Errorf("%s job of %s: %w", kind, wsID, err)
	}
	home := b.HomeDir(wsID)
	if err := homeExists(home); err != nil {
		return fmt.Errorf("%s job of %s: %w", kind, wsID, err)
	}
	lock := b.lockHome
	if job.Build != nil {
		// The build writes the home as the workspace user; the job locks
		// it once the build is done, before the mover reads it.
		lock = b.adoptHome
	}
	if err := lock(home); err != nil {
		return fmt.Errorf("%s job of %s: %w", kind, wsID, err)
	}
	if err := resetDir(dir); err != nil {
		return fmt.Errorf("%s job of %s: %w", kind, wsID, err)
	}
	l := b.jobLaunch(kind, dir, home, job)
	if l.tag, err = newLaunchTag(); err != nil {
		return err
	}
	rec := jobRecord{
		OpID: job.OpID, ArchiveKey: job.ArchiveKey, Attempt: job.Attempt, StartedAt: time.Now().UTC(),
		Process: identity{BootID: b.bootID, Launch: l.tag},
	}
	// Recorded before the start: after a crash in between, the exit file of
	// a process that did start still reports the outcome, and its tag lets a
	// resubmission stop it before starting the attempt again.
	if err := writeJSON(filepath.Join(dir, jobFile), rec); err != nil {
		return fmt.Errorf("%s job of %s: %w", kind, wsID, err)
	}
	id, err := b.start(l)
	if err != nil {
		return err
	}
	rec.Process = id
	if err := writeJSON(filepath.Join(dir, jobFile), rec); err != nil {
		_ = b.kill(id)
		return fmt.Errorf("%s job of %s: record process: %w", kind, wsID, err)
	}
	b.logger.Info("started job", "job", controller.JobName(wsID, kind), "op_id", job.OpID, "attempt", job.Attempt, "pid", id.PID)
	return nil
}

// started reports whether the process of a recorded attempt was started:
// a record still pending (no pid) without an exit status was left by a
// crash, maybe before the start, and the attempt must run again.
func started(dir string, rec jobRecord) bool {
	if rec.Process.PID != 0 {
		return true
	}
	_, exited := readExit(filepath.Join(dir, exitFile))
	return exited
}

// jobLaunch is the command line and environment of an archive or restore
// job, the same contract as the Nomad batch jobs.
func (b *Backend) jobLaunch(kind controller.JobKind, dir, home string, job controller.JobSpec) launch {
	s3 := b.opts.S3
	flag := "--src"
	if kind == controller.JobRestore {
		flag = "--dst"
	}
	env := []string{
		"HOME=" + dir,
		"ARCHIVE_URL=" + archive.URL(s3.Bucket, job.ArchiveKey),
		"S3_ENDPOINT=" + s3.Endpoint,
		"S3_REGION=" + s3.Region,
		"S3_USE_SSL=" + strconv.FormatBool(s3.UseSSL),
		"S3_ACCESS_KEY=" + s3.AccessKey.Reveal(),
		"S3_SECRET_KEY=" + s3.SecretKey.Reveal(),
	}
	if kind == controller.JobArchive && job.Parent != "" {
		// Only what changed since this archive is uploaded.
		env = append(env, "CODEHUB_ARCHIVE_PARENT="+job.Parent)
	}
	if kind == controller.JobArchive && job.Build != nil {
		return b.prebuildLaunch(dir, home, env, *job.Build)
	}
	return launch{
		program:  b.opts.CodehubBinary,
		args:     []string{"job", string(kind), flag, home},
		env:      childEnv(env...),
		dir:      dir,
		logPath:  filepath.Join(dir, logFile),
		exitPath: filepath.Join(dir, exitFile),
	}
}

// prebuildScript is a prebuild's job: the build ($4 and on: a prebuild's
// first start, as the workspace user, in the home, without the S3 keys),
// which writes the commit it built to a file in the home; then the home is
// locked to codehub's user, the commit file taken out of it, and the data
// mover archives the home under the key that commit completes. $1 is the
// commit file the mover reads, $2 codehub, $3 the home, and the build's
// file is ` + prebuildBuiltFile + ` in it. A failed build prints the result
// line of a build failure.
const prebuildScript = `commitf=$1 codehub=$2 home=$3
shift 3
failed() {
  echo "RESULT=` + archive.ResultFail + ` CODEHUB_ERROR=` + string(archive.CodeBuildFailed) + `"
  exit "$1"
}
cd "$home" || exit 1
env -u S3_ACCESS_KEY -u S3_SECRET_KEY "$@" || failed "$?"
cd / && chown "$(id -u):$(id -g)" "$home" || exit 1
built=$home/` + prebuildBuiltFile + `
if [ -L "$built" ] || [ ! -f "$built" ]; then
  echo "codehub: the build left no commit in $built" >&2
  failed 1
fi
head -c 100 "$built" > "$commitf" && rm -f "$built" || exit 1
exec "$codehub" job archive --commit-file "$commitf" --src "$home"`

// prebuildBuiltFile, at the top of a home being built, is where the build
// writes the commit it built: the workspace user can write nowhere else
// the job can read, and it leaves the home before the archive.
const prebuildBuiltFile = ".codehub-prebuild-commit"

// prebuildLaunch is the launch of a prebuild's archive job: the build of
// spec in home, then the archive of what it made (prebuildScript). env is
// the mover's.
func (b *Backend) prebuildLaunch(dir, home string, env []string, spec controller.WorkspaceSpec) launch {
	for _, name := range slices.Sorted(maps.Keys(spec.Env)) {
		env = append(env, name+"="+spec.Env[name])
	}
	env = append(env, firststart.Env(spec.Repository, "", "", spec.Init, filepath.Join(home, prebuildBuiltFile))...)
	env = append(env, firststart.EnvHome+"="+home)
	if b.runAs != nil {
		env = append(env, b.runAs.env()...)
	}
	program, args := "/bin/sh", []string{"-c", firststart.Script, "sh"}
	if b.runAs != nil {
		program, args = b.runAs.wrap(b.setpriv, program, args)
	}
	return launch{
		program:  "/bin/sh",
		args:     append([]string{"-c", prebuildScript, "sh", filepath.Join(dir, prebuildCommitFile), b.opts.CodehubBinary, home, program}, args...),
		env:      childEnv(env...),
		dir:      dir,
		logPath:  filepath.Join(dir, logFile),
		exitPath: filepath.Join(dir, exitFile),
	}
}

// prebuildCommitFile, in a prebuild job's directory, holds the commit its
// build made, for the data mover.
const prebuildCommitFile = "prebuild-commit"

// StopJob kills a running archive or restore job and keeps its record:
// the job then reads as failed without a result, and PurgeJob forgets it.
func (b *Backend) StopJob(_ context.Context, wsID string, kind controller.JobKind) error {
	if err := checkID(wsID); err != nil {
		return err
	}
	if kind != controller.JobArchive && kind != controller.JobRestore {
		return fmt.Errorf("stop job of %s: %q is not a batch job kind", wsID, kind)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	dir := b.batchDir(wsID, kind)
	var rec jobRecord
	found, err := b.readRecord(filepath.Join(dir, jobFile), &rec)
	if err != nil || !found {
		return err
	}
	if err := b.kill(rec.Process); err != nil {
		return fmt.Errorf("stop %s: %w", filepath.Base(dir), err)
	}
	return nil
}

// PurgeJob forgets the state of a finished job or a stopped workspace. It
// refuses while the process still lives.
func (b *Backend) PurgeJob(_ context.Context, wsID string, kind controller.JobKind) error {
	if err := checkID(wsID); err != nil {
		return err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	dir := b.batchDir(wsID, kind)
	var proc identity
	switch kind {
	case controller.JobWorkspace:
		dir = b.workspaceDir(wsID)
		var st workspaceState
		if _, err := b.readRecord(filepath.Join(dir, stateFile), &st); err != nil {
			return err
		}
		proc = st.Process
	case controller.JobArchive, controller.JobRestore:
		var rec jobRecord
		if _, err := b.readRecord(filepath.Join(dir, jobFile), &rec); err != nil {
			return err
		}
		proc = rec.Process
	default:
		return fmt.Errorf("purge %s: unknown job kind %q", wsID, kind)
	}
	if b.alive(proc) {
		return controller.RefusePurge(filepath.Base(dir), fmt.Sprintf("process %d is alive", proc.PID))
	}
	// Without the record nothing could find what the launch left running.
	if err := b.kill(proc); err != nil {
		return fmt.Errorf("purge %s: %w", filepath.Base(dir), err)
	}
	if err := os.RemoveAll(dir); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("purge %s: %w", filepath.Base(dir), err)
	}
	return nil
}
