package proxy

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/textproto"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/http/httpguts"

	"github.com/codehub-io/codehub/ports"
)

// A workbench's connections carry one plain request after another. Once
// the workspace has answered one, the proxy takes the connection over from
// net/http and serves the plain requests that follow on it itself: it reads
// each head, checks the session and the cached route, forwards it and
// writes the answer, on the connection's goroutine. net/http's server
// spends as much CPU per request as the rest of the proxy (a response
// object, a goroutine that reads ahead for every request and the deadlines
// that stop it, a context with its cancellation). The first request that
// needs more than that (another path, a page load, a WebSocket, a missing
// route, a failed workspace) goes back to net/http through the listener
// with every byte of it unread, and net/http serves the connection from
// there as if it had never left.

// Listener is the server's listener as the proxy sees it: connections the
// proxy took over come back through it to the server when a request needs
// the rest of it. Close stops taking connections over and ends those
// taken, each after the answer it is writing.
type Listener struct {
	net.Listener
	// idle is how long a taken connection may wait for its next request,
	// header how long that request's head may take once it began.
	idle, header time.Duration
	accepted     chan accepted
	back         chan net.Conn
	done         chan struct{}
	once         sync.Once

	mu   sync.Mutex
	kept map[*keptConn]struct{}
	wg   sync.WaitGroup
}

type accepted struct {
	conn net.Conn
	err  error
}

// Listen wraps the server's listener ln, from which the proxy may take
// connections over; idle and header are the server's IdleTimeout and
// ReadHeaderTimeout, which then apply to them as well. The proxy takes no
// connection over without it.
func (p *Proxy) Listen(ln net.Listener, idle, header time.Duration) *Listener {
	l := &Listener{
		Listener: ln, idle: idle, header: header,
		accepted: make(chan accepted), back: make(chan net.Conn), done: make(chan struct{}),
		kept: map[*keptConn]struct{}{},
	}
	go l.acceptLoop()
	p.conns = l
	return l
}

// acceptLoop hands the connections of the wrapped listener to Accept. It
// ends with the listener.
func (l *Listener) acceptLoop() {
	for {
		c, err := l.Listener.Accept()
		select {
		case l.accepted <- accepted{c, err}:
		case <-l.done:
			if c != nil {
				c.Close()
			}
			return
		}
		if errors.Is(err, net.ErrClosed) {
			return
		}
	}
}

