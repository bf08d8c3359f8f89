package api

import (
	"errors"
	"io"
	"net/http"
	"strconv"

	"github.com/codehub-io/codehub/archive"
	"github.com/codehub-io/codehub/workspace"
)

// downloadArchive streams one archive of the user's workspace as stored
// (home.tar.zst) from S3, announcing its size. The bytes are checked
// against the archive's sha256 while they pass; a mismatch withholds the
// last of them and aborts the connection, so the client sees a download cut
// short, never a complete damaged archive. An incremental archive is sent
// as the complete home.tar.zst of its chain, made as it is sent: its size
// is not known, so it goes chunked, and a failure cuts the connection
// before the final chunk.
func (s *Server) downloadArchive(w http.ResponseWriter, r *http.Request) {
	ws, ok := s.userWorkspace(w, r)
	if !ok {
		return
	}
	id := r.PathValue("archive")
	body, a, err := s.workspaces.OpenArchive(r.Context(), ws.ID, id)
	if errors.Is(err, workspace.ErrArchiveNotFound) {
		WriteError(w, newError(http.StatusNotFound, CodeNotFound, "archive not found"))
		return
	}
	if err != nil {
		WriteError(w, serviceError(s.logger, err))
		return
	}
	defer body.Close()
	h := w.Header()
	h.Set("Content-Type", "application/zstd")
	if a.Parent == "" {
		h.Set("Content-Length", strconv.FormatInt(a.Size, 10))
	}
	h.Set("Content-Disposition", `attachment; filename="home.tar.zst"`)
	h.Set("Cache-Control", "private, no-store")
	w.WriteHeader(http.StatusOK)
	sent, err := io.Copy(w, body)
	if err == nil {
		return
	}
	log := s.logger.With("workspace_id", ws.ID, "archive", id, "bytes_sent", sent, "size", a.Size)
	if errors.Is(err, archive.ErrChecksumMismatch) {
		log.Error("archive download aborted: the archive does not match its checksum", "error", err)
	} else {
		logFailure(log, "archive download aborted", err)
	}
	// The status is sent: only a cut connection tells the client.
	panic(http.ErrAbortHandler)
}
