package proxy

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
)

// Plain requests, GET and HEAD without a body or an upgrade, are nearly
// all of a workbench's traffic. The proxy writes their head to the
// workspace itself and copies the answer back, past httputil.ReverseProxy,
// whose request clone, header rewrites, Request.Write and header copies
// cost more CPU than the rest of CodeHub's proxying. Everything else takes
// ReverseProxy. The rules both paths share (hop-by-hop headers,
// credentials, X-Forwarded-*, Set-Cookie, trailers, flushing) are held to
// one behaviour by the tests.

// errUnaskedSwitch is a 101 answer to a request that asked for no switch.
var errUnaskedSwitch = errors.New("workspace switched protocols unasked")

// isPlain reports a request the plain path carries. Anything it would have
// to rewrite in ways ReverseProxy knows better (a query ReverseProxy
// cleans, a host it normalises, a body, an upgrade, an expectation) takes
// ReverseProxy instead.
func isPlain(r *http.Request) bool {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		return false
	}
	if (r.Body != nil && r.Body != http.NoBody) || r.ContentLength != 0 || len(r.TransferEncoding) > 0 {
		return false
	}
	if r.Header["Upgrade"] != nil || r.Header["Expect"] != nil || r.URL.Opaque != "" {
		return false
	}
	return plainHost(r.Host) && !queryNeedsCleaning(r.URL.RawQuery)
}

// plainHost reports a Host that Request.Write would send as it is:
// printable ASCII without an IPv6 zone, which it would strip.
func plainHost(host string) bool {
	if host == "" {
		return false
	}
	for i := 0; i < len(host); i++ {
		if c := host[i]; c <= ' ' || c >= 0x7f || c == '%' {
			return false
		}
	}
	return true
}

// queryNeedsCleaning reports a query ReverseProxy would re-encode: one
// with a semicolon or a malformed escape, which Go's servers no longer
// split on or accept.
func queryNeedsCleaning(q string) bool {
	for i := 0; i < len(q); i++ {
		switch q[i] {
		case ';':
			return true
		case '%':
			if i+2 >= len(q) || !isHex(q[i+1]) || !isHex(q[i+2]) {
				return true
			}
			i += 2
		}
	}
	return false
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

// hopByHop reports a header that belongs to one connection only: one of
// those RFC 9110 §7.6.1 and its predecessors name, or one its message's
// Connection header lists.
func hopByHop(name string, connection []string) bool {
	switch name {
	case "Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate", "Proxy-Authorization",
		"Te", "Trailer", "Transfer-Encoding", "Upgrade":
		return true
	}
	for _, v := range connection {
		for token := range strings.SplitSeq(v, ",") {
			if strings.EqualFold(strings.TrimSpace(token), name) {
				return true
			}
		}
	}
	return false
}

// requestHeaderKept reports whether the plain path copies a client's
// header as it is. The others are dropped or written by the proxy itself:
// hop-by-hop headers, the message framing, CodeHub's credentials (the
// cookies are filtered, not dropped), and forwarding headers, of which a
// trusted proxy's own pass except those the proxy sets.
func requestHeaderKept(name string, connection []string, trusted bool) bool {
	switch name {
	case "Host", "Content-Length", "User-Agent", "Authorization", "Cookie", "Forwarded",
		"X-Forwarded-For", "X-Forwarded-Host", "X-Forwarded-Proto", "X-Forwarded-Prefix":
		return false
	}
	if !trusted && strings.HasPrefix(name, "X-Forwarded-") {
		return false
	}
	return !hopByHop(name, connection)
}

// writePlainHead writes the head of the request the workspace gets for r:
// what rewrite and ReverseProxy make of it, without building it first.
func (p *Proxy) writePlainHead(bw *bufio.Writer, r *http.Request, t *target) error {
	bw.WriteString(r.Method)
	bw.WriteByte(' ')
	u := url.URL{Path: t.path, RawPath: t.rawPath}
	if path := u.EscapedPath(); path != "" {
		bw.WriteString(path)
	} else {
		bw.WriteByte('/')
	}
	if r.URL.ForceQuery || r.URL.RawQuery != "" {
		bw.WriteByte('?')
		bw.WriteString(r.URL.RawQuery)
	}
	bw.WriteString(" HTTP/1.1\r\n")
	writeField(bw, "Host", r.Host)
	// Only the first User-Agent counts, and an empty one is not sent.
	if ua := r.Header["User-Agent"]; len(ua) > 0 && ua[0] != "" {
		writeField(bw, "User-Agent", ua[0])
	}
	trusted := trustedPeer(r.RemoteAddr, p.opts.TrustedProxies)
	connection := r.Header["Connection"]
	for name, values := range r.Header {
		if !requestHeaderKept(name, connection, trusted) {
			continue
		}
		for _, v := range values {
			writeField(bw, name, v)
		}
	}
	if headerHasToken(r.Header, "Te", "trailers") {
		writeField(bw, "Te", "trailers")
	}
	p.writeForwarded(bw, r, t, trusted)
	p.writeCookie(bw, r.Header["Cookie"], t)
	_, err := bw.WriteString("\r\n")
	return err
}

// writeForwarded writes X-Forwarded-For, -Host, -Proto and -Prefix as
// setForwarded and rewrite set them.
func (p *Proxy) writeForwarded(bw *bufio.Writer, r *http.Request, t *target, trusted bool) {
	var prior []string
	if trusted {
		prior = r.Header["X-Forwarded-For"]
	}
	client, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		client = ""
	}
	if len(prior) > 0 || client != "" {
		bw.WriteString("X-Forwarded-For: ")
		for i, v := range prior {
			if i > 0 {
				bw.WriteString(", ")
			}
			bw.WriteString(v)
		}
		if client != "" {
			if len(prior) > 0 {
				bw.WriteString(", ")
			}
			bw.WriteString(client)
		}
		bw.WriteString("\r\n")
	}
	host, proto := r.Host, "http"
	if r.TLS != nil {
		proto = "https"
	}
	if trusted {
		if v := r.Header.Get("X-Forwarded-Host"); v != "" {
			host = v
		}
		if v := r.Header.Get("X-Forwarded-Proto"); v == "http" || v == "https" {
			proto = v
		}
	}
	writeField(bw, "X-Forwarded-Host", host)
	writeField(bw, "X-Forwarded-Proto", proto)
	if t.prefix != "" {
		writeField(bw, "X-Forwarded-Prefix", t.prefix)
	}
}

