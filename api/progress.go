package api

import (
	"context"
	"errors"
	"net/http"

	"github.com/codehub-io/codehub/controller"
	"github.com/codehub-io/codehub/workspace"
)

// ProgressReader reads how far a workspace's archive or restore job got;
// the backends implement it.
type ProgressReader interface {
	JobProgress(ctx context.Context, wsID string, kind controller.JobKind) (controller.JobProgress, error)
}

// progressView is how far the running archive or restore of a workspace
// got. The byte fields are null while nothing is known: no such operation
// runs, its job has not reported yet, or (an archive) the home is still
// being sized.
type progressView struct {
	Operation  workspace.Operation `json:"operation"`
	Step       string              `json:"step,omitempty"`
	BytesDone  *int64              `json:"bytes_done"`
	BytesTotal *int64              `json:"bytes_total"`
	Percent    *int                `json:"percent"`
}

// jobOf is the job whose progress an operation has, if any.
func jobOf(op workspace.Operation) (controller.JobKind, bool) {
	switch op {
	case workspace.OpArchiving:
		return controller.JobArchive, true
	case workspace.OpRestoring:
		return controller.JobRestore, true
	}
	return "", false
}

func (s *Server) getProgress(w http.ResponseWriter, r *http.Request) {
	ws, ok := s.userWorkspace(w, r)
	if !ok {
		return
	}
	view := progressView{Operation: ws.Operation}
	kind, ok := jobOf(ws.Operation)
	if !ok || s.progress == nil || ws.OpID == nil {
		writeJSON(w, http.StatusOK, view)
		return
	}
	p, err := s.readProgress(r.Context(), ws.ID, kind)
	switch {
	case errors.Is(err, controller.ErrNoProgress):
	case err != nil:
		// The progress is a courtesy: the operation goes on without it.
		s.logger.Warn("read job progress", "workspace_id", ws.ID, "job", kind, "error", err)
	case p.OpID == *ws.OpID:
		view.Step = p.Step
		view.BytesDone = &p.Done
		if p.Total >= 0 {
			pct := p.Percent()
			view.BytesTotal, view.Percent = &p.Total, &pct
		}
	}
	writeJSON(w, http.StatusOK, view)
}

// readProgress shares one backend read among the requests for the same
// job that arrive while it runs.
func (s *Server) readProgress(ctx context.Context, wsID string, kind controller.JobKind) (controller.JobProgress, error) {
	v, err, _ := s.progressReads.Do(wsID+"/"+string(kind), func() (any, error) {
		return s.progress.JobProgress(context.WithoutCancel(ctx), wsID, kind)
	})
	if err != nil {
		return controller.JobProgress{}, err
	}
	return v.(controller.JobProgress), nil
}
