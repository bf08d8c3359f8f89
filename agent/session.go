package agent

import (
	"errors"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"

	"github.com/creack/pty"
	"github.com/pkg/sftp"
	"golang.org/x/crypto/ssh"
)

// session is one SSH session channel: a shell, a command or the sftp
// subsystem, started once, with the requests that shape it before and
// while it runs.
type session struct {
	conn *sshConn
	ch   ssh.Channel

	mu        sync.Mutex
	env       []string
	term      string
	size      *pty.Winsize
	ptmx      *os.File
	cmd       *exec.Cmd
	started   bool
	exited    bool
	agentDir  string
	agentSock net.Listener
}

// ptyRequest is the payload of pty-req (RFC 4254 6.2).
type ptyRequest struct {
	Term                      string
	Cols, Rows, Width, Height uint32
	Modes                     string
}

// windowChange is the payload of window-change (RFC 4254 6.7).
type windowChange struct {
	Cols, Rows, Width, Height uint32
}

func (c *sshConn) session(newCh ssh.NewChannel) {
	ch, reqs, err := newCh.Accept()
	if err != nil {
		return
	}
	s := &session{conn: c, ch: ch}
	var wg sync.WaitGroup
	for req := range reqs {
		ok := s.handle(req, &wg)
		if req.WantReply {
			_ = req.Reply(ok, nil)
		}
	}
	// The client closed the channel or the connection is gone: what the
	// session runs gets a hang-up, as with a closed terminal.
	s.hangUp()
	wg.Wait()
	s.cleanUp()
}

func (s *session) handle(req *ssh.Request, wg *sync.WaitGroup) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch req.Type {
	case "env":
		var kv struct{ Name, Value string }
		if ssh.Unmarshal(req.Payload, &kv) != nil {
			return false
		}
		s.env = append(s.env, kv.Name+"="+kv.Value)
		return true
	case "pty-req":
		var p ptyRequest
		if s.started || ssh.Unmarshal(req.Payload, &p) != nil {
			return false
		}
		s.term = p.Term
		s.size = &pty.Winsize{Cols: uint16(p.Cols), Rows: uint16(p.Rows), X: uint16(p.Width), Y: uint16(p.Height)}
		return true
	case "window-change":
		var w windowChange
		if ssh.Unmarshal(req.Payload, &w) != nil {
			return false
		}
		size := &pty.Winsize{Cols: uint16(w.Cols), Rows: uint16(w.Rows), X: uint16(w.Width), Y: uint16(w.Height)}
		s.size = size
		if s.ptmx != nil {
			_ = pty.Setsize(s.ptmx, size)
		}
		return true
	case "auth-agent-req@openssh.com":
		if s.started || s.agentSock != nil {
			return false
		}
		return s.forwardAgent(wg) == nil
	case "signal":
		var sig struct{ Name string }
		if ssh.Unmarshal(req.Payload, &sig) != nil {
			return false
		}
		num, ok := signals[sig.Name]
		if !ok || s.cmd == nil || s.exited {
			return false
		}
		// The session leads its own process group.
		return syscall.Kill(-s.cmd.Process.Pid, num) == nil
	case "shell", "exec", "subsystem":
		if s.started {
			return false
		}
		var err error
		switch req.Type {
		case "shell":
			err = s.start(nil, wg)
		case "exec":
			var cmd struct{ Command string }
			if err = ssh.Unmarshal(req.Payload, &cmd); err == nil {
				err = s.start(&cmd.Command, wg)
			}
		case "subsystem":
			var sub struct{ Name string }
			if err = ssh.Unmarshal(req.Payload, &sub); err == nil {
				err = s.subsystem(sub.Name, wg)
			}
		}
		if err != nil {
			s.conn.server.logger.Debug("session refused", "request", req.Type, "error", err)
			return false
		}
		s.started = true
		return true
	default:
		// Keepalives (keepalive@openssh.com) and what is not supported.
		return false
	}
}

// signals are the signal names of RFC 4254 6.10.
var signals = map[string]syscall.Signal{
	"ABRT": syscall.SIGABRT, "ALRM": syscall.SIGALRM, "FPE": syscall.SIGFPE,
	"HUP": syscall.SIGHUP, "ILL": syscall.SIGILL, "INT": syscall.SIGINT,
	"KILL": syscall.SIGKILL, "PIPE": syscall.SIGPIPE, "QUIT": syscall.SIGQUIT,
	"SEGV": syscall.SIGSEGV, "TERM": syscall.SIGTERM, "USR1": syscall.SIGUSR1,
	"USR2": syscall.SIGUSR2,
}

func signalName(sig syscall.Signal) string {
	for name, num := range signals {
		if num == sig {
			return name
		}
	}
	return "KILL"
}

