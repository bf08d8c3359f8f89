package api

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/codehub-io/codehub/workspace"
)

func TestTunnelStep(t *testing.T) {
	reason := "start_failed"
	cases := []struct {
		name  string
		ws    workspace.Workspace
		want  tunnelAction
		words string
	}{
		{"running", workspace.Workspace{Phase: workspace.PhaseRunning, Operation: workspace.OpNone, DesiredState: workspace.DesiredRunning}, tunnelDial, "waiting for the workspace's agent"},
		{"running but asked to stop", workspace.Workspace{Phase: workspace.PhaseRunning, Operation: workspace.OpNone, DesiredState: workspace.DesiredStandby}, tunnelWake, "starting"},
		{"stopped", workspace.Workspace{Phase: workspace.PhaseStandby, Operation: workspace.OpNone, DesiredState: workspace.DesiredStandby}, tunnelWake, "starting"},
		{"archived", workspace.Workspace{Phase: workspace.PhaseArchived, Operation: workspace.OpNone, DesiredState: workspace.DesiredArchived}, tunnelWake, "restoring from archive"},
		{"archived, asked to run", workspace.Workspace{Phase: workspace.PhaseArchived, Operation: workspace.OpNone, DesiredState: workspace.DesiredRunning}, tunnelWait, "restoring from archive"},
		{"restoring", workspace.Workspace{Phase: workspace.PhaseArchived, Operation: workspace.OpRestoring, DesiredState: workspace.DesiredRunning}, tunnelWait, "restoring from archive"},
		{"starting", workspace.Workspace{Phase: workspace.PhaseStandby, Operation: workspace.OpStarting, DesiredState: workspace.DesiredRunning}, tunnelWait, "starting"},
		{"stopping", workspace.Workspace{Phase: workspace.PhaseRunning, Operation: workspace.OpStopping, DesiredState: workspace.DesiredStandby}, tunnelWait, "finishing a stop first"},
		{"error", workspace.Workspace{Name: "w", Phase: workspace.PhaseError, ErrorReason: &reason}, tunnelFail, "codehub: workspace w is in error: start_failed"},
		{"deleted", workspace.Workspace{Name: "w", Phase: workspace.PhaseRunning, DesiredState: workspace.DesiredDeleted}, tunnelFail, "codehub: workspace w is deleted"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, words := tunnelStep(c.ws)
			if got != c.want || words != c.words {
				t.Fatalf("tunnelStep = %d %q, want %d %q", got, words, c.want, c.words)
			}
		})
	}
}

// deadAgent is an agent connection that has gone while nothing says so
// yet: writes fail, reads wait for Close.
type deadAgent struct {
	net.Conn // unused methods
	closed   chan struct{}
	once     sync.Once
}

func (d *deadAgent) Write([]byte) (int, error) { return 0, syscall.EPIPE }
func (d *deadAgent) Read([]byte) (int, error)  { <-d.closed; return 0, io.EOF }
func (d *deadAgent) Close() error              { d.once.Do(func() { close(d.closed) }); return nil }

// TestTunnelBridgeWhoEnded holds the bridge to telling which side ended:
// a client's write failing into a gone agent is the agent's end (so the
// person is told why), a client hanging up is the client's.
func TestTunnelBridgeWhoEnded(t *testing.T) {
	cases := []struct {
		name  string
		agent func() net.Conn
		act   func(c *websocket.Conn) error
		want  bool
	}{
		{"client writes into a gone agent", func() net.Conn { return &deadAgent{closed: make(chan struct{})} },
			func(c *websocket.Conn) error {
				return c.Write(context.Background(), websocket.MessageBinary, []byte("keepalive"))
			}, true},
		{"client hangs up", func() net.Conn { a, _ := net.Pipe(); return a },
			func(c *websocket.Conn) error { return c.Close(websocket.StatusNormalClosure, "") }, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ended := make(chan bool, 1)
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				wc, err := websocket.Accept(w, r, nil)
				if err != nil {
					return
				}
				tun := &tunnel{c: wc}
				tun.bridge(r.Context(), c.agent(), func(agentEnded bool) { ended <- agentEnded })
				tun.close(websocket.StatusNormalClosure, "")
			}))
			defer srv.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			client, _, err := websocket.Dial(ctx, srv.URL, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer client.CloseNow()
			if err := c.act(client); err != nil {
				t.Fatal(err)
			}
			select {
			case got := <-ended:
				if got != c.want {
					t.Fatalf("agentEnded = %v, want %v", got, c.want)
				}
			case <-ctx.Done():
				t.Fatal("the bridge did not end")
			}
		})
	}
}