// writeCookie writes the client's cookies less CodeHub's credentials, and
// with upstream auth the workspace's token, as one Cookie line (RFC 6265
// §5.4), as rewrite does. A port gets no token, and not the cookie that
// would carry it either, as rewritePort makes it.
func (p *Proxy) writeCookie(bw *bufio.Writer, lines []string, t *target) {
	credential, token := p.isCredentialCookie, p.opts.UpstreamToken != nil
	if t.port != 0 {
		credential, token = p.isPortCredentialCookie, false
	}
	started := false
	next := func() {
		if started {
			bw.WriteString("; ")
			return
		}
		bw.WriteString("Cookie: ")
		started = true
	}
	for _, line := range lines {
		for part := range strings.SplitSeq(line, ";") {
			part = strings.TrimSpace(part)
			if part == "" {
				continue
			}
			name, _, _ := strings.Cut(part, "=")
			if credential(strings.TrimSpace(name)) {
				continue
			}
			next()
			bw.WriteString(part)
		}
	}
	if token {
		next()
		bw.WriteString(CodeServerCookie)
		bw.WriteByte('=')
		bw.WriteString(t.token)
	}
	if started {
		bw.WriteString("\r\n")
	}
}

func writeField(bw *bufio.Writer, name, value string) {
	bw.WriteString(name)
	bw.WriteString(": ")
	bw.WriteString(value)
	bw.WriteString("\r\n")
}

// sendPlain writes the head of the plain request r to t, the workspace's
// program or one of its ports, and reads the answer's head.
func (p *Proxy) sendPlain(r *http.Request, t *target) (*http.Response, error) {
	tr, host := p.transport, t.hostport
	if t.port != 0 {
		tr, host = p.portTransport, t.site()
	}
	return tr.send(r, host, true, func(bw *bufio.Writer) error { return p.writePlainHead(bw, r, t) })
}

// forgetUpstream drops the cached route and the pooled connections of t,
// which just failed to answer.
func (p *Proxy) forgetUpstream(t *target) {
	p.routes.forget(t.site())
	if t.port != 0 {
		p.portTransport.forget(t.site())
		return
	}
	p.transport.forget(t.hostport)
}

