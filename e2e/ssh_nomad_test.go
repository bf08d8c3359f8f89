package e2e

import (
	"testing"

	"github.com/codehub-io/codehub/internal/nomadtest"
)

// TestNomadSSH reaches a workspace on a real Nomad agent under raw_exec,
// whose agent the task fetches from the server's /dl/codehub, with the
// real OpenSSH client and rsync; then wakes and restores it over SSH.
func TestNomadSSH(t *testing.T) {
	agent := nomadtest.Start(t, "")
	srv := startServer(t, nomadConfig(t, agent))
	admin := login(t, srv)
	ws := createRunning(t, admin, "nomad-ssh")
	me := newSSHUser(t, srv, admin)
	me.configSSH(t)
	// raw_exec cannot mount: the home is the volume's host path.
	sshBasics(t, srv, me, "nomad-ssh", volumePath(t, agent, ws.ID))
	sshWake(t, admin, me, "codehub.nomad-ssh", ws.ID)
}
