package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/codehub-io/codehub/internal/nomadtest"
	"github.com/codehub-io/codehub/workspace"
)

// tcpService serves every connection with handle until the test ends.
func tcpService(t *testing.T, handle func(net.Conn)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer conn.Close()
				handle(conn)
			}()
		}
	}()
	return ln.Addr().String()
}

// echoServer is a TCP service that sends back every line it reads; it
// stands in for a database or any non-HTTP program of a workspace.
func echoServer(t *testing.T) string {
	return tcpService(t, func(c net.Conn) { _, _ = io.Copy(c, c) })
}

// replyAtEOFServer is a TCP service that answers only once its client
// has sent everything and half-closed, as a request/response protocol
// over a bare connection does.
func replyAtEOFServer(t *testing.T) string {
	return tcpService(t, func(c net.Conn) {
		n, _ := io.Copy(io.Discard, c)
		fmt.Fprintf(c, "got %d bytes\n", n)
	})
}

// TestWsPorts: "ws ports" sets a port's level and lists it with its
// address; bad input is a usage error and changes nothing.
func TestWsPorts(t *testing.T) {
	c := newCLITest(t)
	alice := c.env.CreateUser("alice", false)
	c.loginAs(alice, "read-write")
	w := c.env.CreateWorkspace(alice, "backend")

	r := c.must("", "ws", "ports", "backend")
	if !strings.Contains(r.stdout, "backend listens on no port and shares none") {
		t.Fatalf("ports of a new workspace: %q", r.stdout)
	}
	c.expect(exitUsage, "", "ws", "ports", "-share", "8000", "backend")
	c.expect(exitUsage, "", "ws", "ports", "-share", "0=public", "backend")
	// Path mode (the test server's) lets nothing be shared wider than
	// its owner.
	if r := c.expect(exitRefused, "", "ws", "ports", "-share", "8000=public", "backend"); !strings.Contains(r.stderr, "SHARE_ABOVE_CAP") {
		t.Fatalf("share above the cap: %q", r.stderr)
	}
	r = c.must("", "ws", "ports", "-share", "8000=owner", w.ID)
	if !strings.Contains(r.stdout, "Port 8000 of backend is shared with: owner") || !strings.Contains(r.stdout, "/w/8000--"+w.ID+"/") {
		t.Fatalf("share said %q", r.stdout)
	}
	if r := c.must("", "ws", "ports", "backend"); !strings.Contains(r.stdout, "listens on no port") {
		t.Fatalf("a port set back to owner is listed: %q", r.stdout)
	}
}

// TestPortForward: "port-forward" carries a TCP connection to a port of
// the running workspace, through the server, both ways.
func TestPortForward(t *testing.T) {
	c := newCLITest(t)
	alice := c.env.CreateUser("alice", false)
	c.loginAs(alice, "read-write")
	w := c.env.CreateWorkspace(alice, "db")

	// A stopped workspace is refused at once.
	c.env.SetPhase(w.ID, workspace.PhaseStandby, workspace.OpNone)
	if r := c.expect(exitRefused, "", "port-forward", "db", "0:5432"); !strings.Contains(r.stderr, "not running") {
		t.Fatalf("forward to a stopped workspace: %q", r.stderr)
	}
	c.env.SetPhase(w.ID, workspace.PhaseRunning, workspace.OpNone)
	if r := c.expect(exitNotFound, "", "port-forward", "db", "0:5432"); !strings.Contains(r.stderr, "nothing in the workspace listens on port 5432") && !strings.Contains(r.stderr, "NOT_FOUND") {
		t.Fatalf("forward to a port nothing listens on: %q", r.stderr)
	}
	c.expect(exitUsage, "", "port-forward", "db", "70000")
	c.env.Ports.Set(w.ID, 5432, echoServer(t))

	ctx, cancel := context.WithCancel(t.Context())
	var stdout, stderr nomadtest.LockedBuffer
	done := make(chan int)
	go func() { done <- c.cli(ctx, "", &stdout, &stderr).portForward([]string{"db", "0:5432"}) }()
	var addr string
	for addr == "" {
		select {
		case code := <-done:
			t.Fatalf("port-forward ended (%d): %s %s", code, stdout.String(), stderr.String())
		case <-time.After(10 * time.Millisecond):
		}
		if out := stdout.String(); strings.HasPrefix(out, "Forwarding ") {
			addr = strings.Fields(out)[1]
		}
	}
	for i := range 2 {
		conn, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		msg := strings.Repeat("x", i*100000) + "ping\n"
		go func() { _, _ = io.WriteString(conn, msg) }()
		got, err := bufio.NewReader(conn).ReadString('\n')
		conn.Close()
		if err != nil || got != msg {
			t.Fatalf("round trip %d: %d bytes back, %v; want %d", i, len(got), err, len(msg))
		}
	}
	// A client that half-closes gets the answer sent after its end.
	c.env.Ports.Set(w.ID, 5432, replyAtEOFServer(t))
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.WriteString(conn, "select 1;\n"); err != nil {
		t.Fatal(err)
	}
	if err := conn.(*net.TCPConn).CloseWrite(); err != nil {
		t.Fatal(err)
	}
	_ = conn.SetReadDeadline(time.Now().Add(30 * time.Second))
	got, err := io.ReadAll(conn)
	conn.Close()
	if err != nil || string(got) != "got 10 bytes\n" {
		t.Fatalf("answer after a half-close: %q, %v", got, err)
	}
	cancel()
	if code := <-done; code != exitOK {
		t.Fatalf("port-forward exited %d: %s", code, stderr.String())
	}
}
