package api

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/codehub-io/codehub/agent"
	"github.com/codehub-io/codehub/audit"
	"github.com/codehub-io/codehub/ports"
	"github.com/codehub-io/codehub/proxy"
	"github.com/codehub-io/codehub/store"
	"github.com/codehub-io/codehub/workspace"
)

// portView is a port of a workspace as the API shows it.
type portView struct {
	Port  int         `json:"port"`
	URL   string      `json:"url"`
	Share ports.Level `json:"share"`
	// Listening: a program of the running workspace listens on the port;
	// Process names it where the system tells.
	Listening bool   `json:"listening"`
	Process   string `json:"process,omitempty"`
}

// portsView is the ports of a workspace: those it listens on and those
// shared wider than their owner, and the widest level the server lets a
// port have.
type portsView struct {
	MaxShare ports.Level `json:"max_share"`
	Ports    []portView  `json:"ports"`
}

// agentPorts reaches workspace ports through the workspaces' agents.
type agentPorts struct {
	agents     *agent.Connector
	workspaces WorkspaceService
}

var _ proxy.PortDialer = agentPorts{}

// client is the agent client of the current run of workspace id.
func (a agentPorts) client(ctx context.Context, id string) (*agent.Client, error) {
	ws, err := a.workspaces.Get(ctx, id)
	if err != nil {
		return nil, err
	}
	return a.agents.Client(ctx, id, ws.RunID)
}

// DialPort implements proxy.PortDialer: the agent dials the port from
// inside the workspace, and only a listener of its own workspace.
func (a agentPorts) DialPort(ctx context.Context, id string, port int) (net.Conn, error) {
	c, err := a.client(ctx, id)
	if err != nil {
		return nil, err
	}
	return c.DialPort(ctx, port)
}

