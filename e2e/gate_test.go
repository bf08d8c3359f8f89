package e2e

import (
	"errors"
	"io"
	"net"
	"sync"
	"testing"
)

// gate relays TCP connections to target while open; closed, it refuses
// every new connection and cuts the open ones: a service gone away and
// back, as every client of it sees it. With several targets it is a front
// (a load balancer): each connection goes to the first that accepts it.
type gate struct {
	l       net.Listener
	targets func() []string

	mu     sync.Mutex
	closed bool
	conns  map[net.Conn]struct{}
	wg     sync.WaitGroup
}

func newGate(t *testing.T, target string) *gate {
	t.Helper()
	return newFront(t, func() []string { return []string{target} })
}

// newFront is an open gate to whichever of targets (asked again for each
// connection) accepts first.
func newFront(t *testing.T, targets func() []string) *gate {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := &gate{l: l, targets: targets, conns: map[net.Conn]struct{}{}}
	g.wg.Add(1)
	go g.serve()
	t.Cleanup(func() {
		l.Close()
		g.set(false)
		g.wg.Wait()
	})
	return g
}

func (g *gate) addr() string { return g.l.Addr().String() }

// set opens or closes the gate; closing cuts the open connections.
func (g *gate) set(open bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.closed = !open
	if open {
		return
	}
	for c := range g.conns {
		c.Close()
	}
}

func (g *gate) serve() {
	defer g.wg.Done()
	for {
		c, err := g.l.Accept()
		if errors.Is(err, net.ErrClosed) {
			return
		}
		if err != nil {
			continue
		}
		g.wg.Add(1)
		go func() {
			defer g.wg.Done()
			g.relay(c)
		}()
	}
}

func (g *gate) relay(c net.Conn) {
	defer c.Close()
	var up net.Conn
	for _, target := range g.targets() {
		var err error
		if up, err = net.Dial("tcp", target); err == nil {
			break
		}
	}
	if up == nil {
		return
	}
	defer up.Close()
	if !g.track(c, up) {
		return
	}
	defer g.untrack(c, up)
	done := make(chan struct{}, 2)
	pipe := func(dst, src net.Conn) {
		_, _ = io.Copy(dst, src)
		done <- struct{}{}
	}
	go pipe(up, c)
	go pipe(c, up)
	<-done
	c.Close()
	up.Close()
	<-done
}

// track registers the pair unless the gate is closed.
func (g *gate) track(conns ...net.Conn) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return false
	}
	for _, c := range conns {
		g.conns[c] = struct{}{}
	}
	return true
}

func (g *gate) untrack(conns ...net.Conn) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, c := range conns {
		delete(g.conns, c)
	}
}
