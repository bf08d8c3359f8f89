package proxy

import (
	"bytes"
	"encoding/binary"
	"net/http"
	"net/http/httptest"
	"testing"
)

// clientFrame is a client frame: masked, with the shortest length form.
func clientFrame(opcode byte, fin bool, rsv byte, payload []byte) []byte {
	b0 := opcode | rsv<<4
	if fin {
		b0 |= 0x80
	}
	f := []byte{b0}
	switch n := len(payload); {
	case n < 126:
		f = append(f, 0x80|byte(n))
	case n < 1<<16:
		f = append(f, 0x80|126, byte(n>>8), byte(n))
	default:
		f = append(f, 0x80|127)
		f = binary.BigEndian.AppendUint64(f, uint64(n))
	}
	key := [4]byte{0x37, 0xfa, 0x21, 0x3d}
	f = append(f, key[:]...)
	for i, c := range payload {
		f = append(f, c^key[i&3])
	}
	return f
}

func binaryFrame(payload []byte) []byte { return clientFrame(opBinary, true, 0, payload) }

// vsMessage is one message of VS Code's remote protocol.
func vsMessage(typ byte, body []byte) []byte {
	m := make([]byte, vsHeaderSize, vsHeaderSize+len(body))
	m[0] = typ
	binary.BigEndian.PutUint32(m[1:], 7)
	binary.BigEndian.PutUint32(m[5:], 3)
	binary.BigEndian.PutUint32(m[9:], uint32(len(body)))
	return append(m, body...)
}

// rpcCall is an extension host RPC request with JSON arguments.
func rpcCall(method, args string) []byte {
	b := []byte{1, 0, 0, 0, 42, 17, byte(len(method))}
	b = append(b, method...)
	b = binary.BigEndian.AppendUint32(b, uint32(len(args)))
	return append(b, args...)
}

// ipcCall is a management connection request [100, id, channel, command]
// followed by its argument.
func ipcCall(id int, channel, command string) []byte {
	b := []byte{4, 4, 6, 100, 6}
	for id >= 0x80 {
		b = append(b, byte(id)|0x80)
		id >>= 7
	}
	b = append(b, byte(id), 1, byte(len(channel)))
	b = append(b, channel...)
	b = append(b, 1, byte(len(command)))
	b = append(b, command...)
	return append(b, 4, 2, 6, 1, 1, 1, 'a')
}

// The client's control messages, with their fields in the order the
// workbench writes them.
var (
	vsAuth     = vsMessage(vsControl, []byte(`{"type":"auth","auth":"00000000000000000000","data":"2591d747-792b-4025-9439-db0d5cb88505"}`))
	vsExtHost  = vsMessage(vsControl, []byte(`{"type":"connectionType","commit":"409c64e0df4d53530e59c16acc2b5d5766f717b0","signedData":"81de3b0f","desiredConnectionType":2,"args":{"language":"en","break":false}}`))
	vsManage   = vsMessage(vsControl, []byte(`{"type":"connectionType","commit":"409c64e0df4d53530e59c16acc2b5d5766f717b0","signedData":"a2a02606","desiredConnectionType":1}`))
	vsKeep     = vsMessage(vsKeepAlive, nil)
	vsAckMsg   = vsMessage(vsAck, nil)
	vsInactive = vsMessage(vsRegular, rpcCall("$onDidChangeWindowActive", "[false]"))
	vsActive   = vsMessage(vsRegular, rpcCall("$onDidChangeWindowActive", "[true]"))
	vsFileEv   = vsMessage(vsRegular, rpcCall("$onFileEvent", `[{"session":1,"created":[],"changed":[{"$mid":1,"path":"/home/u/.local/share/code-server/User/workspaceStorage/x/vscode.lock"}],"deleted":[]}]`))
	vsTunnels  = vsMessage(vsRegular, rpcCall("$onDidTunnelsChange", "[]"))
	vsReply    = vsMessage(vsRegular, []byte{7, 0, 0, 0, 9})
	vsTyped    = vsMessage(vsRegular, ipcCall(300, "remoteterminal", "$input"))
	vsResize   = vsMessage(vsRegular, ipcCall(301, "remoteterminal", "$resize"))
	vsTelem    = vsMessage(vsRegular, ipcCall(302, "telemetry", "ping"))
)

