package nomad

import (
	"context"
	"fmt"

	"github.com/hashicorp/nomad/api"

	"github.com/codehub-io/codehub/archive"
	"github.com/codehub-io/codehub/controller"
)

// JobProgress returns the latest progress report of the workspace's archive
// or restore job, from the end of the stdout of its newest allocation.
// It costs three Nomad calls, so it serves a person watching one
// workspace, not the controller's passes.
func (b *Backend) JobProgress(ctx context.Context, wsID string, kind controller.JobKind) (controller.JobProgress, error) {
	if kind != controller.JobArchive && kind != controller.JobRestore {
		return controller.JobProgress{}, fmt.Errorf("progress of a %s job: %w", kind, controller.ErrNoProgress)
	}
	name := controller.JobName(wsID, kind)
	job, _, err := b.client.Jobs().Info(name, b.query(ctx))
	if err != nil {
		if code, ok := statusCode(err); ok && code == 404 {
			return controller.JobProgress{}, controller.ErrNoProgress
		}
		return controller.JobProgress{}, classify("read job "+name, err)
	}
	allocs, _, err := b.client.Jobs().Allocations(name, false, b.query(ctx))
	if err != nil {
		return controller.JobProgress{}, classify("list allocations of "+name, err)
	}
	var newest *api.AllocationListStub
	for _, a := range allocs {
		if a.JobVersion == *job.Version && (newest == nil || a.CreateIndex > newest.CreateIndex) {
			newest = a
		}
	}
	if newest == nil || len(newest.TaskStates) == 0 || neverStarted(newest) {
		return controller.JobProgress{}, controller.ErrNoProgress
	}
	body, err := b.logTail(ctx, newest, taskName(newest), "stdout", archive.ProgressTail)
	if err != nil {
		return controller.JobProgress{}, err
	}
	defer body.Close()
	p, ok, err := archive.LastProgress(body, archive.ProgressTail)
	if err != nil {
		return controller.JobProgress{}, classify("read logs of "+newest.ID, err)
	}
	if !ok {
		return controller.JobProgress{}, controller.ErrNoProgress
	}
	return controller.JobProgress{OpID: job.Meta[MetaOpID], Progress: p}, nil
}
