package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"

	"github.com/codehub-io/codehub/archive"
)

// maxSnapshotRequest bounds a snapshot request: a parent manifest of some
// ten million files, base64 in JSON.
const maxSnapshotRequest = 1 << 30

// ErrSnapshotBusy: the agent is already snapshotting its home.
var ErrSnapshotBusy = errors.New("agent: a snapshot is already being made")

// serveSnapshot reads the home, as the workspace's user and while it is in
// use, and streams the snapshot's frames (archive.WriteSnapshot). One at a
// time: a second request while one runs is refused with 409.
func (a *Agent) serveSnapshot(w http.ResponseWriter, r *http.Request) {
	var req archive.SnapshotRequest
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxSnapshotRequest)).Decode(&req); err != nil {
		http.Error(w, "bad snapshot request: "+err.Error(), http.StatusBadRequest)
		return
	}
	if !a.snapshotting.TryLock() {
		http.Error(w, ErrSnapshotBusy.Error(), http.StatusConflict)
		return
	}
	defer a.snapshotting.Unlock()
	w.Header().Set("Content-Type", "application/octet-stream")
	w.WriteHeader(http.StatusOK)
	log := a.logger.With("key", req.Key)
	if err := archive.WriteSnapshot(r.Context(), log, a.opts.Home, req, flushWriter{w}); err != nil {
		log.Warn("snapshot failed", "error", err)
		return
	}
	log.Debug("snapshot sent")
}

// flushWriter sends every write at once: the server uploads as it reads.
type flushWriter struct{ w http.ResponseWriter }

func (f flushWriter) Write(p []byte) (int, error) {
	n, err := f.w.Write(p)
	if err == nil {
		err = http.NewResponseController(f.w).Flush()
	}
	return n, err
}

// Snapshot asks the agent for a snapshot of its home and returns the
// stream of frames for archive.Store.StoreSnapshot; ctx bounds the whole
// stream.
func (c *Client) Snapshot(ctx context.Context, req archive.SnapshotRequest) (io.ReadCloser, error) {
	body, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+c.addr+"/v1/snapshot", bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	hreq.Header.Set("Authorization", "Bearer "+c.token)
	hreq.Header.Set("Content-Type", "application/json")
	// No client timeout: a large home's snapshot takes as long as it takes,
	// bounded by ctx.
	resp, err := (&http.Client{Transport: c.http.Transport}).Do(hreq)
	if err != nil {
		return nil, fmt.Errorf("agent: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		defer resp.Body.Close()
		if resp.StatusCode == http.StatusConflict {
			return nil, ErrSnapshotBusy
		}
		return nil, statusError(resp)
	}
	return resp.Body, nil
}
