package proxy

// What a browser sends on a proxied WebSocket tells whether a person is at
// work (docs/lifecycle.md, "Activity"). socketActivity reads the bytes the
// client sends as they pass to the workspace: every WebSocket frame header,
// and for VS Code's remote protocol the header and first bytes of each of
// its messages. It keeps no payload, allocates nothing once made, and never
// fails: input it cannot follow makes it count more, never block.

// socketMode is how a connection's data is judged.
type socketMode uint8

const (
	// modeDetect: the first bytes of data tell VS Code's remote protocol
	// from any other.
	modeDetect socketMode = iota
	// modeVSCode: only VS Code's own signals of a person at work count.
	modeVSCode
	// modeGeneric: any other program; every data frame counts.
	modeGeneric
	// modeOpaque: the framing made no sense, so frames cannot be found;
	// every read counts.
	modeOpaque
)

// WebSocket opcodes (RFC 6455 §5.2).
const (
	opContinuation = 0x0
	opText         = 0x1
	opBinary       = 0x2
	opClose        = 0x8
	opPing         = 0x9
	opPong         = 0xA
)

// rsv1 marks a compressed message (permessage-deflate, RFC 7692).
const rsv1 = 0b100

// maxFrameHeader is the longest client frame header: 2 bytes, a 64-bit
// length and the mask key.
const maxFrameHeader = 14

// frameHeader is one parsed frame header.
type frameHeader struct {
	fin    bool
	rsv    byte // RSV1..RSV3, RSV1 highest
	opcode byte
	masked bool
	length uint64
	key    [4]byte
}

// frameKind is what a client frame is to the activity rule.
type frameKind uint8

const (
	// frameInvalid breaks RFC 6455 for a client frame.
	frameInvalid frameKind = iota
	// frameData starts a text or binary message.
	frameData
	// frameContinuation continues a fragmented message.
	frameContinuation
	// frameControl is a ping, pong or close: never activity.
	frameControl
)

// frameHeaderSize is the size of the header whose second byte is b1.
func frameHeaderSize(b1 byte) int {
	n := 2
	switch b1 & 0x7f {
	case 126:
		n += 2
	case 127:
		n += 8
	}
	if b1&0x80 != 0 {
		n += 4
	}
	return n
}

// parseFrameHeader reads a complete header (frameHeaderSize(b[1]) bytes).
func parseFrameHeader(b []byte) frameHeader {
	h := frameHeader{
		fin:    b[0]&0x80 != 0,
		rsv:    b[0] >> 4 & 0b111,
		opcode: b[0] & 0x0f,
		masked: b[1]&0x80 != 0,
		length: uint64(b[1] & 0x7f),
	}
	rest := b[2:]
	switch h.length {
	case 126:
		h.length = uint64(rest[0])<<8 | uint64(rest[1])
		rest = rest[2:]
	case 127:
		h.length = 0
		for _, c := range rest[:8] {
			h.length = h.length<<8 | uint64(c)
		}
		rest = rest[8:]
	}
	if h.masked {
		copy(h.key[:], rest)
	}
	return h
}

// classifyFrame judges a client frame; inMessage says a fragmented message
// is open.
func classifyFrame(h frameHeader, inMessage bool) frameKind {
	// Clients must mask; RSV2 and RSV3 belong to no extension we allow;
	// the top bit of a 64-bit length must be zero.
	if !h.masked || h.rsv&^rsv1 != 0 || h.length>>63 != 0 {
		return frameInvalid
	}
	switch h.opcode {
	case opText, opBinary:
		if inMessage {
			return frameInvalid
		}
		return frameData
	case opContinuation:
		if !inMessage || h.rsv != 0 {
			return frameInvalid
		}
		return frameContinuation
	case opClose, opPing, opPong:
		if !h.fin || h.rsv != 0 || h.length > 125 {
			return frameInvalid
		}
		return frameControl
	}
	return frameInvalid
}

// frameCursor follows the frames a workspace sends its client, so that
// the proxy can tell when a frame of its own may go between them.
type frameCursor struct {
	hdr    [maxFrameHeader]byte
	hdrLen int
	// left is how much of the current frame's payload is still to come.
	left uint64
}

// advance follows the bytes p written to the client.
func (f *frameCursor) advance(p []byte) {
	for len(p) > 0 {
		if f.left > 0 {
			n := min(uint64(len(p)), f.left)
			f.left -= n
			p = p[n:]
			continue
		}
		need := 2
		if f.hdrLen >= 2 {
			need = frameHeaderSize(f.hdr[1])
		}
		n := copy(f.hdr[f.hdrLen:need], p)
		f.hdrLen += n
		p = p[n:]
		if f.hdrLen >= 2 && f.hdrLen == frameHeaderSize(f.hdr[1]) {
			f.left = parseFrameHeader(f.hdr[:f.hdrLen]).length
			f.hdrLen = 0
		}
	}
}