// forwardPlain carries a plain request to the workspace, or to its port,
// and its answer back.
func (p *Proxy) forwardPlain(w *responseRecorder, r *http.Request, t *target) {
	fail := func(err error) {
		if t.port != 0 {
			p.portFailed(w, r, *t, err)
			return
		}
		p.failed(w, r, *t, err)
	}
	res, err := p.sendPlain(r, t)
	if err != nil {
		fail(err)
		return
	}
	if res.StatusCode == http.StatusSwitchingProtocols {
		// Closing the body closes the connection the workspace switched.
		res.Body.Close()
		fail(fmt.Errorf("%w to %q", errUnaskedSwitch, res.Header.Get("Upgrade")))
		return
	}
	if p.takeOver(w, r, res, t) {
		return
	}
	if streams(res) {
		// Ending the workspace's side makes the copy fail, and the
		// server then drops the client's connection.
		if body, ok := res.Body.(*pooledBody); ok {
			defer p.release(p.hold(r, t, func(endReason) { body.abort() }))
		}
	}
	p.copyPlainResponse(w, res, t)
}

// copyPlainResponse writes the workspace's answer to the client: its
// headers less hop-by-hop ones and forbidden cookies, its body, flushed
// as it comes when the answer streams, and its trailers.
func (p *Proxy) copyPlainResponse(w *responseRecorder, res *http.Response, t *target) {
	dst := w.Header()
	connection := res.Header["Connection"]
	for name, values := range res.Header {
		values, ok := p.passedOn(name, values, connection)
		if !ok {
			continue
		}
		// The response is ours: its slices need no copy.
		if prior := dst[name]; prior != nil {
			values = append(prior, values...)
		}
		dst[name] = values
	}
	announced := len(res.Trailer)
	if announced > 0 {
		dst["Trailer"] = []string{trailerNames(res.Trailer)}
	}
	w.WriteHeader(res.StatusCode)
	if err := p.copyPlainBody(w, res, t); err != nil {
		res.Body.Close()
		// Half an answer must not look whole to the client: the server
		// drops the connection instead of ending the response.
		panic(http.ErrAbortHandler)
	}
	// Closing the body reads the trailers and returns the connection.
	res.Body.Close()
	if len(res.Trailer) == 0 {
		return
	}
	// A flush before the handler ends makes the response chunked, the
	// only framing that carries trailers.
	_ = http.NewResponseController(w.ResponseWriter).Flush()
	prefix := ""
	if len(res.Trailer) != announced {
		// Trailers the head did not announce can only be sent under
		// net/http's prefix.
		prefix = http.TrailerPrefix
	}
	for name, values := range res.Trailer {
		for _, v := range values {
			dst.Add(prefix+name, v)
		}
	}
}

// copyPlainBody copies the response body with a pooled buffer. An answer
// that streams is flushed at once and after every read, so that each part
// reaches the client when the workspace sends it.
func (p *Proxy) copyPlainBody(w *responseRecorder, res *http.Response, t *target) error {
	var flush func() error
	if streams(res) {
		stream := http.NewResponseController(w.ResponseWriter)
		_ = stream.Flush()
		flush = func() error {
			_ = stream.Flush()
			return nil
		}
	}
	buf := p.buffers.Get()
	defer p.buffers.Put(buf)
	return p.copyBody(w, flush, res, t, buf)
}

// copyBody copies the rest of res's body to dst through buf, calling
// flush, when set, after every write.
func (p *Proxy) copyBody(dst io.Writer, flush func() error, res *http.Response, t *target, buf []byte) error {
	for {
		n, err := res.Body.Read(buf)
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return werr
			}
			if flush != nil {
				if werr := flush(); werr != nil {
					return werr
				}
			}
		}
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			p.logger.Debug("read workspace response", "workspace_id", t.id, "error", err)
			return err
		}
	}
}

// streams reports an answer that reaches the client as the workspace
// sends it: one without a length (a stream, a long poll) or of
// Server-Sent Events.
func streams(res *http.Response) bool {
	return res.ContentLength == -1 || isEventStream(res.Header.Get("Content-Type"))
}

// passedOn is a response header's values as the client gets them, less
// forbidden cookies; false for a header the client does not get at all.
func (p *Proxy) passedOn(name string, values, connection []string) ([]string, bool) {
	if hopByHop(name, connection) {
		return nil, false
	}
	if name == "Set-Cookie" {
		values = p.keptCookies(values)
	}
	return values, len(values) > 0
}

// trailerNames is the value of a Trailer header announcing trailers.
func trailerNames(trailers http.Header) string {
	names := make([]string, 0, len(trailers))
	for name := range trailers {
		names = append(names, name)
	}
	return strings.Join(names, ", ")
}

// isEventStream reports a Content-Type of Server-Sent Events.
func isEventStream(contentType string) bool {
	mediaType, _, _ := strings.Cut(contentType, ";")
	return strings.EqualFold(strings.TrimSpace(mediaType), "text/event-stream")
}
