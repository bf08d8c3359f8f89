package local

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/codehub-io/codehub/archive"
	"github.com/codehub-io/codehub/controller"
)

// JobProgress returns the latest progress report of the workspace's archive
// or restore job, from the end of its output.
func (b *Backend) JobProgress(_ context.Context, wsID string, kind controller.JobKind) (controller.JobProgress, error) {
	if err := checkID(wsID); err != nil {
		return controller.JobProgress{}, err
	}
	if kind != controller.JobArchive && kind != controller.JobRestore {
		return controller.JobProgress{}, fmt.Errorf("progress of a %s job: %w", kind, controller.ErrNoProgress)
	}
	dir := b.batchDir(wsID, kind)
	var rec jobRecord
	found, err := b.readRecord(filepath.Join(dir, jobFile), &rec)
	if err != nil {
		return controller.JobProgress{}, err
	}
	if !found {
		return controller.JobProgress{}, controller.ErrNoProgress
	}
	tail := logTail(filepath.Join(dir, logFile), archive.ProgressTail)
	p, ok, err := archive.LastProgress(strings.NewReader(tail), archive.ProgressTail)
	if err != nil {
		return controller.JobProgress{}, err
	}
	if !ok {
		return controller.JobProgress{}, controller.ErrNoProgress
	}
	return controller.JobProgress{OpID: rec.OpID, Progress: p}, nil
}
