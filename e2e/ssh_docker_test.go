package e2e

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/codehub-io/codehub/internal/testenv"
)

// TestNomadDockerSSH reaches a docker workspace on real Nomad (the
// locally built code-server image, which holds no codehub) with the real
// OpenSSH client: the agent comes from the server's /dl/codehub through
// the task directory and runs as the container's user.
func TestNomadDockerSSH(t *testing.T) {
	cfg, _, _ := dockerNomadConfig(t)
	srv := startServer(t, cfg)
	admin := login(t, srv)
	ws := createRunning(t, admin, "docker-ssh")
	me := newSSHUser(t, srv, admin)
	me.configSSH(t)
	host := "codehub.docker-ssh"

	t.Run("a command as the container's user, with its status", func(t *testing.T) {
		out, err := me.tool("ssh", host, `echo "$(id -u):$(id -g) $HOME"; exit 3`).CombinedOutput()
		if code := exitCode(err); code != 3 || strings.TrimSpace(string(out)) != "1000:1000 /home/coder" {
			t.Fatalf("ssh command: status %d (%v): %q", code, err, out)
		}
	})

	t.Run("scp sftp and rsync round trips", func(t *testing.T) {
		dir := t.TempDir()
		src := filepath.Join(dir, "blob")
		writeRandom(t, src, 3<<20+77)
		me.run(t, "scp", src, host+":blob")
		back := filepath.Join(dir, "blob.scp")
		me.run(t, "scp", host+":blob", back)
		sameFile(t, src, back)
		batch := filepath.Join(dir, "batch")
		sftpBack := filepath.Join(dir, "blob.sftp")
		if err := os.WriteFile(batch, []byte(fmt.Sprintf("put %s sftp-blob\nget sftp-blob %s\n", src, sftpBack)), 0o600); err != nil {
			t.Fatal(err)
		}
		me.run(t, "sftp", "-b", batch, host)
		sameFile(t, src, sftpBack)
		rsh := "ssh -F " + me.config + " -o BatchMode=yes"
		me.run(t, "rsync", "-a", "-e", rsh, src, host+":rsync-blob")
		got := filepath.Join(dir, "got")
		me.run(t, "rsync", "-a", "-e", rsh, host+":rsync-blob", got)
		sameFile(t, src, got)
	})

	t.Run("ssh -L reaches code-server in the container", func(t *testing.T) {
		port := strings.TrimSpace(me.run(t, "ssh", host, `echo "$PORT"`))
		local := testenv.FreePort(t)
		fwd := startSession(t, me.tool("ssh", "-N", "-o", "ExitOnForwardFailure=yes", "-L", fmt.Sprintf("127.0.0.1:%d:127.0.0.1:%s", local, port), host))
		defer func() { _ = fwd.cmd.Process.Kill() }()
		waitFor(t, time.Minute, "code-server answers through the forward", func() bool {
			resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/healthz", local))
			if err != nil {
				return false
			}
			defer resp.Body.Close()
			_, _ = io.Copy(io.Discard, resp.Body)
			return resp.StatusCode == http.StatusOK
		})
	})

	sshAgentForwarding(t, me, host)
	sshWake(t, admin, me, host, ws.ID)
}
