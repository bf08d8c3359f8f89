package proxy

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/coder/websocket"

	"github.com/codehub-io/codehub/workspace"
)

// refusalWait bounds how long a refused workbench socket is held: the
// client's first message, the answer and the closing handshake.
const refusalWait = 10 * time.Second

// sameOrigin reports whether a WebSocket handshake comes from the
// workspace's own origin (or from a client that names none).
func (p *Proxy) sameOrigin(r *http.Request, id string) bool {
	origin := r.Header.Get("Origin")
	return origin == "" || strings.EqualFold(origin, p.opts.Sites.WorkspaceOrigin(id))
}

// refuseWorkbench answers a VS Code workbench that reconnects to a
// workspace that is not running (verdict v) the way a VS Code server
// refuses a connection: the workbench then stops reconnecting and asks
// for a reload, and the reload is a navigation that shows the workspace's
// page (and wakes it, if it is stopped). Anything else gets the page. It
// reports whether it answered.
func (p *Proxy) refuseWorkbench(w *responseRecorder, r *http.Request, ws workspace.Workspace, v verdict) bool {
	if !isWebSocketUpgrade(r) || !p.sameOrigin(r, ws.ID) {
		return false
	}
	if ok, _ := vscodeSocket(r); !ok {
		return false
	}
	// The proxy speaks to this socket itself; nothing is proxied.
	w.socket = nil
	// The origin was checked above against the workspace's own.
	conn, err := websocket.Accept(w, r, &websocket.AcceptOptions{InsecureSkipVerify: true})
	if err != nil {
		p.logger.Debug("refuse workbench socket", "workspace_id", ws.ID, "error", err)
		return true
	}
	defer conn.CloseNow()
	// The request's context ends with the hijack.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), refusalWait)
	defer cancel()
	conn.SetReadLimit(64 << 10)
	// The client speaks first (its auth request) and then waits for the
	// server's answer, which is the refusal.
	if _, _, err := conn.Read(ctx); err != nil {
		p.logger.Debug("refuse workbench socket", "workspace_id", ws.ID, "error", err)
		return true
	}
	if err := conn.Write(ctx, websocket.MessageBinary, vscodeRefusal(noticeFor(ws, v, time.Now()).Message)); err != nil {
		p.logger.Debug("refuse workbench socket", "workspace_id", ws.ID, "error", err)
		return true
	}
	_ = conn.Close(websocket.StatusNormalClosure, "")
	return true
}

// ago is a rounded time in the past for people.
func ago(d time.Duration) string {
	return span(d) + " ago"
}

// span is a rounded duration for people.
func span(d time.Duration) string {
	switch {
	case d < time.Minute:
		return "less than a minute"
	case d < 2*time.Minute:
		return "1 minute"
	case d < 2*time.Hour:
		return fmt.Sprintf("%d minutes", int(d/time.Minute))
	case d < 48*time.Hour:
		return fmt.Sprintf("%d hours", int(d/time.Hour))
	}
	return fmt.Sprintf("%d days", int(d/(24*time.Hour)))
}