// Accept returns the next new connection, or one handed back.
func (l *Listener) Accept() (net.Conn, error) {
	select {
	case a := <-l.accepted:
		return a.conn, a.err
	case c := <-l.back:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

// Close closes the wrapped listener and wakes the taken connections that
// wait for a request, which then end.
func (l *Listener) Close() error {
	var err error
	l.once.Do(func() {
		// done first: a connection that moves its deadline after the one
		// set here sees done closed before it reads.
		close(l.done)
		l.mu.Lock()
		for kc := range l.kept {
			_ = kc.SetReadDeadline(time.Now())
		}
		l.mu.Unlock()
		err = l.Listener.Close()
	})
	return err
}

// Wait returns once every taken connection has ended, or with ctx's error.
func (l *Listener) Wait(ctx context.Context) error {
	ended := make(chan struct{})
	go func() {
		l.wg.Wait()
		close(ended)
	}()
	select {
	case <-ended:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// admit registers a connection about to be taken over; false once closed.
// Under mu, a connection admitted before Close is woken by it.
func (l *Listener) admit(kc *keptConn) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closing() {
		return false
	}
	l.kept[kc] = struct{}{}
	l.wg.Add(1)
	return true
}

func (l *Listener) release(kc *keptConn) {
	l.mu.Lock()
	delete(l.kept, kc)
	l.mu.Unlock()
	l.wg.Done()
}

func (l *Listener) closing() bool {
	select {
	case <-l.done:
		return true
	default:
		return false
	}
}

// handBack gives c to the server as a new connection.
func (l *Listener) handBack(c net.Conn) {
	select {
	case l.back <- c:
	case <-l.done:
		c.Close()
	}
}

// prefixedConn reads pending before the connection itself: the bytes read
// ahead of a connection that changes hands.
type prefixedConn struct {
	net.Conn
	pending []byte
}

func (c *prefixedConn) Read(p []byte) (int, error) {
	if len(c.pending) > 0 {
		n := copy(p, c.pending)
		c.pending = c.pending[n:]
		return n, nil
	}
	return c.Conn.Read(p)
}

// CloseWrite lets net/http end a connection it serves again gracefully.
func (c *prefixedConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// headSize bounds a request head the proxy reads itself; a longer one goes
// to net/http, which allows up to 1 MB.
const headSize = 8 << 10

// keptConn is a client connection the proxy serves itself.
type keptConn struct {
	net.Conn
	l      *Listener
	br     *bufio.Reader
	bw     *bufio.Writer
	remote string
	// head and hr parse one request head out of br's buffer.
	head bytes.Reader
	hr   *bufio.Reader
	// armed is when the read deadline was last moved.
	armed time.Time
	// handedBack: the server has the connection again.
	handedBack bool
	// ended is set once the proxy's watch ended the connection; stream
	// is the answer that streams on it meanwhile, which ends with it.
	ended  atomic.Bool
	stream atomic.Pointer[pooledBody]
}

// end closes the connection for the watch: the client's side, and the
// workspace's of an answer that streams. The request being served, if
// any, goes no further.
func (kc *keptConn) end(endReason) {
	kc.ended.Store(true)
	if b := kc.stream.Load(); b != nil {
		b.abort()
	}
	_ = kc.Conn.Close()
}

var errHeadTooLarge = errors.New("request head larger than the proxy reads")

// takeOver serves the plain request r, whose answer res the workspace has
// begun, and the plain requests after it on the same connection. It
// returns false, having written nothing, when the connection stays with
// net/http.
func (p *Proxy) takeOver(w *responseRecorder, r *http.Request, res *http.Response, t *target) bool {
	l := p.conns
	if l == nil || w.start.IsZero() || r.TLS != nil || r.ProtoMajor != 1 || r.ProtoMinor != 1 || r.Close || l.closing() {
		return false
	}
	c, brw, err := http.NewResponseController(w.ResponseWriter).Hijack()
	if err != nil {
		return false
	}
	w.kept = true
	p.metrics.taken.Inc()
	pending, _ := brw.Reader.Peek(brw.Reader.Buffered())
	kc := &keptConn{
		Conn: c, l: l, bw: brw.Writer, remote: r.RemoteAddr,
		br: bufio.NewReaderSize(&prefixedConn{Conn: c, pending: bytes.Clone(pending)}, headSize),
	}
	kc.hr = bufio.NewReaderSize(&kc.head, headSize)
	// A listener closed meanwhile gets this answer, and then the
	// connection ends.
	admitted := l.admit(kc)
	// The connection lives on under the session of the request that
	// began it; each request on it is checked on its own as well.
	h := p.hold(r, t, kc.end)
	defer func() {
		p.release(h)
		if !kc.handedBack {
			kc.Close()
		}
		if admitted {
			l.release(kc)
		}
	}()
	if !p.writeKept(kc, r, res, t, w.start) || !admitted {
		return true
	}
	for p.serveNext(kc) {
	}
	return true
}

// handBack returns the connection, with what was read ahead of it, to the
// server.
func (p *Proxy) handBack(kc *keptConn) {
	pending, _ := kc.br.Peek(kc.br.Buffered())
	// A connection handed back waits for its request with the server's
	// deadlines.
	_ = kc.SetReadDeadline(time.Time{})
	kc.handedBack = true
	p.metrics.handedBack.Inc()
	kc.l.handBack(&prefixedConn{Conn: kc.Conn, pending: bytes.Clone(pending)})
}

// serveNext serves the next request on kc; false ends the connection
// here.
func (p *Proxy) serveNext(kc *keptConn) bool {
	now := time.Now()
	if now.Sub(kc.armed) > time.Second {
		// The deadline moves at most once a second: the idle timeout
		// holds to within that.
		_ = kc.SetReadDeadline(now.Add(kc.l.idle))
		kc.armed = now
	}
	if kc.l.closing() {
		return false
	}
	head, err := kc.nextHead()
	if kc.ended.Load() {
		return false
	}
	if errors.Is(err, errHeadTooLarge) {
		p.handBack(kc)
		return false
	}
	if err != nil {
		return false
	}
	start := time.Now()
	r, ok := kc.parse(head)
	if !ok {
		p.handBack(kc)
		return false
	}
	t, ok := p.keptTarget(r)
	if !ok {
		p.handBack(kc)
		return false
	}
	res, err := p.sendPlain(r, &t)
	if err == nil && res.StatusCode == http.StatusSwitchingProtocols {
		res.Body.Close()
		err = errUnaskedSwitch
	}
	if err != nil {
		// Nothing is written and the request is still unread: the server
		// answers it from the workspace's state, as any failed request.
		p.logger.Debug("upstream failed on a taken connection", "workspace_id", t.id, "port", t.port, "error", err)
		p.forgetUpstream(&t)
		p.handBack(kc)
		return false
	}
	_, _ = kc.br.Discard(len(head))
	return p.writeKept(kc, r, res, &t, start) && !r.Close
}

// nextHead waits for the next request head and returns it, still in br's
// buffer.
func (kc *keptConn) nextHead() ([]byte, error) {
	searched := 0
	for {
		buf, _ := kc.br.Peek(kc.br.Buffered())
		from := max(searched-3, 0)
		if i := bytes.Index(buf[from:], []byte("\r\n\r\n")); i >= 0 {
			return buf[:from+i+4], nil
		}
		if len(buf) == kc.br.Size() {
			return nil, errHeadTooLarge
		}
		if searched == 0 && len(buf) > 0 {
			// A head that began must end within the header timeout, as
			// on the server; the idle deadline comes back after it.
			_ = kc.SetReadDeadline(time.Now().Add(kc.l.header))
			kc.armed = time.Time{}
		}
		searched = len(buf)
		if _, err := kc.br.Peek(len(buf) + 1); err != nil {
			return nil, err
		}
	}
}

// parse reads the request in head, which must be all of it, with net/http's
// own parser, and applies the checks net/http's server adds. Anything it
// does not take goes to the server, which answers it.
func (kc *keptConn) parse(head []byte) (*http.Request, bool) {
	for i := bytes.IndexByte(head, '\n'); i >= 0; {
		// Lines end in CRLF only, so that the head ends where the parser
		// finds its end.
		if i == 0 || head[i-1] != '\r' {
			return nil, false
		}
		j := bytes.IndexByte(head[i+1:], '\n')
		if j < 0 {
			break
		}
		i += j + 1
	}
	kc.head.Reset(head)
	kc.hr.Reset(&kc.head)
	r, err := http.ReadRequest(kc.hr)
	if err != nil || kc.hr.Buffered() > 0 || kc.head.Len() > 0 {
		return nil, false
	}
	// ReadRequest refuses a second Host and drops the header, leaving
	// its value in r.Host when the target is in origin form.
	if r.ProtoMajor != 1 || r.ProtoMinor != 1 || r.URL.Host != "" || r.Host == "" || !httpguts.ValidHostHeader(r.Host) {
		return nil, false
	}
	for name, values := range r.Header {
		if !httpguts.ValidHeaderFieldName(name) {
			return nil, false
		}
		for _, v := range values {
			if !httpguts.ValidHeaderFieldValue(v) {
				return nil, false
			}
		}
	}
	r.RemoteAddr = kc.remote
	return r, true
}

// keptTarget is where r goes when the proxy can serve it on a taken
// connection: a plain request, not a page load, to a workspace whose route
// is cached for the session's user. It follows ServeHTTP's path for such
// a request; every other request goes to the server.
func (p *Proxy) keptTarget(r *http.Request) (target, bool) {
	if !isPlain(r) || isWorkbenchLoad(r) || !p.opts.Sites.Proxies(r) {
		return target{}, false
	}
	t, pl := p.where(r)
	if pl != placed || strings.HasPrefix(t.path, ownPrefix) || (t.onHost && t.path == HandoffPath) || p.isSignOut(r, t) {
		return target{}, false
	}
	if t.port != 0 {
		return p.keptPortTarget(r, t)
	}
	hostOf := ""
	if t.onHost {
		hostOf = t.id
	}
	user, ok, err := p.auth.SessionUser(r, hostOf)
	if err != nil || !ok {
		return target{}, false
	}
	rt, ok := p.routes.get(t.id)
	if !ok || rt.owner != user {
		return target{}, false
	}
	t.user, t.hostport, t.token, t.name = user, rt.upstream, rt.token, rt.name
	return t, true
}

// keptPortTarget is keptTarget for a port's address: a port whose route
// is cached and whose share level lets the session's user, or a visitor
// without one, in, as servePort decides. A page load goes to the server,
// which counts the owner's as activity.
func (p *Proxy) keptPortTarget(r *http.Request, t target) (target, bool) {
	if isNavigation(r) {
		return target{}, false
	}
	site := t.site()
	hostOf := ""
	if t.onHost {
		hostOf = site
	}
	user, ok, err := p.auth.SessionUser(r, hostOf)
	if err != nil {
		return target{}, false
	}
	if !ok {
		user = ""
	}
	rt, ok := p.routes.get(site)
	if !ok || ports.Decide(rt.share, p.portCap(), ports.ViewerOf(user, rt.owner)) != ports.Allow {
		return target{}, false
	}
	t.user, t.name, t.share = user, rt.name, rt.share
	return t, true
}

// writeKept writes the workspace's answer res to r as net/http's server
// writes what copyPlainResponse hands it, and records the request's
// metrics. It returns false when the connection cannot go on.
func (p *Proxy) writeKept(kc *keptConn, r *http.Request, res *http.Response, t *target, start time.Time) bool {
	status := res.StatusCode
	defer func() {
		p.metrics.requests.inc(status)
		p.metrics.duration.Observe(time.Since(start).Seconds())
	}()
	buf := p.buffers.Get()
	defer p.buffers.Put(buf)
	bw := kc.bw
	head := r.Method == http.MethodHead
	bodied := status != http.StatusNotModified && status != http.StatusNoContent && status >= 200
	stream := streams(res)
	chunked := bodied && !head && res.ContentLength == -1
	// An answer that does not stream is sniffed for its type, when it
	// has none, from its first read, as net/http does.
	var first []byte
	if bodied && !head && !stream && res.Header["Content-Type"] == nil && res.Header.Get("Content-Encoding") == "" {
		n, err := res.Body.Read(buf)
		first = buf[:n]
		if err != nil && !errors.Is(err, io.EOF) {
			res.Body.Close()
			return false
		}
	}
	bw.WriteString("HTTP/1.1 ")
	bw.WriteString(strconv.Itoa(status))
	if text := http.StatusText(status); text != "" {
		bw.WriteByte(' ')
		bw.WriteString(text)
	} else {
		bw.WriteString(" status code ")
		bw.WriteString(strconv.Itoa(status))
	}
	bw.WriteString("\r\n")
	connection := res.Header["Connection"]
	// A length the workspace's Connection header names is dropped like
	// any header it names, but the answer still needs its framing:
	// net/http's server frames what it is handed itself, and so does
	// this one, from the length the transport parsed.
	lengthDropped := false
	for name, values := range res.Header {
		values, ok := p.passedOn(name, values, connection)
		if !ok {
			lengthDropped = lengthDropped || name == "Content-Length"
			continue
		}
		if suppressed(name, status) {
			continue
		}
		for _, v := range values {
			writeField(bw, name, headerValue(v))
		}
	}
	if lengthDropped && bodied && !head && !chunked {
		var n [20]byte
		bw.WriteString("Content-Length: ")
		bw.Write(strconv.AppendInt(n[:0], res.ContentLength, 10))
		bw.WriteString("\r\n")
	}
	if len(res.Trailer) > 0 && chunked {
		writeField(bw, "Trailer", trailerNames(res.Trailer))
	}
	if len(first) > 0 {
		writeField(bw, "Content-Type", http.DetectContentType(first))
	}
	if res.Header["Date"] == nil {
		var date [len(http.TimeFormat) + 4]byte
		bw.WriteString("Date: ")
		bw.Write(time.Now().UTC().AppendFormat(date[:0], http.TimeFormat))
		bw.WriteString("\r\n")
	}
	if chunked {
		bw.WriteString("Transfer-Encoding: chunked\r\n")
	}
	closing := r.Close || kc.l.closing()
	if closing {
		bw.WriteString("Connection: close\r\n")
	}
	bw.WriteString("\r\n")
	if !bodied || head {
		res.Body.Close()
		return bw.Flush() == nil && !closing
	}
	var out io.Writer = bw
	var chunks io.WriteCloser
	if chunked {
		chunks = httputil.NewChunkedWriter(bw)
		out = chunks
	}
	if stream {
		if err := bw.Flush(); err != nil {
			res.Body.Close()
			return false
		}
	}
	if len(first) > 0 {
		if _, err := out.Write(first); err != nil {
			res.Body.Close()
			return false
		}
	}
	var flush func() error
	if stream {
		flush = bw.Flush
		if b, ok := res.Body.(*pooledBody); ok {
			kc.stream.Store(b)
			defer kc.stream.Store(nil)
			if kc.ended.Load() {
				b.abort()
			}
		}
	}
	if err := p.copyBody(out, flush, res, t, buf); err != nil {
		// Half an answer must not look whole: the connection ends.
		res.Body.Close()
		return false
	}
	// Closing the body reads the trailers and returns the connection.
	res.Body.Close()
	if chunks != nil {
		chunks.Close()
		for name, values := range res.Trailer {
			for _, v := range values {
				writeField(bw, name, headerValue(v))
			}
		}
		bw.WriteString("\r\n")
	}
	return bw.Flush() == nil && !closing
}

// suppressed reports a header net/http's server drops for status: the
// framing of an answer without a body, and the type of a 304.
func suppressed(name string, status int) bool {
	switch {
	case status == http.StatusNotModified:
		return name == "Content-Type" || name == "Content-Length" || name == "Transfer-Encoding"
	case status < 200 || status == http.StatusNoContent:
		return name == "Content-Length" || name == "Transfer-Encoding"
	}
	return false
}

// headerValue is v as net/http writes a header value: line breaks become
// spaces, and the ends are trimmed.
func headerValue(v string) string {
	if strings.ContainsAny(v, "\r\n") {
		v = newlineToSpace.Replace(v)
	}
	return textproto.TrimString(v)
}

var newlineToSpace = strings.NewReplacer("\n", " ", "\r", " ")
