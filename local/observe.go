package local

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/codehub-io/codehub/archive"
	"github.com/codehub-io/codehub/controller"
	"github.com/codehub-io/codehub/workspace"
)

// seenWorkspace is what one observation read about a workspace process.
type seenWorkspace struct {
	state workspaceState
	live  bool
	ready bool
	// exited: the program ended and recorded this status; output is the
	// end of what it printed.
	exited   bool
	exitCode int
	output   string
}

// seenJob is what one observation read about an archive or restore job.
type seenJob struct {
	record   jobRecord
	live     bool
	exited   bool
	exitCode int
	// code is the CODEHUB_ERROR of the job's last result line.
	code   archive.Code
	output string
}

// listing is the raw result of reading the data dir.
type listing struct {
	volumes    map[string]bool
	workspaces map[string]seenWorkspace
	archives   map[string]seenJob
	restores   map[string]seenJob
}

// Observe reads the data dir once: homes, workspace processes (probing the
// health of live ones, concurrently) and jobs.
func (b *Backend) Observe(ctx context.Context) (controller.Snapshot, error) {
	l, err := b.list()
	if err != nil {
		return controller.Snapshot{}, err
	}
	b.probe(ctx, l.workspaces)
	return assemble(l), nil
}

func (b *Backend) list() (listing, error) {
	l := listing{
		volumes:    make(map[string]bool),
		workspaces: make(map[string]seenWorkspace),
		archives:   make(map[string]seenJob),
		restores:   make(map[string]seenJob),
	}
	vols, err := readNames(volumesDir(b.opts.DataDir))
	if err != nil {
		return l, err
	}
	for _, name := range vols {
		if wsID, ok := controller.ParseVolumeName(name); ok {
			l.volumes[wsID] = true
		}
	}
	runs, err := readNames(runDir(b.opts.DataDir))
	if err != nil {
		return l, err
	}
	for _, name := range runs {
		wsID, kind, ok := controller.ParseJobName(name)
		if !ok || kind != controller.JobWorkspace {
			continue
		}
		if w, found, err := b.readWorkspace(wsID); err != nil {
			return l, err
		} else if found {
			l.workspaces[wsID] = w
		}
	}
	jobs, err := readNames(jobsDir(b.opts.DataDir))
	if err != nil {
		return l, err
	}
	for _, name := range jobs {
		wsID, kind, ok := controller.ParseJobName(name)
		if !ok || kind == controller.JobWorkspace {
			continue
		}
		j, found, err := b.readJob(wsID, kind)
		if err != nil {
			return l, err
		}
		if !found {
			continue
		}
		if kind == controller.JobArchive {
			l.archives[wsID] = j
		} else {
			l.restores[wsID] = j
		}
	}
	return l, nil
}

func readNames(dir string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("observe: %w", err)
	}
	names := make([]string, len(entries))
	for i, e := range entries {
		names[i] = e.Name()
	}
	return names, nil
}

func (b *Backend) readWorkspace(wsID string) (seenWorkspace, bool, error) {
	dir := b.workspaceDir(wsID)
	var w seenWorkspace
	found, err := b.readRecord(filepath.Join(dir, stateFile), &w.state)
	if err != nil || !found {
		return w, false, err
	}
	w.live = b.alive(w.state.Process)
	if !w.live {
		w.exitCode, w.exited = readExit(filepath.Join(dir, exitFile))
		w.output = logTail(filepath.Join(dir, logFile), 4*controller.OutputBytes)
	}
	return w, true, nil
}

func (b *Backend) readJob(wsID string, kind controller.JobKind) (seenJob, bool, error) {
	dir := b.batchDir(wsID, kind)
	var j seenJob
	found, err := b.readRecord(filepath.Join(dir, jobFile), &j.record)
	if err != nil || !found {
		return j, false, err
	}
	j.live = b.alive(j.record.Process)
	if j.live {
		return j, true, nil
	}
	j.exitCode, j.exited = readExit(filepath.Join(dir, exitFile))
	if j.exited && j.exitCode != 0 {
		// One read serves both: the result line is the last the job prints.
		j.output = logTail(filepath.Join(dir, logFile), archive.ResultTail)
		j.code, _ = archive.ResultCode(strings.NewReader(j.output), archive.ResultTail)
		if j.code == archive.CodeBuildFailed {
			j.output = withoutResults(j.output)
		}
	}
	return j, true, nil
}

