package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/codehub-io/codehub/internal/nomadtest"
	"github.com/codehub-io/codehub/internal/testenv"
)

// TestNomadServerRefusesClusterWithoutACLs starts `codehub server` from a
// configuration file against a Nomad agent that does not enforce ACLs:
// without the opt-out it exits, naming the setting; with it, it runs and
// warns at every start.
func TestNomadServerRefusesClusterWithoutACLs(t *testing.T) {
	nomadtest.Binary(t)
	agent := nomadtest.Start(t, "")
	cfg := nomadConfig(t, agent)
	cfg.backend = strings.Replace(cfg.backend, aclOptOut, "", 1)

	dir := t.TempDir()
	port := testenv.FreePort(t)
	srv := &server{
		bin:     codehubBinary(t),
		url:     fmt.Sprintf("http://127.0.0.1:%d", port),
		dataDir: filepath.Join(dir, "data"),
		cfgPath: filepath.Join(dir, "codehub.hcl"),
	}
	if err := os.WriteFile(srv.cfgPath, []byte(renderConfig(srv, port, cfg)), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, srv.bin, "server", "-config", srv.cfgPath).CombinedOutput()
	if err == nil || ctx.Err() != nil {
		t.Fatalf("codehub server did not refuse a cluster without ACLs (%v):\n%s", err, out)
	}
	if !strings.Contains(string(out), "does not enforce ACLs") || !strings.Contains(string(out), "insecure_allow_no_acls") {
		t.Fatalf("the refusal does not say why or name the setting:\n%s", out)
	}

	// With the opt-out it runs, and says so at every start.
	srvOK := startServer(t, nomadConfig(t, agent))
	srvOK.stop()
	srvOK.start(t)
	log, err := os.ReadFile(srvOK.logPath)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, line := range strings.Split(string(log), "\n") {
		if strings.Contains(line, "[WARN]") && strings.Contains(line, "does not enforce ACLs") {
			n++
		}
	}
	if n != 2 {
		t.Errorf("%d warnings about the cluster's ACLs in two starts, want 2:\n%s", n, log)
	}
}

// TestNomadServerStartsWithACLs starts `codehub server` against an agent
// that enforces ACLs, with a token holding only the policy docs/nomad.md
// documents and no opt-out: it starts, and warns about nothing.
func TestNomadServerStartsWithACLs(t *testing.T) {
	nomadtest.Binary(t)
	agent := nomadtest.Start(t, "acl {\n  enabled = true\n}\n")
	if agent.ManagementToken == "" {
		t.Fatal("the agent started without enforcing ACLs")
	}
	token := documentedPolicyToken(t, agent.Client)
	cfg := nomadConfig(t, agent)
	cfg.backend = strings.Replace(cfg.backend, aclOptOut, fmt.Sprintf("  token = %q\n", token), 1)
	srv := startServer(t, cfg)
	log, err := os.ReadFile(srv.logPath)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(log), "does not enforce ACLs") {
		t.Errorf("a server on a cluster enforcing ACLs warned about them:\n%s", log)
	}
}