// step is what the client sends next and whether it counts.
type step struct {
	name  string
	bytes []byte
	want  bool
}

func join(parts ...[]byte) []byte { return bytes.Join(parts, nil) }

// runSteps feeds the steps to a fresh scanner in reads of many sizes, so
// frames and VS Code messages split at every offset of their headers.
func runSteps(t *testing.T, resumed bool, steps []step) {
	t.Helper()
	total := 0
	for _, s := range steps {
		total += len(s.bytes)
	}
	chunks := []int{127, 1000, 4096, total}
	for n := 1; n <= 100; n++ {
		chunks = append(chunks, n)
	}
	for _, chunk := range chunks {
		s := newSocketActivity(resumed)
		for _, st := range steps {
			got := false
			for p := st.bytes; len(p) > 0; {
				n := min(chunk, len(p))
				if s.scan(p[:n]) {
					got = true
				}
				p = p[n:]
			}
			if got != st.want {
				t.Fatalf("chunks of %d: %s counted %v, want %v", chunk, st.name, got, st.want)
			}
		}
	}
}

func TestSocketActivityVSCode(t *testing.T) {
	t.Run("extension host", func(t *testing.T) {
		runSteps(t, false, []step{
			{"auth request", binaryFrame(vsAuth), false},
			{"a new extension host connection: the page was just opened", binaryFrame(vsExtHost), true},
			{"keepalive while the user is active", binaryFrame(vsKeep), true},
			{"the workbench says its user went idle", binaryFrame(vsInactive), false},
			{"keepalive", binaryFrame(vsKeep), false},
			{"ack", binaryFrame(vsAckMsg), false},
			{"file watcher event", binaryFrame(vsFileEv), false},
			{"tunnel update", binaryFrame(vsTunnels), false},
			{"reply to the extension host", binaryFrame(vsReply), false},
			{"ping", clientFrame(opPing, true, 0, []byte("p")), false},
			{"pong", clientFrame(opPong, true, 0, nil), false},
			{"several idle messages in one frame", binaryFrame(join(vsKeep, vsFileEv, vsAckMsg)), false},
			{"the user is back", binaryFrame(vsActive), true},
			{"keepalive", binaryFrame(vsKeep), true},
			{"idle again, in a message split over frames", join(
				clientFrame(opBinary, false, 0, vsInactive[:20]),
				clientFrame(opPing, true, 0, nil),
				clientFrame(opContinuation, true, 0, vsInactive[20:])), false},
			{"keepalive", binaryFrame(vsKeep), false},
			{"a message split over two frame messages", join(binaryFrame(vsActive[:9]), binaryFrame(vsActive[9:])), true},
			{"close", clientFrame(opClose, true, 0, []byte{3, 232}), false},
		})
	})
	t.Run("resumed extension host", func(t *testing.T) {
		runSteps(t, true, []step{
			{"auth request", binaryFrame(vsAuth), false},
			{"resumed connection: the user's state is not known", binaryFrame(vsExtHost), false},
			{"keepalive", binaryFrame(vsKeep), false},
			{"the user is active", binaryFrame(vsActive), true},
			{"keepalive", binaryFrame(vsKeep), true},
		})
	})
	t.Run("management", func(t *testing.T) {
		runSteps(t, false, []step{
			{"auth request and connection type", binaryFrame(join(vsAuth, vsManage)), false},
			{"keepalive", binaryFrame(vsKeep), false},
			{"telemetry", binaryFrame(vsTelem), false},
			{"terminal resize", binaryFrame(vsResize), false},
			{"a key typed into a terminal", binaryFrame(vsTyped), true},
			{"an RPC-shaped message here means nothing", binaryFrame(vsActive), false},
			{"keepalive", binaryFrame(vsKeep), false},
			{"a long message", clientFrame(opBinary, true, 0, vsMessage(vsRegular, bytes.Repeat([]byte{4}, 70000))), false},
			{"typing after it", binaryFrame(vsTyped), true},
		})
	})
}

