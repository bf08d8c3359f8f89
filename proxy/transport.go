package proxy

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// upstreamTransport carries proxied requests to workspaces. Requests
// without a body, nearly all of a workspace's traffic, are written and
// answered on the caller's goroutine over a pool of HTTP/1.1 connections:
// net/http's Transport hands every request to a writer goroutine and every
// response back from a reader goroutine, and those two hand-offs cost as
// much CPU on a busy machine as the rest of the proxying. Requests with a
// body keep the standard Transport, which handles a workspace answering
// before it has read the whole body.
type upstreamTransport struct {
	fallback *http.Transport
	// dial opens a connection to a host: a TCP dial for a workspace's
	// program, the workspace agent for a port (newPortTransport).
	dial func(ctx context.Context, network, addr string) (net.Conn, error)
	// maxIdlePerHost bounds the pooled connections of one upstream.
	maxIdlePerHost int
	// idleTimeout is how long a pooled connection may wait for reuse.
	idleTimeout time.Duration
	now         func() time.Time

	mu        sync.Mutex
	idle      map[string][]*upstreamConn
	lastSweep time.Time
}

func newUpstreamTransport() *upstreamTransport {
	return &upstreamTransport{
		fallback: &http.Transport{
			Proxy: nil,
			DialContext: (&net.Dialer{
				Timeout:   5 * time.Second,
				KeepAlive: 30 * time.Second,
			}).DialContext,
			MaxIdleConns:          1024,
			MaxIdleConnsPerHost:   256,
			IdleConnTimeout:       90 * time.Second,
			ExpectContinueTimeout: time.Second,
			// Bodies pass through untouched; the browser negotiated
			// encoding with the workspace.
			DisableCompression: true,
		},
		dial:           (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		maxIdlePerHost: 256,
		idleTimeout:    90 * time.Second,
		now:            time.Now,
		idle:           map[string][]*upstreamConn{},
	}
}

// newPortTransport is the transport of port addresses: the same pool and
// plain path, with connections opened by dial.
func newPortTransport(dial func(ctx context.Context, network, addr string) (net.Conn, error)) *upstreamTransport {
	t := newUpstreamTransport()
	t.dial = dial
	t.fallback.DialContext = dial
	return t
}

// upstreamConn is one HTTP/1.1 connection to a workspace.
type upstreamConn struct {
	net.Conn
	host      string
	br        *bufio.Reader
	bw        *bufio.Writer
	idleSince time.Time
}

// errClosedBeforeResponse marks a connection that broke before the first
// byte of an answer, as one the workspace closed while it sat in the pool
// does; an idempotent request is then sent again on a new connection.
var errClosedBeforeResponse = errors.New("upstream closed the connection before answering")

// RoundTrip implements http.RoundTripper.
func (t *upstreamTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if (req.Body != nil && req.Body != http.NoBody) || req.URL.Scheme != "http" {
		return t.fallback.RoundTrip(req)
	}
	return t.send(req, req.URL.Host, !req.Close, func(bw *bufio.Writer) error { return req.Write(bw) })
}

// send carries a request without a body to host: write puts its head on a
// pooled connection. req gives the context, and the method by which the
// answer is read and the request may be sent again; keepAlive is false
// when the request asked the workspace to close the connection.
func (t *upstreamTransport) send(req *http.Request, host string, keepAlive bool, write func(*bufio.Writer) error) (*http.Response, error) {
	ctx := req.Context()
	for attempt := 0; ; attempt++ {
		uc, reused, err := t.conn(ctx, host)
		if err != nil {
			return nil, err
		}
		res, err := t.exchange(uc, req, keepAlive, write)
		if err == nil {
			return res, nil
		}
		uc.Close()
		if ctx.Err() != nil {
			return nil, fmt.Errorf("proxy to %s: %w", host, context.Cause(ctx))
		}
		if !reused || attempt > 0 || !errors.Is(err, errClosedBeforeResponse) || !replayable(req) {
			return nil, err
		}
	}
}

// replayable reports a request that may be sent twice (RFC 9110 §9.2.2).
func replayable(req *http.Request) bool {
	switch req.Method {
	case http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace:
		return true
	}
	return false
}

// exchange writes a request head on uc and reads the response head. The
// response body owns uc from then on.
func (t *upstreamTransport) exchange(uc *upstreamConn, req *http.Request, keepAlive bool, write func(*bufio.Writer) error) (*http.Response, error) {
	// A client that goes away unblocks any read or write on uc at once.
	stop := context.AfterFunc(req.Context(), func() { _ = uc.SetDeadline(time.Unix(1, 0)) })
	err := write(uc.bw)
	if err == nil {
		err = uc.bw.Flush()
	}
	if err != nil {
		stop()
		return nil, fmt.Errorf("write request to %s: %w: %w", uc.host, errClosedBeforeResponse, err)
	}
	// Whether the workspace sent anything at all decides whether the
	// request may be sent again; ReadResponse reports both cases alike.
	if _, err := uc.br.Peek(1); err != nil {
		stop()
		if errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET) {
			return nil, fmt.Errorf("read response from %s: %w: %w", uc.host, errClosedBeforeResponse, err)
		}
		return nil, fmt.Errorf("read response from %s: %w", uc.host, err)
	}
	var res *http.Response
	for {
		res, err = http.ReadResponse(uc.br, req)
		if err != nil {
			stop()
			return nil, fmt.Errorf("read response from %s: %w", uc.host, err)
		}
		// Interim answers (103 Early Hints) are not passed on; the final
		// one follows on the same connection.
		if res.StatusCode < 100 || res.StatusCode >= 200 || res.StatusCode == http.StatusSwitchingProtocols {
			break
		}
	}
	if res.StatusCode == http.StatusSwitchingProtocols {
		// ReverseProxy copies both directions and closes the connection
		// when the client's request ends.
		stop()
		res.Body = &upgradedBody{br: uc.br, Conn: uc.Conn}
		return res, nil
	}
	res.Body = &pooledBody{
		body: res.Body, t: t, uc: uc, stop: stop,
		eof:      res.Body == http.NoBody,
		reusable: !res.Close && keepAlive,
	}
	return res, nil
}

