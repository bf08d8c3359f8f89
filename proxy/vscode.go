package proxy

import (
	"encoding/binary"
	"encoding/json"
	"net/http"
)

// VS Code's remote protocol, as code-server's workbench speaks it over its
// two WebSockets (the management connection and the extension host
// connection): a stream of messages, each a 13-byte header (type u8, id
// u32, ack u32, body length u32, big-endian) and a body. The stream runs
// across WebSocket messages. What the proxy reads of it is described in
// docs/lifecycle.md ("Activity"), with the traffic it was measured on.

// VS Code's message types (ProtocolMessageType in its ipc.net.ts).
const (
	vsRegular       = 1
	vsControl       = 2
	vsAck           = 3
	vsDisconnect    = 5
	vsReplayRequest = 6
	vsPause         = 7
	vsResume        = 8
	vsKeepAlive     = 9
)

const vsHeaderSize = 13

// vsHeadSize is how much of a message body is kept: enough for the
// longest signal read below.
const vsHeadSize = 48

// VS Code's connection types, from the client's connectionType message.
const (
	vsConnManagement = 1
	vsConnExtHost    = 2
)

// vsAuthPrefix starts the first message of every VS Code client.
const vsAuthPrefix = `{"type":"auth"`

// vsConnTypeKey precedes the digit of the connection type in the client's
// second control message.
const vsConnTypeKey = `"desiredConnectionType":`

var vsConnTypeFail = kmpTable(vsConnTypeKey)

// vscodeStream reads the client's half of one VS Code connection.
type vscodeStream struct {
	// resumed: the socket resumes an earlier session (reconnection=true).
	resumed bool
	// detected: the first message was VS Code's auth request.
	detected bool
	// conn is the connection type the client asked for, 0 until known.
	conn int
	// userActive mirrors the workbench's own "user is active" state.
	userActive bool

	hdr    [vsHeaderSize]byte
	hdrLen int
	inBody bool
	typ    byte
	left   uint32
	head   [vsHeadSize]byte
	// headLen counts body bytes seen, capped at vsHeadSize.
	headLen int
	// keyMatched is how much of vsConnTypeKey the control body matched;
	// connDigit is set once the digit after it was read.
	keyMatched int
	connDigit  byte
}

// feed reads the next bytes of the stream, still masked with key from
// payload offset keyAt. ok is false once the bytes are not VS Code's
// protocol as this reader knows it.
func (v *vscodeStream) feed(p []byte, key [4]byte, keyAt int) (active, ok bool) {
	for i := 0; i < len(p); {
		if !v.inBody {
			v.hdr[v.hdrLen] = p[i] ^ key[(keyAt+i)&3]
			v.hdrLen++
			i++
			if v.hdrLen < vsHeaderSize {
				continue
			}
			if !v.startMessage() {
				return active, false
			}
			if v.left > 0 {
				continue
			}
		} else {
			n := v.readBody(p[i:], key, keyAt+i)
			i += n
			if v.left > 0 {
				continue
			}
		}
		a, ok := v.endMessage()
		if !ok {
			return active, false
		}
		active = active || a
	}
	return active, true
}

// startMessage reads a complete header.
func (v *vscodeStream) startMessage() bool {
	v.hdrLen = 0
	v.typ = v.hdr[0]
	v.left = binary.BigEndian.Uint32(v.hdr[9:])
	v.inBody, v.headLen, v.keyMatched, v.connDigit = true, 0, 0, 0
	switch v.typ {
	case vsRegular, vsControl, vsAck, vsDisconnect, vsReplayRequest, vsPause, vsResume, vsKeepAlive:
	default:
		return false
	}
	// Every client starts with its auth request.
	return v.detected || v.typ == vsControl
}

// readBody takes body bytes from p and returns how many; it unmasks only
// the bytes it looks at.
func (v *vscodeStream) readBody(p []byte, key [4]byte, keyAt int) int {
	n := len(p)
	if uint64(n) > uint64(v.left) {
		n = int(v.left)
	}
	v.left -= uint32(n)
	if v.typ != vsRegular && v.typ != vsControl {
		return n
	}
	for i := 0; i < n; i++ {
		if v.headLen >= vsHeadSize && v.typ == vsRegular {
			break
		}
		c := p[i] ^ key[(keyAt+i)&3]
		if v.headLen < vsHeadSize {
			v.head[v.headLen] = c
			v.headLen++
		}
		if v.typ == vsControl {
			v.matchConnType(c)
		}
	}
	return n
}

