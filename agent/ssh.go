package agent

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"

	"github.com/hashicorp/go-hclog"
	"golang.org/x/crypto/ssh"
	"golang.org/x/sys/cpu"
)

// The SSH server terminates the SSH transport the server tunnels from the
// CLI. Whoever reaches it came through the server's tunnel, which only the
// workspace's owner opens, so it asks the SSH client for no credential of
// its own ("none" authentication).
type sshServer struct {
	logger hclog.Logger
	agent  *Agent
	config *ssh.ServerConfig
}

func newSSHServer(logger hclog.Logger, a *Agent) (*sshServer, error) {
	signer, err := ssh.NewSignerFromKey(a.opts.HostKey)
	if err != nil {
		return nil, fmt.Errorf("agent: host key: %w", err)
	}
	cfg := &ssh.ServerConfig{NoClientAuth: true, ServerVersion: "SSH-2.0-codehub"}
	cfg.Ciphers = ciphers(cpu.X86.HasAES || cpu.ARM64.HasAES)
	cfg.AddHostKey(signer)
	return &sshServer{logger: logger, agent: a, config: cfg}, nil
}

// ciphers are the server's ciphers. A client picks the first of its own
// list that the server has, and OpenSSH lists chacha20-poly1305 first;
// where the CPU does AES, leaving it out makes both sides use AES-GCM,
// which then moves bulk data (scp, rsync) several times faster here.
func ciphers(aesHardware bool) []string {
	aes := []string{ssh.CipherAES128GCM, ssh.CipherAES256GCM, ssh.CipherAES128CTR, ssh.CipherAES192CTR, ssh.CipherAES256CTR}
	if aesHardware {
		return aes
	}
	return append([]string{ssh.CipherChaCha20Poly1305}, aes...)
}

// sshConn is one SSH connection and what it holds open.
type sshConn struct {
	server *sshServer
	conn   *ssh.ServerConn
	wg     sync.WaitGroup

	mu       sync.Mutex
	forwards map[string]net.Listener // tcpip-forward listeners by bind address
}

// serve runs one SSH connection until it ends and everything it started
// is stopped.
func (s *sshServer) serve(nc net.Conn) {
	sc, chans, reqs, err := ssh.NewServerConn(nc, s.config)
	if err != nil {
		s.logger.Debug("ssh handshake failed", "error", err)
		return
	}
	c := &sshConn{server: s, conn: sc, forwards: make(map[string]net.Listener)}
	c.wg.Add(1)
	go func() { defer c.wg.Done(); c.globalRequests(reqs) }()
	for newCh := range chans {
		switch newCh.ChannelType() {
		case "session":
			c.wg.Add(1)
			go func() { defer c.wg.Done(); c.session(newCh) }()
		case "direct-tcpip":
			c.wg.Add(1)
			go func() { defer c.wg.Done(); c.directTCPIP(newCh) }()
		default:
			_ = newCh.Reject(ssh.UnknownChannelType, "unsupported channel type "+newCh.ChannelType())
		}
	}
	// The connection is gone: stop the remote forwards it asked for.
	c.mu.Lock()
	for _, l := range c.forwards {
		l.Close()
	}
	c.mu.Unlock()
	sc.Close()
	c.wg.Wait()
}

// globalRequests answers tcpip-forward and its cancel; keepalives and
// anything else get a failure, as OpenSSH's server answers them.
func (c *sshConn) globalRequests(reqs <-chan *ssh.Request) {
	for req := range reqs {
		switch req.Type {
		case "tcpip-forward":
			c.server.agent.touch()
			port, err := c.forward(req.Payload)
			if err != nil {
				c.server.logger.Debug("remote forward refused", "error", err)
				_ = req.Reply(false, nil)
				continue
			}
			_ = req.Reply(true, ssh.Marshal(struct{ Port uint32 }{uint32(port)}))
		case "cancel-tcpip-forward":
			c.server.agent.touch()
			_ = req.Reply(c.cancelForward(req.Payload), nil)
		default:
			if req.WantReply {
				_ = req.Reply(false, nil)
			}
		}
	}
}

// forwardRequest is the payload of tcpip-forward and cancel-tcpip-forward.
type forwardRequest struct {
	Addr string
	Port uint32
}

// forward listens in the workspace for ssh -R and opens a forwarded-tcpip
// channel to the client for every connection.
func (c *sshConn) forward(payload []byte) (int, error) {
	var fr forwardRequest
	if err := ssh.Unmarshal(payload, &fr); err != nil {
		return 0, err
	}
	if fr.Port > 65535 {
		return 0, errors.New("port out of range")
	}
	addr := fr.Addr
	if addr == "localhost" {
		addr = "127.0.0.1"
	}
	l, err := net.Listen("tcp", net.JoinHostPort(addr, strconv.Itoa(int(fr.Port))))
	if err != nil {
		return 0, err
	}
	port := l.Addr().(*net.TCPAddr).Port
	key := net.JoinHostPort(fr.Addr, strconv.Itoa(port))
	c.mu.Lock()
	if old, ok := c.forwards[key]; ok {
		old.Close()
	}
	c.forwards[key] = l
	c.mu.Unlock()
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		c.acceptForwarded(l, fr.Addr, port)
	}()
	return port, nil
}

func (c *sshConn) cancelForward(payload []byte) bool {
	var fr forwardRequest
	if err := ssh.Unmarshal(payload, &fr); err != nil {
		return false
	}
	key := net.JoinHostPort(fr.Addr, strconv.Itoa(int(fr.Port)))
	c.mu.Lock()
	defer c.mu.Unlock()
	l, ok := c.forwards[key]
	if ok {
		l.Close()
		delete(c.forwards, key)
	}
	return ok
}

func (c *sshConn) acceptForwarded(l net.Listener, bindAddr string, port int) {
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		conn, err := l.Accept()
		if err != nil {
			return
		}
		origin := conn.RemoteAddr().(*net.TCPAddr)
		payload := ssh.Marshal(struct {
			Addr       string
			Port       uint32
			OriginAddr string
			OriginPort uint32
		}{bindAddr, uint32(port), origin.IP.String(), uint32(origin.Port)})
		wg.Add(1)
		go func() {
			defer wg.Done()
			ch, reqs, err := c.conn.OpenChannel("forwarded-tcpip", payload)
			if err != nil {
				conn.Close()
				return
			}
			go ssh.DiscardRequests(reqs)
			pipe(ch, conn, nil)
		}()
	}
}

// directTCPIP serves ssh -L: a connection the client opens to an address
// the workspace reaches. The client opening it is the person at work.
func (c *sshConn) directTCPIP(newCh ssh.NewChannel) {
	var target struct {
		Host       string
		Port       uint32
		OriginAddr string
		OriginPort uint32
	}
	if err := ssh.Unmarshal(newCh.ExtraData(), &target); err != nil {
		_ = newCh.Reject(ssh.ConnectionFailed, "malformed direct-tcpip request")
		return
	}
	c.server.agent.touch()
	conn, err := net.Dial("tcp", net.JoinHostPort(target.Host, strconv.Itoa(int(target.Port))))
	if err != nil {
		_ = newCh.Reject(ssh.ConnectionFailed, err.Error())
		return
	}
	ch, reqs, err := newCh.Accept()
	if err != nil {
		conn.Close()
		return
	}
	go ssh.DiscardRequests(reqs)
	pipe(ch, conn, c.server.agent.touch)
}