// atBoundary reports that the last frame written is whole.
func (f *frameCursor) atBoundary() bool { return f.hdrLen == 0 && f.left == 0 }

// closePolicyViolation is the close code (RFC 6455 §7.4.1) of a socket
// the proxy ends because its session ended.
const closePolicyViolation = 1008

// closeFrame is a server's close frame with code and reason, the reason
// cut to fit a control frame.
func closeFrame(code uint16, reason string) []byte {
	if len(reason) > 123 {
		reason = reason[:123]
	}
	f := make([]byte, 0, 4+len(reason))
	f = append(f, 0x80|opClose, byte(2+len(reason)), byte(code>>8), byte(code))
	return append(f, reason...)
}

// socketActivity follows the client side of one WebSocket.
type socketActivity struct {
	mode socketMode
	// hdr collects a frame header split across reads.
	hdr    [maxFrameHeader]byte
	hdrLen int
	// left is how much of the current frame's payload is still to come;
	// zero while a header is read.
	left uint64
	key  [4]byte
	// keyAt is the payload offset of the next byte, modulo 4, for unmasking.
	keyAt int
	// data: the current frame's payload is message data.
	data bool
	// inMessage: a fragmented data message is open.
	inMessage bool
	// compressed: the open message is compressed and cannot be read.
	compressed bool
	vscode     vscodeStream
}

// newSocketActivity follows a socket; resumed says the client resumes an
// earlier VS Code session, whose user's state is not known here.
func newSocketActivity(resumed bool) *socketActivity {
	return &socketActivity{vscode: vscodeStream{resumed: resumed}}
}

// scan reads the next bytes the client sent and reports whether they show
// a person at work.
func (s *socketActivity) scan(p []byte) bool {
	active := false
	for len(p) > 0 && s.mode != modeOpaque {
		if s.left == 0 {
			n, done := s.readHeader(p)
			p = p[n:]
			if done && s.startFrame() {
				active = true
			}
			continue
		}
		n := len(p)
		if uint64(n) > s.left {
			n = int(s.left)
		}
		if s.data && s.payload(p[:n]) {
			active = true
		}
		s.left -= uint64(n)
		s.keyAt = (s.keyAt + n) & 3
		p = p[n:]
	}
	return active || s.mode == modeOpaque
}

// readHeader collects header bytes from p; done once the header is whole.
func (s *socketActivity) readHeader(p []byte) (n int, done bool) {
	for n < len(p) {
		need := 2
		if s.hdrLen >= 2 {
			need = frameHeaderSize(s.hdr[1])
		}
		if s.hdrLen == need {
			return n, true
		}
		c := copy(s.hdr[s.hdrLen:need], p[n:])
		s.hdrLen += c
		n += c
	}
	return n, s.hdrLen >= 2 && s.hdrLen == frameHeaderSize(s.hdr[1])
}

// startFrame judges the header just read and reports whether the frame
// itself counts.
func (s *socketActivity) startFrame() bool {
	h := parseFrameHeader(s.hdr[:s.hdrLen])
	s.hdrLen = 0
	kind := classifyFrame(h, s.inMessage)
	if kind == frameInvalid {
		s.mode = modeOpaque
		return true
	}
	s.left, s.key, s.keyAt = h.length, h.key, 0
	s.data = kind != frameControl
	if !s.data {
		return false
	}
	s.inMessage = !h.fin
	if kind == frameData {
		s.compressed = h.rsv&rsv1 != 0
	}
	if s.compressed && s.mode != modeGeneric {
		// Compressed data cannot be read without inflating it.
		s.mode = modeGeneric
	}
	return s.mode == modeGeneric
}

// payload passes message data to VS Code's protocol reader while it is
// (or may be) VS Code's, and reports whether it counts.
func (s *socketActivity) payload(p []byte) bool {
	if s.mode != modeDetect && s.mode != modeVSCode {
		return false
	}
	active, ok := s.vscode.feed(p, s.key, s.keyAt)
	if !ok {
		// Not VS Code's protocol, or a version this reader does not know.
		s.mode = modeGeneric
		return true
	}
	if s.mode == modeDetect && s.vscode.detected {
		s.mode = modeVSCode
	}
	return active
}