func TestSocketActivityOtherPrograms(t *testing.T) {
	runSteps(t, false, []step{
		{"text message", clientFrame(opText, true, 0, []byte(`{"op":"save"}`)), true},
		{"ping", clientFrame(opPing, true, 0, nil), false},
		{"pong", clientFrame(opPong, true, 0, []byte("x")), false},
		{"empty binary message", clientFrame(opBinary, true, 0, nil), true},
		{"fragmented message", join(clientFrame(opText, false, 0, []byte("he")), clientFrame(opContinuation, true, 0, []byte("llo"))), true},
		{"ping between fragments", clientFrame(opText, false, 0, []byte("a")), true},
		{"ping", clientFrame(opPing, true, 0, nil), false},
		{"last fragment", clientFrame(opContinuation, true, 0, []byte("b")), true},
		{"compressed message", clientFrame(opBinary, true, rsv1, []byte{0xf2, 0x48, 0xcd}), true},
		{"close", clientFrame(opClose, true, 0, nil), false},
	})
	t.Run("VS Code's header on a message that is not its auth request", func(t *testing.T) {
		runSteps(t, false, []step{
			{"a control message of another program", binaryFrame(vsMessage(vsControl, []byte(`{"type":"hello"}`))), true},
			{"ping", clientFrame(opPing, true, 0, nil), false},
			{"keepalive-shaped data", binaryFrame(vsKeep), true},
		})
	})
	t.Run("compressed VS Code", func(t *testing.T) {
		runSteps(t, false, []step{
			{"compressed first message", clientFrame(opBinary, true, rsv1, []byte{1, 2, 3}), true},
			{"ping", clientFrame(opPing, true, 0, nil), false},
			{"uncompressed keepalive is data of an unknown program", binaryFrame(vsKeep), true},
		})
	})
}

func TestSocketActivityConfusion(t *testing.T) {
	t.Run("VS Code stream that stops making sense", func(t *testing.T) {
		runSteps(t, false, []step{
			{"handshake", binaryFrame(join(vsAuth, vsManage)), false},
			{"keepalive", binaryFrame(vsKeep), false},
			{"unknown message type", binaryFrame(vsMessage(4, nil)), true},
			{"data frames count from then on", binaryFrame(vsKeep), true},
			{"control frames still do not", clientFrame(opPing, true, 0, nil), false},
		})
	})
	broken := []struct {
		name  string
		frame []byte
	}{
		{"unmasked frame", []byte{0x82, 0x01, 0x00}},
		{"reserved opcode", clientFrame(0x3, true, 0, []byte("x"))},
		{"RSV2", clientFrame(opText, true, 0b010, []byte("x"))},
		{"fragmented ping", clientFrame(opPing, false, 0, nil)},
		{"ping over 125 bytes", clientFrame(opPing, true, 0, make([]byte, 126))},
		{"continuation without a message", clientFrame(opContinuation, true, 0, []byte("x"))},
		{"compressed continuation", join(clientFrame(opText, false, 0, []byte("a")), clientFrame(opContinuation, true, rsv1, []byte("b")))},
		{"new message inside a fragmented one", join(clientFrame(opText, false, 0, []byte("a")), clientFrame(opText, true, 0, []byte("b")))},
		{"64-bit length with the top bit set", []byte{0x82, 0xff, 0x80, 0, 0, 0, 0, 0, 0, 0, 1, 2, 3, 4}},
	}
	for _, tc := range broken {
		t.Run(tc.name, func(t *testing.T) {
			s := newSocketActivity(false)
			s.scan(tc.frame)
			if s.mode != modeOpaque {
				t.Fatalf("mode %d after a broken frame, want opaque", s.mode)
			}
			// Frames can no longer be found: every read counts.
			if !s.scan(clientFrame(opPing, true, 0, nil)) || !s.scan([]byte{0}) {
				t.Fatal("a read after broken framing did not count")
			}
		})
	}
}