// start runs the login shell, or command through it, in the workspace's
// environment.
func (s *session) start(command *string, wg *sync.WaitGroup) error {
	a := s.conn.server.agent
	shell := a.opts.Shell
	var cmd *exec.Cmd
	if command == nil {
		cmd = exec.Command(shell)
		cmd.Args = []string{"-" + filepath.Base(shell)} // a login shell
	} else {
		cmd = exec.Command(shell, "-c", *command)
	}
	cmd.Dir = a.opts.Home
	cmd.Env = append(append([]string(nil), a.opts.Env...), s.env...)
	if s.agentSock != nil {
		cmd.Env = append(cmd.Env, "SSH_AUTH_SOCK="+s.agentSock.Addr().String())
	}
	if s.size != nil {
		if s.term != "" {
			cmd.Env = append(cmd.Env, "TERM="+s.term)
		}
		ptmx, err := pty.StartWithSize(cmd, s.size)
		if err != nil {
			return err
		}
		s.ptmx, s.cmd = ptmx, cmd
		// Input ends when the channel closes (finish, or the client).
		wg.Add(2)
		go func() { defer wg.Done(); _, _ = io.Copy(ptmx, &noticeReader{r: s.ch, notice: a.touch}) }()
		go func() {
			defer wg.Done()
			_, _ = io.Copy(s.ch, ptmx)
			s.finish(cmd.Wait())
		}()
		return nil
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return err
	}
	cmd.Stdout = s.ch
	cmd.Stderr = s.ch.Stderr()
	if err := cmd.Start(); err != nil {
		return err
	}
	s.cmd = cmd
	wg.Add(2)
	go func() {
		defer wg.Done()
		_, _ = io.Copy(stdin, &noticeReader{r: s.ch, notice: a.touch})
		stdin.Close()
	}()
	go func() { defer wg.Done(); s.finish(cmd.Wait()) }()
	return nil
}

// subsystem serves sftp in the agent itself, with the session user's
// rights; every request from the client is the person moving files.
func (s *session) subsystem(name string, wg *sync.WaitGroup) error {
	if name != "sftp" {
		return errors.New("unknown subsystem " + name)
	}
	a := s.conn.server.agent
	// The server closes what it serves on; the channel stays open for the
	// exit status finish sends.
	rw := struct {
		io.Reader
		io.Writer
		io.Closer
	}{&noticeReader{r: s.ch, notice: a.touch}, s.ch, io.NopCloser(nil)}
	srv, err := sftp.NewServer(rw, sftp.WithServerWorkingDirectory(a.opts.Home))
	if err != nil {
		return err
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		err := srv.Serve()
		srv.Close()
		if errors.Is(err, io.EOF) {
			err = nil
		}
		s.finish(err)
	}()
	return nil
}

// finish reports how the session's program ended and closes the channel.
func (s *session) finish(err error) {
	s.mu.Lock()
	s.exited = true
	s.mu.Unlock()
	_ = s.ch.CloseWrite()
	status := uint32(0)
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		ws, ok := exit.Sys().(syscall.WaitStatus)
		if ok && ws.Signaled() {
			_, _ = s.ch.SendRequest("exit-signal", false, ssh.Marshal(struct {
				Signal     string
				CoreDumped bool
				Message    string
				Lang       string
			}{signalName(ws.Signal()), ws.CoreDump(), "", ""}))
			_ = s.ch.Close()
			return
		}
		status = uint32(exit.ExitCode())
	case err != nil:
		status = 255
	}
	_, _ = s.ch.SendRequest("exit-status", false, ssh.Marshal(struct{ Status uint32 }{status}))
	_ = s.ch.Close()
}

// hangUp ends what still runs once the client is gone.
func (s *session) hangUp() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ptmx != nil {
		s.ptmx.Close() // the terminal's hang-up
	}
	if s.cmd != nil && !s.exited {
		_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGHUP)
	}
	if s.agentSock != nil {
		s.agentSock.Close()
	}
	s.ch.Close()
}

func (s *session) cleanUp() {
	if s.agentDir != "" {
		_ = os.RemoveAll(s.agentDir)
	}
}

// forwardAgent serves SSH_AUTH_SOCK for the session: a socket only the
// workspace user can open, each connection to which becomes an
// auth-agent@openssh.com channel to the client's agent.
func (s *session) forwardAgent(wg *sync.WaitGroup) error {
	dir, err := os.MkdirTemp("", "codehub-ssh-")
	if err != nil {
		return err
	}
	l, err := net.Listen("unix", filepath.Join(dir, "agent.sock"))
	if err != nil {
		os.RemoveAll(dir)
		return err
	}
	s.agentDir, s.agentSock = dir, l
	wg.Add(1)
	go func() {
		defer wg.Done()
		var conns sync.WaitGroup
		defer conns.Wait()
		for {
			conn, err := l.Accept()
			if err != nil {
				return
			}
			conns.Add(1)
			go func() {
				defer conns.Done()
				ch, reqs, err := s.conn.conn.OpenChannel("auth-agent@openssh.com", nil)
				if err != nil {
					conn.Close()
					return
				}
				go ssh.DiscardRequests(reqs)
				pipe(ch, conn, nil)
			}()
		}
	}()
	return nil
}
