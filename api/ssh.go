package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/coder/websocket"
	"golang.org/x/crypto/ssh"

	"github.com/codehub-io/codehub/agent"
	"github.com/codehub-io/codehub/controller"
	"github.com/codehub-io/codehub/identity"
	"github.com/codehub-io/codehub/store"
	"github.com/codehub-io/codehub/workspace"
)

// SSH reaches a workspace through the server's own listener: the CLI opens
// a WebSocket with the user's API token, the server wakes or restores the
// workspace as a page load would, reporting progress as it goes, then
// carries the SSH transport between the WebSocket and the workspace
// agent's SSH server. The tunnel stays in the proxy's watch, so a revoked
// token, a disabled user or a lost ownership ends it within seconds.

// sshInfo is what GET /api/v1/workspaces/{id}/ssh answers.
type sshInfo struct {
	// HostKey is the workspace's SSH host key in authorized_keys form,
	// the same for the workspace's whole life.
	HostKey string `json:"host_key"`
}

// TunnelMessage is a text message of the tunnel before the SSH stream:
// progress while the workspace wakes, then Ready, after which every
// message is binary and carries the stream.
type TunnelMessage struct {
	Progress string `json:"progress,omitempty"`
	Ready    bool   `json:"ready,omitempty"`
}

// Close codes of the tunnel besides the standard ones; the reason says it
// in words.
const (
	// TunnelClosedWorkspace: the workspace stopped, failed or cannot run.
	TunnelClosedWorkspace websocket.StatusCode = 4000
	// TunnelClosedRevoked: the token or ownership no longer holds.
	TunnelClosedRevoked websocket.StatusCode = 4001
)

// Tunnel timings.
const (
	// tunnelPoll is how often a waking workspace is read again.
	tunnelPoll = 500 * time.Millisecond
	// tunnelWakeLimit bounds the wait for a workspace to come up.
	tunnelWakeLimit = 15 * time.Minute
	// sshActivityPoll is how often the agent is asked whether the person
	// did something over SSH.
	sshActivityPoll = 5 * time.Second
	// tunnelBuffer is the most one read of either side takes; a read from
	// the agent is one WebSocket message.
	tunnelBuffer = 256 << 10
)

var errNoAgents = newError(http.StatusNotFound, CodeNotFound, "this server's backend runs no workspace agent, so there is no SSH")

func (s *Server) getSSH(w http.ResponseWriter, r *http.Request) {
	if s.agents == nil {
		WriteError(w, errNoAgents)
		return
	}
	ws, ok := s.userWorkspace(w, r)
	if !ok {
		return
	}
	key := strings.TrimSpace(string(ssh.MarshalAuthorizedKey(s.agents.HostPublicKey(ws.ID))))
	writeJSON(w, http.StatusOK, sshInfo{HostKey: key})
}

// sshTunnel serves GET /api/v1/workspaces/{id}/ssh/tunnel. Only an API
// token that may change things opens it: a shell changes everything, and
// a browser's cookies must never open one for another site.
func (s *Server) sshTunnel(w http.ResponseWriter, r *http.Request) {
	if s.agents == nil {
		WriteError(w, errNoAgents)
		return
	}
	if _, bearer := identity.BearerToken(r.Header); !bearer {
		WriteError(w, newError(http.StatusUnauthorized, CodeUnauthenticated, "an API token is required: run codehub login"))
		return
	}
	sess, ok := s.requireUser(w, r)
	if !ok {
		return
	}
	if !tokenAllows(sess.TokenScope, http.MethodPost) {
		WriteError(w, newError(http.StatusForbidden, CodeReadOnlyToken, "a read-only token cannot open a shell; make a read-write token"))
		return
	}
	ws, ok := s.ownedWorkspace(w, r, sess)
	if !ok {
		return
	}
	c, err := websocket.Accept(w, r, nil)
	if err != nil {
		return // Accept answered
	}
	c.SetReadLimit(-1)
	t := &tunnel{s: s, c: c, sess: sess, ws: ws}
	t.run(r)
}

// tunnel is one SSH tunnel of a user to a workspace.
type tunnel struct {
	s    *Server
	c    *websocket.Conn
	sess store.Session
	ws   workspace.Workspace

	closeOnce sync.Once
}

// close ends the WebSocket with a reason the CLI shows; once.
func (t *tunnel) close(code websocket.StatusCode, reason string) {
	t.closeOnce.Do(func() {
		if len(reason) > 120 {
			reason = reason[:120]
		}
		_ = t.c.Close(code, reason)
	})
}