func TestClassifyFrame(t *testing.T) {
	masked := func(h frameHeader) frameHeader { h.masked = true; return h }
	cases := []struct {
		name      string
		h         frameHeader
		inMessage bool
		want      frameKind
	}{
		{"text", masked(frameHeader{fin: true, opcode: opText}), false, frameData},
		{"binary", masked(frameHeader{fin: true, opcode: opBinary, length: 1 << 40}), false, frameData},
		{"compressed binary", masked(frameHeader{fin: true, rsv: rsv1, opcode: opBinary}), false, frameData},
		{"first fragment", masked(frameHeader{opcode: opText}), false, frameData},
		{"continuation", masked(frameHeader{opcode: opContinuation}), true, frameContinuation},
		{"ping", masked(frameHeader{fin: true, opcode: opPing, length: 125}), false, frameControl},
		{"pong inside a message", masked(frameHeader{fin: true, opcode: opPong}), true, frameControl},
		{"close", masked(frameHeader{fin: true, opcode: opClose, length: 2}), false, frameControl},
		{"unmasked", frameHeader{fin: true, opcode: opText}, false, frameInvalid},
		{"RSV3", masked(frameHeader{fin: true, rsv: 0b001, opcode: opText}), false, frameInvalid},
		{"opcode 0xB", masked(frameHeader{fin: true, opcode: 0xB}), false, frameInvalid},
		{"long ping", masked(frameHeader{fin: true, opcode: opPing, length: 126}), false, frameInvalid},
		{"compressed ping", masked(frameHeader{fin: true, rsv: rsv1, opcode: opPing}), false, frameInvalid},
		{"text inside a message", masked(frameHeader{opcode: opText}), true, frameInvalid},
		{"orphan continuation", masked(frameHeader{fin: true, opcode: opContinuation}), false, frameInvalid},
		{"top length bit", masked(frameHeader{fin: true, opcode: opBinary, length: 1 << 63}), false, frameInvalid},
	}
	for _, tc := range cases {
		if got := classifyFrame(tc.h, tc.inMessage); got != tc.want {
			t.Errorf("%s: %d, want %d", tc.name, got, tc.want)
		}
	}
}

func TestParseFrameHeader(t *testing.T) {
	for _, n := range []int{0, 1, 125, 126, 65535, 65536, 1 << 20} {
		f := clientFrame(opBinary, true, 0, make([]byte, n))
		size := frameHeaderSize(f[1])
		h := parseFrameHeader(f[:size])
		if h.length != uint64(n) || !h.masked || !h.fin || h.opcode != opBinary || h.key != [4]byte{0x37, 0xfa, 0x21, 0x3d} || size+n != len(f) {
			t.Errorf("length %d: header %+v of size %d", n, h, size)
		}
	}
}

