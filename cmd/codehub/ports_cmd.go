package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"

	"github.com/codehub-io/codehub/api"
)

// portInfo is what the CLI reads of the API's Port object.
type portInfo struct {
	Port      int    `json:"port"`
	URL       string `json:"url"`
	Share     string `json:"share"`
	Listening bool   `json:"listening"`
	Process   string `json:"process"`
}

func wsPortsCommand() wsCommand {
	return wsCommand{summary: "List a workspace's ports; share one", nargs: 1, help: userCommand{
		usage: "codehub ws ports [options] WORKSPACE",
		about: `List the TCP ports WORKSPACE listens on (the workbench's own aside) and
the ports it shares, each with its address and share level: owner (you
only, the default), authenticated (anyone logged in to this server) or
public (anyone, without logging in). The server may allow less than
public. With -share, set one port's level instead. ` + workspaceArg,
		extra: "Examples:\n\n  $ codehub ws ports backend\n  $ codehub ws ports -share 8000=authenticated backend\n\n",
	}, define: func(fs *flag.FlagSet) wsRun {
		share := fs.String("share", "", "Set a port's share level: `PORT=LEVEL`, LEVEL one of owner, authenticated, public.")
		asJSON := jsonFlag(fs)
		return func(u *userCLI, c *client, args []string) error { return u.wsPorts(c, args[0], *share, *asJSON) }
	}}
}

// parseShare reads -share's PORT=LEVEL.
func parseShare(s string) (int, string, error) {
	p, level, ok := strings.Cut(s, "=")
	port, err := strconv.Atoi(p)
	if !ok || err != nil || port < 1 || port > 65535 || level == "" {
		return 0, "", &usageError{fmt.Sprintf("-share %q: want PORT=LEVEL, e.g. 8000=authenticated", s)}
	}
	return port, level, nil
}

