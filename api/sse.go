package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/redis/go-redis/v9"

	"github.com/codehub-io/codehub/events"
	"github.com/codehub-io/codehub/workspace"
)

// HeartbeatInterval is how often an idle event stream sends a heartbeat.
const HeartbeatInterval = 30 * time.Second

// hub holds this replica's one Redis subscription for every user's notices
// and hands each notice to the event streams of its owner.
type hub struct {
	logger hclog.Logger
	rdb    *redis.Client

	mu      sync.Mutex
	streams map[string]map[*stream]struct{}
}

// stream is one connected SSE client.
type stream struct {
	userID  string
	notices chan events.Notice
	// resync asks the stream to send the whole current state again: after
	// the hub (re)subscribed, or when the stream fell behind.
	resync chan struct{}
}

func newHub(logger hclog.Logger, rdb *redis.Client) *hub {
	return &hub{logger: logger, rdb: rdb, streams: map[string]map[*stream]struct{}{}}
}

func (h *hub) add(userID string) *stream {
	st := &stream{userID: userID, notices: make(chan events.Notice, 64), resync: make(chan struct{}, 1)}
	h.mu.Lock()
	defer h.mu.Unlock()
	set := h.streams[userID]
	if set == nil {
		set = map[*stream]struct{}{}
		h.streams[userID] = set
	}
	set[st] = struct{}{}
	return st
}

func (h *hub) remove(st *stream) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.streams[st.userID], st)
	if len(h.streams[st.userID]) == 0 {
		delete(h.streams, st.userID)
	}
}

func (h *hub) dispatch(n events.Notice) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for st := range h.streams[n.OwnerID] {
		select {
		case st.notices <- n:
		default:
			// A stream that cannot keep up gets the whole state instead
			// of a gap.
			st.requestResync()
		}
	}
}

func (h *hub) resyncAll() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, set := range h.streams {
		for st := range set {
			st.requestResync()
		}
	}
}

func (st *stream) requestResync() {
	select {
	case st.resync <- struct{}{}:
	default:
	}
}

// run receives notices until ctx ends. go-redis reconnects and
// resubscribes by itself; every (re)subscription makes all streams resend
// the current state, so notices published while unsubscribed are not lost.
func (h *hub) run(ctx context.Context) error {
	ps := h.rdb.PSubscribe(ctx, events.ChannelPrefix+"*")
	// Receive blocks in a read that ctx does not interrupt; closing the
	// subscription does.
	stop := context.AfterFunc(ctx, func() { _ = ps.Close() })
	defer func() {
		stop()
		_ = ps.Close()
	}()
	for {
		msg, err := ps.Receive(ctx)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if err != nil {
			h.logger.Warn("event subscription interrupted", "error", err)
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(time.Second):
			}
			continue
		}
		switch m := msg.(type) {
		case *redis.Subscription:
			if m.Kind == "psubscribe" {
				h.resyncAll()
			}
		case *redis.Message:
			n, err := events.ParseNotice(m.Payload)
			if err != nil {
				h.logger.Warn("ignoring malformed notice", "channel", m.Channel, "error", err)
				continue
			}
			h.dispatch(n)
		}
	}
}

// StreamWriteTimeout is how long one write to an event stream may block.
const StreamWriteTimeout = 15 * time.Second

// BodyReadTimeout is how long the API waits for a request body (64 KiB at
// most) to arrive.
const BodyReadTimeout = 30 * time.Second

// sseWriter writes events of one stream and remembers the version each
// workspace was last sent at, so duplicates and stale notices are skipped.
// Every write has its own deadline: the server has no write timeout, which
// would end every stream, so a client that stops reading would otherwise
// hold a blocked write forever.
type sseWriter struct {
	w       http.ResponseWriter
	rc      *http.ResponseController
	timeout time.Duration
	sent    map[string]int64
}

// write sends p and flushes it, within the stream's write timeout.
func (e *sseWriter) write(p []byte) error {
	if err := e.rc.SetWriteDeadline(time.Now().Add(e.timeout)); err != nil {
		return fmt.Errorf("set stream write deadline: %w", err)
	}
	if _, err := e.w.Write(p); err != nil {
		return err
	}
	return e.rc.Flush()
}

func (e *sseWriter) event(name, id string, data any) error {
	b, err := json.Marshal(data)
	if err != nil {
		return fmt.Errorf("encode %s event: %w", name, err)
	}
	var sb strings.Builder
	if id != "" {
		sb.WriteString("id: " + id + "\n")
	}
	sb.WriteString("event: " + name + "\ndata: ")
	sb.Write(b)
	sb.WriteString("\n\n")
	return e.write([]byte(sb.String()))
}

