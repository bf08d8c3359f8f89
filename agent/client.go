package agent

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Client is the server's side of one workspace agent.
type Client struct {
	// network and addr are where the agent listens: "tcp" and host:port,
	// or "unix" and its socket.
	network, addr string
	token         string
	http          *http.Client
}

// SocketPrefix marks an agent address that is a Unix socket on the
// server's machine ("unix:@name" or "unix:/path").
const SocketPrefix = "unix:"

// Dial returns a client of the agent at addr (host:port, or SocketPrefix
// and a socket) that presents token. It connects on each call.
func Dial(addr, token string) *Client {
	c := &Client{network: "tcp", addr: addr, token: token}
	if socket, ok := strings.CutPrefix(addr, SocketPrefix); ok {
		c.network, c.addr = "unix", socket
	}
	var d net.Dialer
	c.http = &http.Client{
		Timeout: 10 * time.Second,
		Transport: &http.Transport{DisableKeepAlives: true, Proxy: nil,
			DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
				return d.DialContext(ctx, c.network, c.addr)
			}},
	}
	return c
}

// url is the URL of path at the agent; a socket's host is a name only.
func (c *Client) url(path string) string {
	if c.network == "unix" {
		return "http://agent" + path
	}
	return "http://" + c.addr + path
}

// ErrRefused is an agent's refusal of a port (403): no process of its
// workspace listens there, or it is the workbench's own.
var ErrRefused = errors.New("agent: port refused")

// StatusError is any other answer than the one asked for.
type StatusError struct {
	Code int
	Body string
}

func (e *StatusError) Error() string {
	return fmt.Sprintf("agent: %d %s", e.Code, e.Body)
}

// DialSSH opens an SSH transport to the workspace's SSH server.
func (c *Client) DialSSH(ctx context.Context) (net.Conn, error) {
	return c.upgrade(ctx, "/v1/ssh")
}

// DialPort opens a TCP connection to a listener of the workspace on port.
// Over a Unix socket the agent hands over the connection it dialled, so
// its bytes do not pass through the agent.
func (c *Client) DialPort(ctx context.Context, port int) (net.Conn, error) {
	if c.network == "unix" {
		return c.receive(ctx, "/v1/tcp/"+strconv.Itoa(port))
	}
	return c.upgrade(ctx, "/v1/tcp/"+strconv.Itoa(port))
}

// Ports lists the TCP ports the workspace listens on, without the
// workbench's own.
func (c *Client) Ports(ctx context.Context) ([]Port, error) {
	var ports []Port
	return ports, c.getJSON(ctx, "/v1/ports", &ports)
}

// Activity asks when the person last did something over SSH.
func (c *Client) Activity(ctx context.Context) (Activity, error) {
	var act Activity
	return act, c.getJSON(ctx, "/v1/activity", &act)
}

func (c *Client) getJSON(ctx context.Context, path string, v any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.url(path), nil)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	resp, err := c.http.Do(req)
	if err != nil {
		return fmt.Errorf("agent: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return statusError(resp)
	}
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		return fmt.Errorf("agent: %s: %w", path, err)
	}
	return nil
}

func statusError(resp *http.Response) error {
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
	return &StatusError{Code: resp.StatusCode, Body: strings.TrimSpace(string(body))}
}

// upgrade sends GET path with an Upgrade and, on 101, hands over the
// connection.
func (c *Client) upgrade(ctx context.Context, path string) (net.Conn, error) {
	conn, stop, req, err := c.ask(ctx, path, UpgradeProtocol)
	if err != nil {
		return nil, err
	}
	defer stop()
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, req)
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("agent: %w", err)
	}
	if err := switched(resp); err != nil {
		conn.Close()
		return nil, err
	}
	if !stop() {
		conn.Close()
		return nil, ctx.Err()
	}
	return &bufferedConn{Conn: conn, r: br}, nil
}

// receive sends GET path asking for the connection's descriptor and, on
// 101, returns the TCP connection it names; the Unix socket then closes.
func (c *Client) receive(ctx context.Context, path string) (net.Conn, error) {
	conn, stop, req, err := c.ask(ctx, path, UpgradeDescriptor)
	if err != nil {
		return nil, err
	}
	defer stop()
	defer conn.Close()
	// The descriptor comes with the answer's first bytes, which a plain
	// read would take without it.
	buf, oob := make([]byte, 4<<10), make([]byte, unix.CmsgSpace(4))
	n, oobn, _, _, err := conn.(*net.UnixConn).ReadMsgUnix(buf, oob)
	if err != nil {
		return nil, fmt.Errorf("agent: %w", err)
	}
	fds := receivedFDs(oob[:oobn])
	defer func() {
		for _, fd := range fds {
			unix.Close(fd)
		}
	}()
	resp, err := http.ReadResponse(bufio.NewReader(io.MultiReader(bytes.NewReader(buf[:n]), conn)), req)
	if err != nil {
		return nil, fmt.Errorf("agent: %w", err)
	}
	if err := switched(resp); err != nil {
		return nil, err
	}
	if len(fds) != 1 {
		return nil, fmt.Errorf("agent: %d descriptors handed over, want 1", len(fds))
	}
	file := os.NewFile(uintptr(fds[0]), "port")
	fds = nil
	defer file.Close()
	up, err := net.FileConn(file)
	if err != nil {
		return nil, fmt.Errorf("agent: %w", err)
	}
	if _, ok := up.(*net.TCPConn); !ok {
		up.Close()
		return nil, fmt.Errorf("agent: handed a %T, not a TCP connection", up)
	}
	return up, nil
}

// receivedFDs are the descriptors of SCM_RIGHTS messages in oob.
func receivedFDs(oob []byte) []int {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return nil
	}
	var fds []int
	for _, m := range msgs {
		if got, err := unix.ParseUnixRights(&m); err == nil {
			fds = append(fds, got...)
		}
	}
	return fds
}

// ask connects and sends GET path with an Upgrade to protocol. stop ends
// the context's hold on the exchange; false means the context ended it.
func (c *Client) ask(ctx context.Context, path, protocol string) (net.Conn, func() bool, *http.Request, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, c.network, c.addr)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("agent: %w", err)
	}
	// The context bounds the exchange, not the stream after it.
	stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Unix(1, 0)) })
	req, err := http.NewRequest(http.MethodGet, c.url(path), nil)
	if err != nil {
		stop()
		conn.Close()
		return nil, nil, nil, err
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	req.Header.Set("Connection", "Upgrade")
	req.Header.Set("Upgrade", protocol)
	if err := req.Write(conn); err != nil {
		stop()
		conn.Close()
		return nil, nil, nil, fmt.Errorf("agent: %w", err)
	}
	return conn, stop, req, nil
}

// switched is nil for a 101 answer, else the error the answer means.
func switched(resp *http.Response) error {
	if resp.StatusCode == http.StatusSwitchingProtocols {
		return nil
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusForbidden {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
		return fmt.Errorf("%w: %s", ErrRefused, strings.TrimSpace(string(body)))
	}
	return statusError(resp)
}