// conn returns a pooled live connection to host or dials a new one.
func (t *upstreamTransport) conn(ctx context.Context, host string) (*upstreamConn, bool, error) {
	for {
		uc := t.take(host)
		if uc == nil {
			break
		}
		// A workspace closes a connection only after it idled for its
		// keep-alive timeout (5 s for Node); a connection back in the pool
		// for less than a second is not worth a system call to check.
		if t.now().Sub(uc.idleSince) < time.Second || alive(uc) {
			return uc, true, nil
		}
		uc.Close()
	}
	c, err := t.dial(ctx, "tcp", host)
	if err != nil {
		return nil, false, fmt.Errorf("dial %s: %w", host, err)
	}
	return &upstreamConn{Conn: c, host: host, br: bufio.NewReaderSize(c, 4<<10), bw: bufio.NewWriterSize(c, 4<<10)}, false, nil
}

// alive reports whether a pooled connection can carry a request: the
// workspace has neither closed it nor sent anything unasked. Node (and so
// code-server) closes idle connections after 5 s, so a pool without this
// check would hand out dead connections after every pause.
func alive(uc *upstreamConn) bool {
	sc, ok := uc.Conn.(syscall.Conn)
	if !ok {
		return true
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	ok = false
	var buf [1]byte
	err = raw.Read(func(fd uintptr) bool {
		// Nothing to read is the healthy answer; a read of 0 bytes is the
		// workspace's close, any byte is a protocol error.
		_, _, err := syscall.Recvfrom(int(fd), buf[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		ok = errors.Is(err, syscall.EAGAIN)
		// Never wait for readiness: the answer is known now.
		return true
	})
	return err == nil && ok
}

// take pops the most recently used idle connection of host. An emptied
// list stays in the map, so that putting the connection back does not
// allocate a new one on every request; the sweep drops it once unused.
func (t *upstreamTransport) take(host string) *upstreamConn {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.sweepLocked()
	conns, ok := t.idle[host]
	if !ok {
		return nil
	}
	for len(conns) > 0 {
		uc := conns[len(conns)-1]
		conns[len(conns)-1] = nil
		conns = conns[:len(conns)-1]
		if t.now().Sub(uc.idleSince) < t.idleTimeout {
			t.idle[host] = conns
			return uc
		}
		uc.Close()
	}
	t.idle[host] = conns
	return nil
}

// put returns a connection whose last response was read to the end.
func (t *upstreamTransport) put(uc *upstreamConn) {
	if uc.br.Buffered() > 0 {
		// The workspace sent more than its response: the next exchange
		// would take those bytes for its answer.
		uc.Close()
		return
	}
	uc.idleSince = t.now()
	t.mu.Lock()
	defer t.mu.Unlock()
	conns := t.idle[uc.host]
	if len(conns) >= t.maxIdlePerHost {
		uc.Close()
		return
	}
	t.idle[uc.host] = append(conns, uc)
}

func (t *upstreamTransport) setIdleLocked(host string, conns []*upstreamConn) {
	if len(conns) == 0 {
		delete(t.idle, host)
		return
	}
	t.idle[host] = conns
}

// sweepLocked closes connections idle for longer than idleTimeout, at most
// twice per timeout, so the pools of workspaces that stopped do not keep
// their sockets open.
func (t *upstreamTransport) sweepLocked() {
	now := t.now()
	if now.Sub(t.lastSweep) < t.idleTimeout/2 {
		return
	}
	t.lastSweep = now
	for host, conns := range t.idle {
		kept := conns[:0]
		for _, uc := range conns {
			if now.Sub(uc.idleSince) < t.idleTimeout {
				kept = append(kept, uc)
				continue
			}
			uc.Close()
		}
		clear(conns[len(kept):])
		t.setIdleLocked(host, kept)
	}
}

// forget closes the idle connections of host, whose workspace just failed
// to answer.
func (t *upstreamTransport) forget(host string) {
	t.mu.Lock()
	conns := t.idle[host]
	delete(t.idle, host)
	t.mu.Unlock()
	for _, uc := range conns {
		uc.Close()
	}
}

// pooledBody is a response body that returns its connection to the pool
// once read to the end.
type pooledBody struct {
	body     io.ReadCloser
	t        *upstreamTransport
	uc       *upstreamConn
	stop     func() bool
	eof      bool
	reusable bool
	// state is open, closed or aborted; abort may come from another
	// goroutine.
	state atomic.Uint32
}

const (
	bodyOpen uint32 = iota
	bodyClosed
	bodyAborted
)

func (b *pooledBody) Read(p []byte) (int, error) {
	if b.state.Load() == bodyClosed {
		return 0, net.ErrClosed
	}
	n, err := b.body.Read(p)
	if errors.Is(err, io.EOF) {
		b.eof = true
	}
	return n, err
}

func (b *pooledBody) Close() error {
	if !b.state.CompareAndSwap(bodyOpen, bodyClosed) {
		if b.state.Swap(bodyClosed) == bodyAborted {
			b.stop()
			return b.uc.Close()
		}
		return nil
	}
	// stop is false when the client's cancellation already poisoned the
	// connection's deadline.
	if b.stop() && b.eof && b.reusable {
		b.t.put(b.uc)
		return nil
	}
	// An unfinished body is not drained: the connection is dropped.
	return b.uc.Close()
}

// abort makes a read of the body in progress, or the next, fail at once,
// from any goroutine; the connection is then dropped, never pooled. It
// does nothing once the body was closed.
func (b *pooledBody) abort() {
	if b.state.CompareAndSwap(bodyOpen, bodyAborted) {
		_ = b.uc.SetDeadline(time.Unix(1, 0))
	}
}

// upgradedBody is the connection after 101 Switching Protocols, with any
// bytes the workspace sent right behind the response head.
type upgradedBody struct {
	net.Conn
	br *bufio.Reader
}

func (b *upgradedBody) Read(p []byte) (int, error) {
	if b.br.Buffered() > 0 {
		return b.br.Read(p)
	}
	return b.Conn.Read(p)
}