func eventID(id string, version int64) string { return fmt.Sprintf("%s:%d", id, version) }

func (s *Server) events(w http.ResponseWriter, r *http.Request) {
	sess, ok := s.requireUser(w, r)
	if !ok {
		return
	}
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	// A HEAD response is complete with its headers: the server discards
	// the body and the client may send its next request on the connection,
	// which nothing would read while a stream ran here.
	if r.Method == http.MethodHead {
		return
	}
	// Register before reading the state, so a change between the two is
	// delivered rather than missed.
	st := s.hub.add(sess.UserID)
	defer s.hub.remove(st)
	s.metrics.sseClients.Inc()
	defer s.metrics.sseClients.Dec()

	out := &sseWriter{w: w, rc: http.NewResponseController(w), timeout: s.opts.StreamWriteTimeout, sent: map[string]int64{}}
	// Flushed at once: with no workspace to send, the client would
	// otherwise wait for the first heartbeat to see the stream open.
	if err := out.write([]byte("retry: 2000\n\n")); err != nil {
		return
	}
	// Last-Event-ID needs no replay: the current state always comes first.
	if err := s.sendState(r.Context(), out, sess.UserID); err != nil {
		s.logger.Debug("event stream ended", "error", err)
		return
	}
	heartbeat := time.NewTicker(s.opts.HeartbeatInterval)
	defer heartbeat.Stop()
	for {
		var send func() error
		select {
		case <-r.Context().Done():
			return
		case <-heartbeat.C:
			send = func() error { return out.event("heartbeat", "", struct{}{}) }
		case <-st.resync:
			send = func() error { return s.sendState(r.Context(), out, sess.UserID) }
		case n := <-st.notices:
			send = func() error { return s.sendNotice(r.Context(), out, sess.UserID, n) }
		}
		err := s.checkSession(r)
		if err == nil {
			err = send()
		}
		if err != nil {
			s.logger.Debug("event stream ended", "error", err)
			return
		}
	}
}

// errSessionEnded closes an event stream whose session was logged out or
// expired.
var errSessionEnded = errors.New("session ended")

// checkSession looks the stream's session up again (through the sessions
// cache) before anything more is sent on it, so a logout, an expiry or a
// password change ends a stream as it ends every other request.
func (s *Server) checkSession(r *http.Request) error {
	_, ok, err := s.identity.Authenticate(r)
	if err != nil {
		return fmt.Errorf("check session: %w", err)
	}
	if !ok {
		return errSessionEnded
	}
	return nil
}

// sendState sends every live workspace of the user that the client does
// not have at its current version, and a deletion for each one it was sent
// that no longer exists.
func (s *Server) sendState(ctx context.Context, out *sseWriter, userID string) error {
	live := map[string]bool{}
	after := ""
	for {
		list, err := s.workspaces.List(ctx, workspace.ListFilter{OwnerID: userID, Limit: maxPageSize, After: after})
		if err != nil {
			return fmt.Errorf("list workspaces: %w", err)
		}
		for _, ws := range list {
			live[ws.ID] = true
			if err := s.sendWorkspace(out, ws); err != nil {
				return err
			}
		}
		if len(list) < maxPageSize {
			break
		}
		after = list[len(list)-1].ID
	}
	for id, version := range out.sent {
		if !live[id] {
			if err := s.sendDeleted(out, id, version); err != nil {
				return err
			}
		}
	}
	return nil
}

func (s *Server) sendWorkspace(out *sseWriter, ws workspace.Workspace) error {
	if v, ok := out.sent[ws.ID]; ok && v >= ws.Version {
		return nil
	}
	out.sent[ws.ID] = ws.Version
	return out.event("workspace_updated", eventID(ws.ID, ws.Version), s.view(ws))
}

func (s *Server) sendDeleted(out *sseWriter, id string, version int64) error {
	delete(out.sent, id)
	return out.event("workspace_deleted", eventID(id, version), struct {
		ID string `json:"id"`
	}{id})
}

// sendNotice turns a notice into an event by reading the workspace: the
// notice says what changed, the table says what it is now.
func (s *Server) sendNotice(ctx context.Context, out *sseWriter, userID string, n events.Notice) error {
	if v, ok := out.sent[n.ID]; ok && v >= n.Version {
		return nil
	}
	ws, err := s.workspaces.Get(ctx, n.ID)
	switch {
	case errors.Is(err, workspace.ErrNotFound):
		if _, known := out.sent[n.ID]; !known && n.Kind != events.KindDeleted {
			return nil
		}
		return s.sendDeleted(out, n.ID, n.Version)
	case err != nil:
		return fmt.Errorf("get workspace: %w", err)
	case ws.OwnerID != userID:
		return nil
	}
	return s.sendWorkspace(out, ws)
}