func (t *tunnel) run(r *http.Request) {
	ctx, cancel := context.WithCancel(context.WithoutCancel(r.Context()))
	defer cancel()
	release := t.s.proxy.HoldTunnel(r, t.sess.UserID, t.ws.ID, t.ws.Name, func(reason string) {
		// The watch must not wait for the close handshake.
		go func() {
			t.close(TunnelClosedRevoked, "codehub: "+reason)
			cancel()
		}()
	})
	defer release()
	// Opening a connection is the person at work, as a page load is.
	t.s.activity.Mark(t.ws.ID)

	conn, err := t.connect(ctx)
	if err != nil {
		var we *tunnelError
		if errors.As(err, &we) {
			t.close(TunnelClosedWorkspace, we.msg)
		} else if ctx.Err() == nil {
			t.s.logger.Warn("ssh tunnel", "workspace_id", t.ws.ID, "error", err)
			t.close(websocket.StatusInternalError, "codehub: cannot reach the workspace")
		}
		return
	}
	defer conn.Close()
	if err := t.send(ctx, TunnelMessage{Ready: true}); err != nil {
		return
	}
	t.bridge(ctx, conn, func(agentEnded bool) {
		if ctx.Err() != nil || !agentEnded {
			t.close(websocket.StatusNormalClosure, "")
			return
		}
		// The workspace's side ended: say why when the workspace is going.
		ws, err := t.s.workspaces.Get(context.WithoutCancel(ctx), t.ws.ID)
		if err == nil && (ws.DesiredState != workspace.DesiredRunning || ws.Phase != workspace.PhaseRunning || ws.Operation != workspace.OpNone) {
			t.close(TunnelClosedWorkspace, "codehub: "+endedWords(ws))
			return
		}
		t.close(websocket.StatusNormalClosure, "")
	})
}

// endedWords says why a workspace's SSH connection ended.
func endedWords(ws workspace.Workspace) string {
	switch {
	case ws.DesiredState == workspace.DesiredRunning:
		return "workspace " + ws.Name + " is restarting"
	case ws.DesiredBy == workspace.CauseIdle:
		return "workspace " + ws.Name + " stopped after a time without use"
	case ws.DesiredBy == workspace.CauseAdmin:
		return "workspace " + ws.Name + " was stopped by an administrator"
	case ws.DesiredBy == workspace.CauseSchedule:
		return "workspace " + ws.Name + " stopped on its schedule"
	}
	return "workspace " + ws.Name + " was stopped"
}

// tunnelError ends the tunnel with its words for the person.
type tunnelError struct{ msg string }

func (e *tunnelError) Error() string { return e.msg }

func (t *tunnel) send(ctx context.Context, m TunnelMessage) error {
	b, _ := json.Marshal(m)
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	return t.c.Write(wctx, websocket.MessageText, b)
}

// tunnelAction is what the tunnel does about a workspace's state.
type tunnelAction int

const (
	tunnelDial tunnelAction = iota // running: dial its agent
	tunnelWake                     // ask for it to run
	tunnelWait                     // on its way: wait
	tunnelFail                     // it cannot run
)

// tunnelStep decides, from a stored workspace, what the tunnel does next
// and what to tell the person meanwhile.
func tunnelStep(ws workspace.Workspace) (tunnelAction, string) {
	wantsRunning := ws.DesiredState == workspace.DesiredRunning
	_, moving := workspace.Moving(ws)
	switch {
	case ws.Phase == workspace.PhaseError:
		reason := "it failed"
		if ws.ErrorReason != nil {
			reason = *ws.ErrorReason
		}
		return tunnelFail, "codehub: workspace " + ws.Name + " is in error: " + reason
	case ws.Phase == workspace.PhaseDeleting, ws.Phase == workspace.PhaseDeleted, ws.DesiredState == workspace.DesiredDeleted:
		return tunnelFail, "codehub: workspace " + ws.Name + " is deleted"
	case ws.Phase == workspace.PhaseRunning && ws.Operation == workspace.OpNone && wantsRunning && !moving:
		return tunnelDial, "waiting for the workspace's agent"
	case !wantsRunning && ws.Operation == workspace.OpNone && ws.Phase == workspace.PhaseArchived:
		return tunnelWake, "restoring from archive"
	case !wantsRunning && ws.Operation == workspace.OpNone:
		return tunnelWake, "starting"
	case ws.Phase == workspace.PhaseArchived && ws.Operation == workspace.OpNone:
		return tunnelWait, "restoring from archive"
	}
	switch ws.Operation {
	case workspace.OpRestoring:
		return tunnelWait, "restoring from archive"
	case workspace.OpArchiving, workspace.OpCreateEmptyArchive:
		return tunnelWait, "finishing an archive first"
	case workspace.OpStopping:
		return tunnelWait, "finishing a stop first"
	case workspace.OpProvisioning:
		return tunnelWait, "preparing the home directory"
	}
	return tunnelWait, "starting"
}

