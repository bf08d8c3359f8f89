package proxy

import (
	"bufio"
	"net"
	"net/http"
)

// responseRecorder remembers the status for metrics and, when the response
// switches protocols, hands ReverseProxy a connection that marks activity
// on every read and write. ReverseProxy copies WebSocket traffic between
// the two hijacked connections, so wrapping the client side sees every
// message in both directions without parsing frames.
type responseRecorder struct {
	http.ResponseWriter
	status int
	// activity receives the marks that workspace workspaceID is in use.
	activity    ActivityMarker
	workspaceID string
	// upgraded is set once the connection was hijacked.
	upgraded bool
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
	return &activityConn{Conn: c, mark: w.mark}, brw, nil
}

// activityConn marks the workspace active whenever bytes move.
type activityConn struct {
	net.Conn
	mark func()
}

func (c *activityConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if n > 0 {
		c.mark()
	}
	return n, err
}

func (c *activityConn) Write(b []byte) (int, error) {
	n, err := c.Conn.Write(b)
	if n > 0 {
		c.mark()
	}
	return n, err
}