func TestVSCodeSignals(t *testing.T) {
	for _, tc := range []struct {
		name         string
		head         []byte
		state, known bool
	}{
		{"active", rpcCall("$onDidChangeWindowActive", "[true]"), true, true},
		{"inactive", rpcCall("$onDidChangeWindowActive", "[false]"), false, true},
		{"focus is not activity", rpcCall("$onDidChangeWindowFocus", "[true]"), false, false},
		{"unexpected argument", rpcCall("$onDidChangeWindowActive", "[1]"), false, false},
		{"reply type", append([]byte{9}, rpcCall("$onDidChangeWindowActive", "[true]")[1:]...), false, false},
		{"cut short", rpcCall("$onDidChangeWindowActive", "[true]")[:30], false, false},
		{"empty", nil, false, false},
	} {
		if state, known := windowActive(tc.head); state != tc.state || known != tc.known {
			t.Errorf("windowActive %s: %v %v", tc.name, state, known)
		}
	}
	for _, tc := range []struct {
		name string
		head []byte
		want bool
	}{
		{"input", ipcCall(5, "remoteterminal", "$input"), true},
		{"input with a long request id", ipcCall(1<<20, "remoteterminal", "$input"), true},
		{"resize", ipcCall(5, "remoteterminal", "$resize"), false},
		{"other channel", ipcCall(5, "remotefilesystem", "$input"), false},
		{"event listen", append([]byte{4, 4, 6, 102}, ipcCall(5, "remoteterminal", "$input")[4:]...), false},
		{"id never ends", []byte{4, 4, 6, 100, 6, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 1, 14}, false},
		{"cut short", ipcCall(5, "remoteterminal", "$input")[:20], false},
		{"empty", nil, false},
	} {
		if got := isTerminalInput(tc.head); got != tc.want {
			t.Errorf("isTerminalInput %s: %v", tc.name, got)
		}
	}
}

func TestKMPTable(t *testing.T) {
	got := kmpTable(`"ab"a"ab"`)
	want := []int{0, 0, 0, 1, 2, 1, 2, 3, 4}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("kmpTable = %v, want %v", got, want)
		}
	}
	// A key that starts inside a partial match of itself is still found.
	v := vscodeStream{}
	for _, c := range []byte(`x"desiredConnectionType"desiredConnectionType":2`) {
		v.matchConnType(c)
	}
	if v.connDigit != '2' {
		t.Fatalf("connection type digit %q", v.connDigit)
	}
}

func TestSocketActivityAllocations(t *testing.T) {
	stream := join(binaryFrame(join(vsKeep, vsFileEv)), binaryFrame(vsActive), clientFrame(opPing, true, 0, nil), binaryFrame(vsInactive))
	s := newSocketActivity(false)
	s.scan(binaryFrame(join(vsAuth, vsExtHost)))
	if n := testing.AllocsPerRun(100, func() { s.scan(stream) }); n != 0 {
		t.Fatalf("scan allocates %v times per call", n)
	}
}

func TestWatchSocket(t *testing.T) {
	for _, tc := range []struct {
		query            string
		keepsCompression bool
		resumed          bool
	}{
		{"?reconnectionToken=1b2c&reconnection=false&skipWebSocketFrames=false", false, false},
		{"?reconnectionToken=1b2c&reconnection=true&skipWebSocketFrames=false", false, true},
		{"?token=1b2c", true, false},
		{"", true, false},
	} {
		r := httptest.NewRequest(http.MethodGet, "/w/x/stable-1"+tc.query, nil)
		r.Header.Set("Sec-WebSocket-Extensions", "permessage-deflate; client_max_window_bits")
		w := &responseRecorder{}
		w.watchSocket(r)
		if kept := r.Header.Get("Sec-WebSocket-Extensions") != ""; kept != tc.keepsCompression {
			t.Errorf("%q: compression offer kept %v", tc.query, kept)
		}
		if w.socket == nil || w.socket.vscode.resumed != tc.resumed {
			t.Errorf("%q: socket %+v", tc.query, w.socket)
		}
	}
}

func FuzzSocketActivity(f *testing.F) {
	f.Add(join(binaryFrame(join(vsAuth, vsExtHost)), binaryFrame(vsActive)), 3)
	f.Add(clientFrame(opText, false, 0, []byte("x")), 1)
	f.Add([]byte{0x82, 0xfe, 0xff}, 2)
	f.Fuzz(func(t *testing.T, b []byte, chunk int) {
		if chunk <= 0 {
			chunk = 1
		}
		s := newSocketActivity(false)
		for len(b) > 0 {
			n := min(chunk, len(b))
			s.scan(b[:n])
			b = b[n:]
		}
	})
}