// connect brings the workspace up as a page load would, telling the CLI
// how far it got, and dials its agent's SSH server.
func (t *tunnel) connect(ctx context.Context) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(ctx, tunnelWakeLimit)
	defer cancel()
	said := ""
	woke := false
	for {
		ws, err := t.s.workspaces.Get(ctx, t.ws.ID)
		if err != nil {
			if errors.Is(err, workspace.ErrNotFound) {
				return nil, &tunnelError{"codehub: workspace " + t.ws.Name + " is deleted"}
			}
			return nil, err
		}
		action, words := tunnelStep(ws)
		switch action {
		case tunnelFail:
			return nil, &tunnelError{words}
		case tunnelWake:
			if woke {
				// Asked already; someone stopped it again meanwhile.
				return nil, &tunnelError{"codehub: workspace " + ws.Name + " was stopped while it started"}
			}
			woke = true
			if _, err := t.s.workspaces.SetDesired(ctx, ws.ID, workspace.DesiredRunning, workspace.CauseUser); err != nil {
				if errors.Is(err, workspace.ErrLimitExceeded) {
					return nil, &tunnelError{"codehub: " + err.Error()}
				}
				if !errors.Is(err, workspace.ErrInvalidState) {
					return nil, err
				}
			}
			if words != said {
				said = words
				if err := t.send(ctx, TunnelMessage{Progress: words}); err != nil {
					return nil, err
				}
			}
			continue
		case tunnelDial:
			conn, err := t.dial(ctx, ws)
			if err == nil {
				t.ws = ws // the run whose agent answers
				return conn, nil
			}
			if errors.Is(err, agent.ErrNoAgent) {
				return nil, &tunnelError{"codehub: workspace " + ws.Name + " has no workspace agent (no SSH): stop and start it"}
			}
			if !errors.Is(err, controller.ErrNoUpstream) && !isNotYet(err) {
				return nil, err
			}
		}
		if words = t.progressWords(ctx, ws, words); words != said {
			said = words
			if err := t.send(ctx, TunnelMessage{Progress: words}); err != nil {
				return nil, err
			}
		}
		select {
		case <-ctx.Done():
			if ctx.Err() == context.DeadlineExceeded {
				return nil, &tunnelError{"codehub: workspace " + t.ws.Name + " did not start in time"}
			}
			return nil, ctx.Err()
		case <-time.After(tunnelPoll):
		}
	}
}

// isNotYet is an agent that does not answer yet: its workspace is
// starting or its address is stale.
func isNotYet(err error) bool {
	var op *net.OpError
	return errors.As(err, &op)
}

func (t *tunnel) dial(ctx context.Context, ws workspace.Workspace) (net.Conn, error) {
	client, err := t.s.agents.Client(ctx, ws.ID, ws.RunID)
	if err != nil {
		return nil, err
	}
	dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	return client.DialSSH(dctx)
}

// progressWords adds how far an archive or restore got.
func (t *tunnel) progressWords(ctx context.Context, ws workspace.Workspace, words string) string {
	kind, ok := jobOf(ws.Operation)
	if !ok || t.s.progress == nil || ws.OpID == nil {
		return words
	}
	p, err := t.s.readProgress(ctx, ws.ID, kind)
	if err != nil || p.OpID != *ws.OpID || p.Total < 0 {
		return words
	}
	return fmt.Sprintf("%s… %d%%", words, p.Percent())
}

// bridge carries the SSH stream both ways until either side ends, and
// counts the person's activity the agent reports meanwhile. Then end is
// told whether the workspace's side ended first, and closes the
// WebSocket, which ends the other direction.
func (t *tunnel) bridge(ctx context.Context, conn net.Conn, end func(agentEnded bool)) {
	ws := websocket.NetConn(ctx, t.c, websocket.MessageBinary)
	actx, stopCounting := context.WithCancel(ctx)
	counted := make(chan struct{})
	go func() { defer close(counted); t.countActivity(actx) }()
	defer func() { stopCounting(); <-counted }()

	fromClient := make(chan struct{})
	fromAgent := make(chan struct{})
	toAgent := &agentWriter{conn: conn}
	go func() { defer close(fromClient); _, _ = io.CopyBuffer(toAgent, ws, make([]byte, tunnelBuffer)) }()
	go func() { defer close(fromAgent); _, _ = io.CopyBuffer(ws, conn, make([]byte, tunnelBuffer)) }()
	select {
	case <-fromClient:
		conn.Close()
		// A client's keepalive written to an agent that has just ended
		// can fail before the agent's end is read: that is the agent's.
		end(toAgent.failed)
	case <-fromAgent:
		end(true)
	}
	conn.Close()
	<-fromClient
	<-fromAgent
}

// agentWriter writes to the agent's connection and remembers whether a
// write failed, which tells an agent gone from a client gone.
type agentWriter struct {
	conn   net.Conn
	failed bool // read only after the copy into it returned
}

func (w *agentWriter) Write(p []byte) (int, error) {
	n, err := w.conn.Write(p)
	if err != nil {
		w.failed = true
	}
	return n, err
}

// countActivity marks the workspace in use whenever its agent reports the
// person did something since the last look; an open connection and its
// keepalives alone never do.
func (t *tunnel) countActivity(ctx context.Context) {
	last := time.Now()
	tick := time.NewTicker(sshActivityPoll)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		client, err := t.s.agents.Client(ctx, t.ws.ID, t.ws.RunID)
		if err != nil {
			continue
		}
		act, err := client.Activity(ctx)
		if err != nil || act.LastActivity == nil {
			continue
		}
		if act.LastActivity.After(last) {
			t.s.activity.Mark(t.ws.ID)
			last = *act.LastActivity
		}
	}
}
