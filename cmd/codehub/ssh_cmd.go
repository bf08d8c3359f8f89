package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/coder/websocket"
	"golang.org/x/crypto/ssh"
	"golang.org/x/sys/unix"

	"github.com/codehub-io/codehub/api"
)

const sshUsage = `usage: codehub ssh [-stdio] WORKSPACE [COMMAND [ARG…]]

Open a shell in WORKSPACE (a name or an id), or run COMMAND there, over the
server you logged in to with "codehub login". A stopped workspace is
started and an archived one restored first. The exit status is COMMAND's.

With -stdio, carry an SSH connection on standard input and output instead,
for OpenSSH's ProxyCommand ("codehub config-ssh" writes it for you).
`

// sshExitError is the exit status of the remote command.
type sshExitError struct{ status int }

func (e *sshExitError) Error() string { return fmt.Sprintf("exit status %d", e.status) }

func runSSH(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("ssh", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, sshUsage) }
	stdio := fs.Bool("stdio", false, "carry an SSH connection on stdin and stdout (for ProxyCommand)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK
		}
		return exitUsage
	}
	if fs.NArg() < 1 || (*stdio && fs.NArg() > 1) {
		fmt.Fprint(stderr, sshUsage)
		return exitUsage
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	creds, err := loadCredentials()
	if err != nil {
		fmt.Fprintf(stderr, "codehub ssh: %v\n", err)
		return exitStatus(err)
	}
	c := newClient(creds)
	u := &userCLI{ctx: ctx, stdin: stdin, stdout: stdout, stderr: stderr}
	ws, err := u.resolve(c, fs.Arg(0))
	if err != nil {
		fmt.Fprintf(stderr, "codehub ssh: %v\n", err)
		return exitStatus(err)
	}
	conn, err := openTunnel(ctx, c, ws.ID, stderr)
	if err != nil {
		fmt.Fprintf(stderr, "codehub ssh: %v\n", err)
		return exitStatus(err)
	}
	defer conn.Close()
	if *stdio {
		err = carry(conn, stdin, stdout)
	} else {
		var key ssh.PublicKey
		if key, err = hostKey(ctx, c, ws.ID); err == nil {
			err = shell(conn, key, strings.Join(fs.Args()[1:], " "), stdin, stdout, stderr)
		}
	}
	var exit *sshExitError
	switch {
	case errors.As(err, &exit):
		return exit.status
	case err != nil:
		fmt.Fprintf(stderr, "codehub ssh: %v\n", err)
		return exitFailed
	}
	return exitOK
}

// hostKey is the workspace's SSH host key as the server states it.
func hostKey(ctx context.Context, c *client, id string) (ssh.PublicKey, error) {
	var info struct {
		HostKey string `json:"host_key"`
	}
	if err := c.get(ctx, "/api/v1/workspaces/"+id+"/ssh", &info); err != nil {
		return nil, err
	}
	key, _, _, _, err := ssh.ParseAuthorizedKey([]byte(info.HostKey))
	if err != nil {
		return nil, fmt.Errorf("the server's host key of the workspace: %w", err)
	}
	return key, nil
}

// openTunnel opens the server's SSH tunnel to workspace id, showing the
// progress of its start on progress, and returns the SSH stream.
func openTunnel(ctx context.Context, c *client, id string, progress io.Writer) (net.Conn, error) {
	u := "ws" + strings.TrimPrefix(c.base, "http") + "/api/v1/workspaces/" + id + "/ssh/tunnel"
	wc, res, err := websocket.Dial(ctx, u, &websocket.DialOptions{
		HTTPHeader: http.Header{"Authorization": {"Bearer " + c.token}},
	})
	if err != nil {
		if res != nil && res.StatusCode != http.StatusSwitchingProtocols {
			body, _ := io.ReadAll(io.LimitReader(res.Body, 64<<10))
			return nil, answerError(res.StatusCode, body)
		}
		return nil, err
	}
	wc.SetReadLimit(-1)
	for {
		typ, b, err := wc.Read(ctx)
		if err != nil {
			return nil, tunnelEnd(err)
		}
		if typ != websocket.MessageText {
			wc.Close(websocket.StatusProtocolError, "stream before ready")
			return nil, errors.New("the server sent the stream before the workspace was ready")
		}
		var m api.TunnelMessage
		if err := json.Unmarshal(b, &m); err != nil {
			return nil, fmt.Errorf("the server's tunnel message is not what CodeHub sends: %w", err)
		}
		if m.Ready {
			return &tunnelConn{Conn: websocket.NetConn(context.WithoutCancel(ctx), wc, websocket.MessageBinary)}, nil
		}
		if m.Progress != "" {
			fmt.Fprintf(progress, "codehub: %s\n", m.Progress)
		}
	}
}

// tunnelConn reports the reason of a close by the server as an error
// that says it.
type tunnelConn struct{ net.Conn }

func (t *tunnelConn) Read(p []byte) (int, error) {
	n, err := t.Conn.Read(p)
	if err != nil && !errors.Is(err, io.EOF) {
		err = tunnelEnd(err)
	}
	return n, err
}

// tunnelEnd turns a WebSocket close into the server's words.
func tunnelEnd(err error) error {
	var ce websocket.CloseError
	if errors.As(err, &ce) && ce.Reason != "" {
		return &tunnelClosed{ce.Reason}
	}
	return err
}

type tunnelClosed struct{ reason string }

func (t *tunnelClosed) Error() string { return strings.TrimPrefix(t.reason, "codehub: ") }

