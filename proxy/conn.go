package proxy

import (
	"bufio"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// responseRecorder remembers the status for metrics and, when a proxied
// WebSocket is switched to, hands ReverseProxy a client connection that
// reads what the client sends for signs of a person at work. ReverseProxy
// copies each direction on its own goroutine, so the copy to the
// workspace reads through that connection and the copy back to the
// browser stays a plain write.
type responseRecorder struct {
	http.ResponseWriter
	status int
	// activity receives the marks that workspace workspaceID is in use.
	activity    ActivityMarker
	workspaceID string
	// socket follows the client's side of a proxied WebSocket; nil for
	// sockets the proxy answers itself.
	socket *socketActivity
	// upgraded is set once the connection was hijacked.
	upgraded bool
	// start is when the request came; kept is set once the proxy took the
	// connection over, which then records the request's metrics itself.
	start time.Time
	kept  bool
	// held is the request's connection in the proxy's watch, once its
	// answer turned out to be long-lived; ended is the watch's reason
	// for ending it (endReason), zero while it lives.
	held  *held
	ended atomic.Uint32
}

// mark records that the workspace is in use.
func (w *responseRecorder) mark() { w.activity.Mark(w.workspaceID) }

func (w *responseRecorder) WriteHeader(code int) {
	// Interim answers (100 Continue, 103 Early Hints) that ReverseProxy
	// passes on precede the status that counts.
	if w.status == 0 && code >= http.StatusOK {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *responseRecorder) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach Flush and deadlines.
func (w *responseRecorder) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// Hijack is found by http.ResponseController before Unwrap.
func (w *responseRecorder) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	c, brw, err := http.NewResponseController(w.ResponseWriter).Hijack()
	if err != nil {
		return nil, nil, err
	}
	w.upgraded = true
	w.status = http.StatusSwitchingProtocols
	if w.socket == nil {
		return c, brw, nil
	}
	return &activityConn{Conn: c, socket: w.socket, mark: w.mark, ended: &w.ended}, brw, nil
}

// watchSocket prepares the proxying of the WebSocket r opens. VS Code's
// protocol is read from the frames, so its client is not offered
// compression, which would hide the messages (the workspace then sends
// uncompressed frames too). Other programs keep theirs: only their frame
// headers are read.
func (w *responseRecorder) watchSocket(r *http.Request) {
	vscode, resumed := vscodeSocket(r)
	if vscode {
		r.Header.Del("Sec-WebSocket-Extensions")
	}
	w.socket = newSocketActivity(resumed)
}

// activityConn is the client's side of a proxied WebSocket: what is read
// from it goes to the workspace and is scanned on the way; what is written
// to it passes untouched. Once the proxy's watch ended the socket, nothing
// more passes either way, and closing it sends the client a close frame
// that says why.
type activityConn struct {
	net.Conn
	socket *socketActivity
	mark   func()
	// ended is the watch's reason for ending the socket (endReason).
	ended *atomic.Uint32
	// mu keeps the close frame from landing inside a frame the workspace
	// is writing; out follows those frames.
	mu  sync.Mutex
	out frameCursor
}

func (c *activityConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if c.ended.Load() != 0 {
		// Read before the end, but not yet passed on: dropped.
		return 0, net.ErrClosed
	}
	if n > 0 && c.socket.scan(b[:n]) {
		c.mark()
	}
	return n, err
}

func (c *activityConn) Write(b []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ended.Load() != 0 {
		return 0, net.ErrClosed
	}
	n, err := c.Conn.Write(b)
	c.out.advance(b[:n])
	return n, err
}

// closeFrameTimeout bounds the wait for a write in progress, and the
// close frame's own write, when the watch ended the socket.
const closeFrameTimeout = time.Second

// Close closes the connection, first telling the client why when the
// watch ended it and the workspace's frames leave room for a frame.
func (c *activityConn) Close() error {
	if reason := endReason(c.ended.Load()); reason != 0 {
		_ = c.Conn.SetWriteDeadline(time.Now().Add(closeFrameTimeout))
		c.mu.Lock()
		if c.out.atBoundary() {
			_, _ = c.Conn.Write(closeFrame(closePolicyViolation, reason.words()))
		}
		c.mu.Unlock()
	}
	return c.Conn.Close()
}
