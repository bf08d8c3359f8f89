package api

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strconv"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/codehub-io/codehub/audit"
	"github.com/codehub-io/codehub/ports"
	"github.com/codehub-io/codehub/proxy"
	"github.com/codehub-io/codehub/store"
)

// portView is a port of a workspace as the API shows it.
type portView struct {
	Port  int         `json:"port"`
	URL   string      `json:"url"`
	Share ports.Level `json:"share"`
}

// portsView is the ports of a workspace: those shared wider than their
// owner, and the widest level the server lets a port have.
type portsView struct {
	MaxShare ports.Level `json:"max_share"`
	Ports    []portView  `json:"ports"`
}

type portShareRequest struct {
	Share *string `json:"share"`
}

// portShares reads share levels for the proxy.
type portShares struct{ pool *pgxpool.Pool }

var _ proxy.PortShares = portShares{}

// PortShare implements proxy.PortShares. A stored value that is no level
// shares nothing.
func (s portShares) PortShare(ctx context.Context, workspaceID string, port int) (ports.Level, error) {
	stored, err := store.PortShare(ctx, s.pool, workspaceID, port)
	if err != nil || stored == "" {
		return ports.Owner, err
	}
	level, err := ports.ParseLevel(stored)
	if err != nil {
		return ports.Owner, nil
	}
	return level, nil
}

func (s *Server) portView(id string, port int, level ports.Level) portView {
	return portView{Port: port, URL: s.sites.PortURL(id, port), Share: level}
}

func (s *Server) listPorts(w http.ResponseWriter, r *http.Request) {
	ws, ok := s.userWorkspace(w, r)
	if !ok {
		return
	}
	stored, err := store.PortShares(r.Context(), s.pool, ws.ID)
	if err != nil {
		s.fail(w, "list port shares", err)
		return
	}
	view := portsView{MaxShare: s.proxy.MaxPortShare(), Ports: []portView{}}
	for port, level := range stored {
		l, err := ports.ParseLevel(level)
		if err != nil {
			continue
		}
		view.Ports = append(view.Ports, s.portView(ws.ID, port, l))
	}
	slices.SortFunc(view.Ports, func(a, b portView) int { return a.Port - b.Port })
	writeJSON(w, http.StatusOK, view)
}

// setPortShare sets how widely a port is shared. A level wider than the
// server's cap is refused with 400 and changes nothing.
func (s *Server) setPortShare(w http.ResponseWriter, r *http.Request) {
	sess, ok := s.requireUser(w, r)
	if !ok {
		return
	}
	var req portShareRequest
	if e := decodeJSON(w, r, &req, s.opts.BodyReadTimeout); e != nil {
		WriteError(w, e)
		return
	}
	ws, ok := s.ownedWorkspace(w, r, sess)
	if !ok {
		return
	}
	port, err := strconv.Atoi(r.PathValue("port"))
	if err == nil {
		err = ports.CheckPort(port)
	}
	if err != nil {
		WriteError(w, &Error{Status: http.StatusBadRequest, Code: CodeInvalidInput, Field: "port",
			Message: "port: must be a number between 1 and 65535"})
		return
	}
	if req.Share == nil {
		WriteError(w, &Error{Status: http.StatusBadRequest, Code: CodeInvalidInput, Field: "share",
			Message: "share: required (owner, authenticated or public)"})
		return
	}
	level, err := ports.ParseLevel(*req.Share)
	if err != nil {
		WriteError(w, &Error{Status: http.StatusBadRequest, Code: CodeInvalidInput, Field: "share",
			Message: "share: must be owner, authenticated or public"})
		return
	}
	target := workspaceTarget(ws)
	if err := ports.CheckSet(level, s.proxy.MaxPortShare()); err != nil {
		e := &Error{Status: http.StatusBadRequest, Code: CodeShareAboveCap, Field: "share",
			Message: fmt.Sprintf("share: %s is wider than this server allows (at most %s)", level, s.proxy.MaxPortShare())}
		s.audit.Record(r.Context(), audit.Event{Actor: s.actor(r, sess), Action: audit.ActionPortShare, Target: target,
			Outcome: audit.Failure, Detail: fmt.Sprintf("port %d: %s", port, e.Message)})
		WriteError(w, e)
		return
	}
	stored := string(level)
	if level == ports.Owner {
		stored = ""
	}
	previous, err := store.SetPortShare(r.Context(), s.pool, ws.ID, port, stored)
	if err != nil {
		s.fail(w, "set port share", err)
		return
	}
	s.proxy.PortShareChanged(ws.ID, port)
	was := ports.Owner
	if previous != "" {
		was = ports.Level(previous)
	}
	s.audit.Record(r.Context(), audit.Event{Actor: s.actor(r, sess), Action: audit.ActionPortShare, Target: target,
		Outcome: audit.Success, Detail: fmt.Sprintf("port %d: %s to %s", port, was, level)})
	writeJSON(w, http.StatusOK, s.portView(ws.ID, port, level))
}
