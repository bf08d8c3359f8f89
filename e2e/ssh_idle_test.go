package e2e

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/codehub-io/codehub/activity"
)

// TestSSHIdle holds SSH to the activity rules: an open connection whose
// client only sends keepalives lets its workspace stop on time, and then
// ends saying why; typing into a session keeps its workspace running.
func TestSSHIdle(t *testing.T) {
	cfg := localConfig(t)
	cfg.maxRunning = 2
	cfg.standbyTTL, cfg.ttlInterval = idleStandbyTTL.String(), idleTTLInterval.String()
	srv := startServer(t, cfg)
	admin := login(t, srv)
	idle := createRunning(t, admin, "idle")
	typing := createRunning(t, admin, "typing")
	me := newSSHUser(t, srv, admin)
	me.configSSH(t)

	// Keepalives every second, both ways of OpenSSH's: the client's
	// ServerAlive and TCP's.
	quiet := startSession(t, me.tool("ssh", "-o", "ServerAliveInterval=1", "-o", "TCPKeepAlive=yes", "codehub.idle", "sleep 3600"))
	typist := me.tool("ssh", "-o", "ServerAliveInterval=1", "codehub.typing", "cat >/dev/null")
	keys, err := typist.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	typed := startSession(t, typist)
	stopTyping := make(chan struct{})
	typingDone := make(chan struct{})
	go func() {
		defer close(typingDone)
		for i := 0; ; i++ {
			select {
			case <-stopTyping:
				return
			case <-time.After(2 * time.Second):
			}
			if _, err := io.WriteString(keys, fmt.Sprintf("line %d\n", i)); err != nil {
				return
			}
		}
	}()
	defer func() { close(stopTyping); <-typingDone }()

	// Idle means standby_ttl past the last mark (the connection's opening),
	// judged at the next runner pass from marks flushed at most one flush
	// interval late.
	limit := idleStandbyTTL + activity.FlushInterval + idleTTLInterval + stopAllowance
	if err := quiet.waitEnd(t, limit, "the idle workspace's connection"); err == nil {
		t.Fatal("the idle connection ended with status 0")
	}
	if !strings.Contains(quiet.stderr.String(), "stopped after a time without use") {
		t.Fatalf("the idle connection ended without saying why: %q", quiet.stderr.String())
	}
	var ws apiWorkspace
	if code := admin.do("GET", "/api/v1/workspaces/"+idle.ID, nil, &ws); code != http.StatusOK || ws.Desired != "STANDBY" {
		t.Fatalf("the idle workspace: %d %+v", code, ws)
	}
	// By now the typing one has been used for longer than standby_ttl
	// plus a flush interval after its own opening: it still runs.
	if code := admin.do("GET", "/api/v1/workspaces/"+typing.ID, nil, &ws); code != http.StatusOK || ws.Desired != "RUNNING" || ws.Phase != "RUNNING" {
		t.Fatalf("the workspace being typed into: %d %+v", code, ws)
	}
	select {
	case err := <-typed.ended:
		t.Fatalf("the typing session ended: %v: %s", err, typed.stderr.String())
	default:
	}
}