// streamBuffer is the most one read of the SSH stream takes: a WebSocket
// message each way, so larger reads mean fewer frames for bulk copies.
const streamBuffer = 256 << 10

// carry copies stdin to the stream and the stream to stdout until the
// stream ends; a close by the server is reported.
func carry(conn net.Conn, stdin io.Reader, stdout io.Writer) error {
	go func() {
		_, _ = io.CopyBuffer(conn, stdin, make([]byte, streamBuffer))
		// OpenSSH closed its side: the connection is over.
		conn.Close()
	}()
	_, err := io.CopyBuffer(stdout, conn, make([]byte, streamBuffer))
	var tc *tunnelClosed
	if errors.As(err, &tc) {
		return err
	}
	return nil
}

// shell runs an interactive shell (with a terminal when stdin is one) or
// command over SSH on conn, checking the host key.
func shell(conn net.Conn, key ssh.PublicKey, command string, stdin io.Reader, stdout, stderr io.Writer) error {
	cc, chans, reqs, err := ssh.NewClientConn(conn, "workspace", &ssh.ClientConfig{
		User: "codehub", HostKeyCallback: ssh.FixedHostKey(key),
	})
	if err != nil {
		return tunnelEnd(err)
	}
	client := ssh.NewClient(cc, chans, reqs)
	defer client.Close()
	s, err := client.NewSession()
	if err != nil {
		return err
	}
	defer s.Close()
	s.Stdin, s.Stdout, s.Stderr = stdin, stdout, stderr

	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGWINCH)
	defer signal.Stop(sigs)

	in, isTerm := stdin.(*os.File)
	isTerm = isTerm && command == "" && isTerminal(in)
	if isTerm {
		cols, rows := termSize(in)
		term := os.Getenv("TERM")
		if term == "" {
			term = "xterm-256color"
		}
		if err := s.RequestPty(term, rows, cols, ssh.TerminalModes{}); err != nil {
			return err
		}
		restore, err := rawMode(in)
		if err != nil {
			return err
		}
		defer restore()
	}
	if command == "" {
		err = s.Shell()
	} else {
		err = s.Start(command)
	}
	if err != nil {
		return err
	}
	done := make(chan error, 1)
	go func() { done <- s.Wait() }()
	for {
		select {
		case err := <-done:
			var exit *ssh.ExitError
			switch {
			case errors.As(err, &exit):
				status := exit.ExitStatus()
				if exit.Signal() != "" {
					fmt.Fprintf(stderr, "codehub ssh: killed by signal %s\n", exit.Signal())
					status = 128 + signalNumber(exit.Signal())
				}
				return &sshExitError{status}
			case errors.Is(err, io.EOF), err == nil:
				return err
			}
			var missing *ssh.ExitMissingError
			if errors.As(err, &missing) {
				// The connection ended before an exit status: say why if
				// the server did.
				_, rerr := conn.Read(make([]byte, 1))
				var tc *tunnelClosed
				if errors.As(rerr, &tc) {
					return tc
				}
			}
			return err
		case sig := <-sigs:
			if sig == syscall.SIGWINCH {
				if isTerm {
					cols, rows := termSize(in)
					_ = s.WindowChange(rows, cols)
				}
				continue
			}
			if isTerm {
				continue // a terminal sends its keys, ^C included, as input
			}
			_ = s.Signal(sshSignal(sig))
		}
	}
}

func sshSignal(sig os.Signal) ssh.Signal {
	switch sig {
	case syscall.SIGINT:
		return ssh.SIGINT
	case syscall.SIGHUP:
		return ssh.SIGHUP
	case syscall.SIGQUIT:
		return ssh.SIGQUIT
	}
	return ssh.SIGTERM
}

func signalNumber(name string) int {
	switch name {
	case "HUP":
		return 1
	case "INT":
		return 2
	case "QUIT":
		return 3
	case "KILL":
		return 9
	case "TERM":
		return 15
	}
	return 0
}

func isTerminal(f *os.File) bool {
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}

func termSize(f *os.File) (cols, rows int) {
	ws, err := unix.IoctlGetWinsize(int(f.Fd()), unix.TIOCGWINSZ)
	if err != nil || ws.Col == 0 {
		return 80, 24
	}
	return int(ws.Col), int(ws.Row)
}

// rawMode passes every key to the remote terminal, as cfmakeraw(3) sets
// a terminal up; restore puts it back.
func rawMode(f *os.File) (restore func(), err error) {
	fd := int(f.Fd())
	old, err := unix.IoctlGetTermios(fd, unix.TCGETS)
	if err != nil {
		return nil, err
	}
	raw := *old
	raw.Iflag &^= unix.IGNBRK | unix.BRKINT | unix.PARMRK | unix.ISTRIP | unix.INLCR | unix.IGNCR | unix.ICRNL | unix.IXON
	raw.Oflag &^= unix.OPOST
	raw.Lflag &^= unix.ECHO | unix.ECHONL | unix.ICANON | unix.ISIG | unix.IEXTEN
	raw.Cflag &^= unix.CSIZE | unix.PARENB
	raw.Cflag |= unix.CS8
	raw.Cc[unix.VMIN] = 1
	raw.Cc[unix.VTIME] = 0
	if err := unix.IoctlSetTermios(fd, unix.TCSETS, &raw); err != nil {
		return nil, err
	}
	return func() { _ = unix.IoctlSetTermios(fd, unix.TCSETS, old) }, nil
}