// matchConnType follows the control body through vsConnTypeKey and the
// digit after it.
func (v *vscodeStream) matchConnType(c byte) {
	if v.connDigit != 0 {
		return
	}
	if v.keyMatched == len(vsConnTypeKey) {
		v.connDigit = c
		return
	}
	for v.keyMatched > 0 && vsConnTypeKey[v.keyMatched] != c {
		v.keyMatched = vsConnTypeFail[v.keyMatched-1]
	}
	if vsConnTypeKey[v.keyMatched] == c {
		v.keyMatched++
	}
}

// endMessage judges the message just read.
func (v *vscodeStream) endMessage() (active, ok bool) {
	v.inBody = false
	head := v.head[:v.headLen]
	if !v.detected {
		if len(head) < len(vsAuthPrefix) || string(head[:len(vsAuthPrefix)]) != vsAuthPrefix {
			return false, false
		}
		v.detected = true
		return false, true
	}
	switch v.typ {
	case vsControl:
		if v.connDigit == '1' || v.connDigit == '2' {
			v.conn = int(v.connDigit - '0')
			// A new extension host connection comes with a page load,
			// where the workbench starts out active; a resumed one
			// does not say.
			if v.conn == vsConnExtHost && !v.resumed {
				v.userActive = true
			}
		}
	case vsRegular:
		switch v.conn {
		case vsConnExtHost:
			if state, ok := windowActive(head); ok {
				v.userActive = state
			}
		case vsConnManagement:
			if isTerminalInput(head) {
				return true, true
			}
		}
	}
	return v.userActive, true
}

// windowActive reads the extension host call by which the workbench tells
// its extensions that its user became active or inactive
// ($onDidChangeWindowActive, an RPC request with JSON arguments: type u8,
// request id u32, proxy id u8, method as u8 length and bytes, arguments
// as u32 length and JSON).
func windowActive(h []byte) (active, ok bool) {
	const method = "$onDidChangeWindowActive"
	const argsAt = 7 + len(method) + 4
	if len(h) < argsAt || (h[0] != 1 && h[0] != 2) || int(h[6]) != len(method) || string(h[7:7+len(method)]) != method {
		return false, false
	}
	args := h[argsAt:]
	switch n := binary.BigEndian.Uint32(h[argsAt-4:]); {
	case n == 6 && len(args) >= 6 && string(args[:6]) == "[true]":
		return true, true
	case n == 7 && len(args) >= 7 && string(args[:7]) == "[false]":
		return false, true
	}
	return false, false
}

// isTerminalInput reports whether h starts the IPC request that carries
// keys typed into a terminal: [100, id, "remoteterminal", "$input"] in
// VS Code's serialization (array 0x04, integer 0x06, string 0x01, each
// with a variable-length size or value).
func isTerminalInput(h []byte) bool {
	if len(h) < 5 || h[0] != 4 || h[1] != 4 || h[2] != 6 || h[3] != 100 || h[4] != 6 {
		return false
	}
	i := 5
	for i < len(h) && i < 10 && h[i]&0x80 != 0 {
		i++
	}
	if i >= len(h) || h[i]&0x80 != 0 {
		return false
	}
	rest, ok := ipcString(h[i+1:], "remoteterminal")
	if !ok {
		return false
	}
	_, ok = ipcString(rest, "$input")
	return ok
}

// ipcString reads a serialized short string equal to s from h.
func ipcString(h []byte, s string) ([]byte, bool) {
	if len(h) < 2+len(s) || h[0] != 1 || int(h[1]) != len(s) || string(h[2:2+len(s)]) != s {
		return nil, false
	}
	return h[2+len(s):], true
}

// kmpTable is the failure function of s: for each prefix, the length of
// its longest proper prefix that is also its suffix.
func kmpTable(s string) []int {
	fail := make([]int, len(s))
	k := 0
	for i := 1; i < len(s); i++ {
		for k > 0 && s[i] != s[k] {
			k = fail[k-1]
		}
		if s[i] == s[k] {
			k++
		}
		fail[i] = k
	}
	return fail
}

// vscodeSocket reports whether r opens a socket of VS Code's remote
// protocol, whose client names its session in the query, and whether it
// resumes an earlier one.
func vscodeSocket(r *http.Request) (ok, resumed bool) {
	q := r.URL.Query()
	if !q.Has("reconnectionToken") || !q.Has("reconnection") {
		return false, false
	}
	return true, q.Get("reconnection") == "true"
}

// vscodeRefusal is the control message by which a VS Code server refuses a
// connection: the workbench gives up reconnecting and offers to reload.
func vscodeRefusal(reason string) []byte {
	body, _ := json.Marshal(struct {
		Type   string `json:"type"`
		Reason string `json:"reason"`
	}{"error", reason})
	msg := make([]byte, vsHeaderSize+len(body))
	msg[0] = vsControl
	binary.BigEndian.PutUint32(msg[9:], uint32(len(body)))
	copy(msg[vsHeaderSize:], body)
	return msg
}