// listening is the ports workspace id listens on, by port.
func (a agentPorts) listening(ctx context.Context, id string) (map[int]string, error) {
	c, err := a.client(ctx, id)
	if err != nil {
		return nil, err
	}
	list, err := c.Ports(ctx)
	if err != nil {
		return nil, err
	}
	out := make(map[int]string, len(list))
	for _, p := range list {
		out[p.Port] = p.Process
	}
	return out, nil
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
	var listening map[int]string
	if s.agentPorts != nil && ws.Phase == workspace.PhaseRunning {
		// A workspace whose agent does not answer (starting, stopping)
		// lists its shared ports alone.
		listening, err = s.agentPorts.listening(r.Context(), ws.ID)
		if err != nil {
			s.logger.Debug("list listening ports", "workspace_id", ws.ID, "error", err)
		}
	}
	view := portsView{MaxShare: s.proxy.MaxPortShare(), Ports: []portView{}}
	for port, process := range listening {
		v := s.portView(ws.ID, port, ports.Owner)
		v.Listening, v.Process = true, process
		if l, err := ports.ParseLevel(stored[port]); err == nil {
			v.Share = l
		}
		view.Ports = append(view.Ports, v)
	}
	for port, level := range stored {
		l, err := ports.ParseLevel(level)
		if _, seen := listening[port]; seen || err != nil {
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
	port, ok := pathPort(w, r)
	if !ok {
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

// PortForwardProtocol is the Upgrade token of a port forward: after 101
// Switching Protocols the connection carries the bytes of one TCP
// connection to the workspace's port. No browser can ask for it (a page
// cannot set Upgrade), so only a client such as `codehub port-forward`
// opens one.
const PortForwardProtocol = "codehub-tcp/1"

// forwardPort connects the request's connection to a port of the user's
// running workspace, through its agent. The owner's bytes toward the port
// count as activity, as their requests on a port's address do.
func (s *Server) forwardPort(w http.ResponseWriter, r *http.Request) {
	sess, ok := s.requireUser(w, r)
	if !ok {
		return
	}
	if sess.TokenID == "" {
		// The watch that ends a forward with its credential checks API
		// tokens; a forward is a program's, never a page's.
		WriteError(w, newError(http.StatusForbidden, CodeForbidden, "a port forward needs an API token (codehub login)"))
		return
	}
	if !strings.EqualFold(r.Header.Get("Upgrade"), PortForwardProtocol) {
		WriteError(w, &Error{Status: http.StatusBadRequest, Code: CodeInvalidInput,
			Message: "a port forward asks for Upgrade: " + PortForwardProtocol})
		return
	}
	ws, ok := s.ownedWorkspace(w, r, sess)
	if !ok {
		return
	}
	port, ok := pathPort(w, r)
	if !ok {
		return
	}
	if s.portDialer == nil {
		WriteError(w, newError(http.StatusNotFound, CodeNotFound, "this server does not reach workspace ports"))
		return
	}
	if ws.Phase != workspace.PhaseRunning {
		WriteError(w, newError(http.StatusConflict, CodeInvalidState, "the workspace is not running; start it first"))
		return
	}
	up, err := s.portDialer.DialPort(r.Context(), ws.ID, port)
	if errors.Is(err, agent.ErrRefused) {
		WriteError(w, newError(http.StatusNotFound, CodeNotFound, fmt.Sprintf("nothing in the workspace listens on port %d", port)))
		return
	}
	if err != nil {
		s.logger.Debug("dial workspace port", "workspace_id", ws.ID, "port", port, "error", err)
		WriteError(w, newError(http.StatusBadGateway, CodeBackendUnavailable, "the workspace did not answer; try again shortly"))
		return
	}
	defer up.Close()
	down, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		s.fail(w, "take the connection over", err)
		return
	}
	defer down.Close()
	// The server's deadlines were for the request; the stream has none.
	_ = down.SetDeadline(time.Time{})
	if _, err := brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: " + PortForwardProtocol + "\r\n\r\n"); err != nil {
		return
	}
	if err := brw.Flush(); err != nil {
		return
	}
	// A revoked token, a disabled user or a workspace that changed
	// hands ends the forward, as it ends the proxy's long-lived
	// connections.
	release := s.proxy.HoldTunnel(r, sess.UserID, ws.ID, ws.Name, func(string) {
		up.Close()
		down.Close()
	})
	defer release()
	s.activity.Mark(ws.ID)
	splice(up, down, brw.Reader, func() { s.activity.Mark(ws.ID) })
}

// splice copies between the workspace's connection up and the client's
// down (whose first bytes may sit in buffered) until either side ends,
// calling sent for each read from the client.
func splice(up, down net.Conn, buffered io.Reader, sent func()) {
	done := make(chan struct{}, 2)
	go func() {
		_, _ = io.Copy(down, up)
		closeWrite(down)
		done <- struct{}{}
	}()
	go func() {
		_, _ = io.Copy(up, markingReader{io.MultiReader(buffered, down), sent})
		closeWrite(up)
		done <- struct{}{}
	}()
	<-done
	<-done
}

// closeWrite passes an end of stream on, keeping the other direction.
func closeWrite(c net.Conn) {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
		return
	}
	_ = c.Close()
}

type markingReader struct {
	r    io.Reader
	sent func()
}

func (m markingReader) Read(b []byte) (int, error) {
	n, err := m.r.Read(b)
	if n > 0 {
		m.sent()
	}
	return n, err
}

// pathPort reads the {port} of the request's path, answering 400 for one
// that is not a TCP port.
func pathPort(w http.ResponseWriter, r *http.Request) (int, bool) {
	port, err := strconv.Atoi(r.PathValue("port"))
	if err == nil {
		err = ports.CheckPort(port)
	}
	if err != nil {
		WriteError(w, &Error{Status: http.StatusBadRequest, Code: CodeInvalidInput, Field: "port",
			Message: "port: must be a number between 1 and 65535"})
		return 0, false
	}
	return port, true
}
