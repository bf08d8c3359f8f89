package agent

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Client is the server's side of one workspace agent.
type Client struct {
	addr  string
	token string
	http  *http.Client
}

// Dial returns a client of the agent at addr (host:port) that presents
// token. It connects on each call.
func Dial(addr, token string) *Client {
	return &Client{addr: addr, token: token, http: &http.Client{
		Timeout:   10 * time.Second,
		Transport: &http.Transport{DisableKeepAlives: true, Proxy: nil},
	}}
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
func (c *Client) DialPort(ctx context.Context, port int) (net.Conn, error) {
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
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+c.addr+path, nil)
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
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", c.addr)
	if err != nil {
		return nil, fmt.Errorf("agent: %w", err)
	}
	// The context bounds the exchange below, not the stream after it.
	stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	req, err := http.NewRequest(http.MethodGet, "http://"+c.addr+path, nil)
	if err != nil {
		conn.Close()
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	req.Header.Set("Connection", "Upgrade")
	req.Header.Set("Upgrade", UpgradeProtocol)
	if err := req.Write(conn); err != nil {
		conn.Close()
		return nil, fmt.Errorf("agent: %w", err)
	}
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, req)
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("agent: %w", err)
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		defer conn.Close()
		defer resp.Body.Close()
		if resp.StatusCode == http.StatusForbidden {
			body, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
			return nil, fmt.Errorf("%w: %s", ErrRefused, strings.TrimSpace(string(body)))
		}
		return nil, statusError(resp)
	}
	if !stop() {
		conn.Close()
		return nil, ctx.Err()
	}
	return &bufferedConn{Conn: conn, r: br}, nil
}