// withoutResults drops the result lines from a failed build's output:
// its code is reported on its own, and its last lines are to say why,
// in the build's words.
func withoutResults(out string) string {
	lines := strings.SplitAfter(out, "\n")
	kept := lines[:0]
	for _, l := range lines {
		if !strings.HasPrefix(l, "RESULT=") {
			kept = append(kept, l)
		}
	}
	return strings.Join(kept, "")
}

// probe checks the health of every live, not stopped workspace at once and
// records the answers for Resolve.
func (b *Backend) probe(ctx context.Context, ws map[string]seenWorkspace) {
	var mu sync.Mutex
	var wg sync.WaitGroup
	ready := make(map[string]bool)
	for wsID, w := range ws {
		if !w.live || w.state.Stopped {
			b.forgetReady(wsID)
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			ok := b.healthy(ctx, w.state.Port)
			b.setReady(wsID, w.state.Process, ok)
			mu.Lock()
			ready[wsID] = ok
			mu.Unlock()
		}()
	}
	wg.Wait()
	for wsID, ok := range ready {
		w := ws[wsID]
		w.ready = ok
		ws[wsID] = w
	}
}

// assemble turns one listing into the snapshot. It does no I/O.
func assemble(l listing) controller.Snapshot {
	snap := controller.Snapshot{Workspaces: make(map[string]controller.Observed)}
	for wsID := range l.volumes {
		o := snap.Workspaces[wsID]
		// A home appears under its name only once complete.
		o.VolumeExists, o.VolumeReady = true, true
		snap.Workspaces[wsID] = o
	}
	for wsID, w := range l.workspaces {
		o := snap.Workspaces[wsID]
		o.ContainerLive = w.live
		o.UpstreamReady = w.live && !w.state.Stopped && w.ready
		o.Failure = workspaceFailure(w)
		snap.Workspaces[wsID] = o
	}
	for wsID, j := range l.archives {
		o := snap.Workspaces[wsID]
		o.Archive = jobResult(j)
		snap.Workspaces[wsID] = o
	}
	for wsID, j := range l.restores {
		o := snap.Workspaces[wsID]
		o.Restore = jobResult(j)
		snap.Workspaces[wsID] = o
	}
	return snap
}

// workspaceFailure: a workspace program that ended without being stopped
// has failed (it is not restarted; the controller decides on a retry).
func workspaceFailure(w seenWorkspace) *controller.Failure {
	if w.live || w.state.Stopped {
		return nil
	}
	msg := "workspace process ended without recording its exit status"
	if w.exited {
		msg = fmt.Sprintf("workspace process exited with code %d", w.exitCode)
	}
	return &controller.Failure{Reason: workspace.ReasonStartFailed, Message: controller.WithOutput(msg, w.output)}
}

// jobResult reports the attempt a job record describes.
func jobResult(j seenJob) *controller.JobResult {
	spec := controller.JobSpec{OpID: j.record.OpID, ArchiveKey: j.record.ArchiveKey, Attempt: j.record.Attempt}
	return jobRun(j).Result(spec)
}

// jobRun is what a job record and the files of its process say of its run.
func jobRun(j seenJob) controller.JobRun {
	switch {
	case j.live:
		return controller.JobRun{State: controller.RunLive}
	case j.exited:
		return controller.JobRun{State: controller.RunExited, ExitCode: j.exitCode, Code: j.code, Output: j.output}
	case j.record.Process.PID == 0:
		// Recorded, then codehub stopped before the process was.
		return controller.JobRun{State: controller.RunPending}
	}
	// Killed with its launcher (StopJob, a reboot) before it could record
	// how it ended.
	return controller.JobRun{State: controller.RunEnded, Message: "job process ended without recording its exit status"}
}