func (u *userCLI) wsPorts(c *client, ref, share string, asJSON bool) error {
	var port int
	var level string
	if share != "" {
		var err error
		if port, level, err = parseShare(share); err != nil {
			return err
		}
	}
	ws, err := u.resolve(c, ref)
	if err != nil {
		return err
	}
	if share != "" {
		res, err := c.do(u.ctx, http.MethodPut, fmt.Sprintf("/api/v1/workspaces/%s/ports/%d", ws.ID, port), map[string]string{"share": level})
		if err != nil {
			return err
		}
		if asJSON {
			return u.printJSON(res.body)
		}
		var p portInfo
		if err := decodeAnswer(res.body, &p); err != nil {
			return err
		}
		fmt.Fprintf(u.stdout, "Port %d of %s is shared with: %s\n%s\n", p.Port, ws.Name, p.Share, p.URL)
		return nil
	}
	res, err := c.do(u.ctx, http.MethodGet, "/api/v1/workspaces/"+ws.ID+"/ports", nil)
	if err != nil {
		return err
	}
	if asJSON {
		return u.printJSON(res.body)
	}
	var list struct {
		MaxShare string     `json:"max_share"`
		Ports    []portInfo `json:"ports"`
	}
	if err := decodeAnswer(res.body, &list); err != nil {
		return err
	}
	if len(list.Ports) == 0 {
		fmt.Fprintf(u.stdout, "%s listens on no port and shares none (phase %s).\n", ws.Name, ws.Phase)
		return nil
	}
	tw := tabwriter.NewWriter(u.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "PORT\tPROCESS\tSHARE\tURL")
	for _, p := range list.Ports {
		process := p.Process
		if !p.Listening {
			process = "(not listening)"
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\n", p.Port, process, p.Share, p.URL)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(u.stdout, "This server allows sharing up to: %s\n", list.MaxShare)
	return nil
}

var portForwardCommand = userCommand{
	usage: "codehub port-forward [options] WORKSPACE [LOCAL:]REMOTE",
	about: `
Forward a port of this computer to port REMOTE of WORKSPACE, through the
CodeHub server you logged in to, for any TCP service (a database, a
debugger) as well as web servers. Each connection to LOCAL (REMOTE when
LOCAL is left out; 0 picks a free port) becomes a connection to REMOTE
inside the workspace, which must be running. It runs until you press
Ctrl-C. ` + workspaceArg,
	extra: "Examples:\n\n  $ codehub port-forward backend 5432\n  $ codehub port-forward backend 15432:5432\n\n" + exitStatusHelp,
}

func runPortForward(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	u, stop := newUserCLI(stdin, stdout, stderr)
	defer stop()
	return u.portForward(args)
}

// parseForward reads [LOCAL:]REMOTE.
func parseForward(s string) (local, remote int, err error) {
	l, r, pair := strings.Cut(s, ":")
	if !pair {
		l, r = s, s
	}
	local, lerr := strconv.Atoi(l)
	remote, rerr := strconv.Atoi(r)
	if lerr != nil || rerr != nil || local < 0 || local > 65535 || remote < 1 || remote > 65535 {
		return 0, 0, &usageError{fmt.Sprintf("%q: want [LOCAL:]REMOTE, ports of 1 to 65535 (LOCAL 0 for any)", s)}
	}
	return local, remote, nil
}

func (u *userCLI) portForward(args []string) int {
	fs := portForwardCommand.flagSet("port-forward", u.stdout, u.stderr)
	address := fs.String("address", "127.0.0.1", "The local `address` to listen on.")
	pos, help, err := parseArgs(fs, args)
	switch {
	case help:
		return exitOK
	case err != nil:
		return exitUsage
	case len(pos) != 2:
		fmt.Fprintf(u.stderr, "codehub port-forward: takes 2 arguments, got %d\nUsage: %s\n", len(pos), portForwardCommand.usage)
		return exitUsage
	}
	if err := u.forward(*address, pos[0], pos[1]); err != nil {
		fmt.Fprintf(u.stderr, "codehub port-forward: %v\n", err)
		return exitStatus(err)
	}
	return exitOK
}

func (u *userCLI) forward(address, ref, ports string) error {
	local, remote, err := parseForward(ports)
	if err != nil {
		return err
	}
	creds, err := loadCredentials()
	if err != nil {
		return err
	}
	c := newClient(creds)
	ws, err := u.resolve(c, ref)
	if err != nil {
		return err
	}
	// A first connection says now, rather than at the first use, whether
	// the workspace runs and something listens on the port.
	first, err := c.openForward(u.ctx, ws.ID, remote)
	if err != nil {
		return err
	}
	first.Close()
	ln, err := net.Listen("tcp", net.JoinHostPort(address, strconv.Itoa(local)))
	if err != nil {
		return err
	}
	stop := context.AfterFunc(u.ctx, func() { ln.Close() })
	defer stop()
	fmt.Fprintf(u.stdout, "Forwarding %s to port %d of %s. Press Ctrl-C to stop.\n", ln.Addr(), remote, ws.Name)
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		conn, err := ln.Accept()
		if err != nil {
			if u.ctx.Err() != nil {
				return nil
			}
			return err
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer conn.Close()
			up, err := c.openForward(u.ctx, ws.ID, remote)
			if err != nil {
				fmt.Fprintf(u.stderr, "codehub port-forward: connection from %s: %v\n", conn.RemoteAddr(), err)
				return
			}
			defer up.Close()
			stop := context.AfterFunc(u.ctx, func() { conn.Close(); up.Close() })
			defer stop()
			pipe(conn, up)
		}()
	}
}

// openForward opens one connection to port of workspace id through the
// server.
func (c *client) openForward(ctx context.Context, id string, port int) (*forwardConn, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, fmt.Sprintf("%s/api/v1/workspaces/%s/ports/%d/forward", c.base, id, port), nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Connection", "Upgrade")
	req.Header.Set("Upgrade", api.PortForwardProtocol)
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	fc := &forwardConn{}
	// No client timeout: after the switch the body is the connection.
	res, err := (&http.Client{Transport: fc.transport(req)}).Do(req)
	if err != nil {
		return nil, err
	}
	if res.StatusCode != http.StatusSwitchingProtocols {
		defer res.Body.Close()
		raw, _ := io.ReadAll(io.LimitReader(res.Body, 64<<10))
		return nil, answerError(res.StatusCode, raw)
	}
	rwc, ok := res.Body.(io.ReadWriteCloser)
	if !ok {
		res.Body.Close()
		return nil, errors.New("the server switched protocols but gave no connection")
	}
	fc.ReadWriteCloser = rwc
	return fc, nil
}

// forwardConn is a connection to a workspace's port through the server.
// Its sending half can end alone when the connection to the server is
// this client's own, plain or TLS: a client that half-closes (sends its
// request, then reads the answer) still gets the answer. Through an HTTP
// proxy it can only close.
type forwardConn struct {
	io.ReadWriteCloser
	half interface{ CloseWrite() error }
}

// transport dials the server for req, keeping the connection so that its
// sending half can end.
func (fc *forwardConn) transport(req *http.Request) *http.Transport {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.DisableKeepAlives = true
	if proxy, err := tr.Proxy(req); err != nil || proxy != nil {
		return tr
	}
	var d net.Dialer
	tr.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		conn, err := d.DialContext(ctx, network, addr)
		if tc, ok := conn.(*net.TCPConn); ok {
			fc.half = tc
		}
		return conn, err
	}
	tr.DialTLSContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		conn, err := d.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		host, _, _ := net.SplitHostPort(addr)
		tc := tls.Client(conn, &tls.Config{ServerName: host})
		if err := tc.HandshakeContext(ctx); err != nil {
			conn.Close()
			return nil, err
		}
		fc.half = tc
		return tc, nil
	}
	return tr
}

// CloseWrite ends the sending half, or, where it cannot, the connection.
func (fc *forwardConn) CloseWrite() error {
	if fc.half == nil {
		return fc.Close()
	}
	return fc.half.CloseWrite()
}

// pipe copies both ways until both directions ended, passing each end of
// stream on to the other side.
func pipe(a net.Conn, b *forwardConn) {
	done := make(chan struct{})
	go func() {
		_, _ = io.Copy(b, a)
		_ = b.CloseWrite()
		close(done)
	}()
	_, _ = io.Copy(a, b)
	if cw, ok := a.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
	}
	<-done
}
