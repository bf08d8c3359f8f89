package nomadtest

import (
	"fmt"
	"os/user"
	"strconv"
	"strings"
	"testing"
)

// ExecBinDir is where a test's programs appear inside every exec task:
// an exec task sees only what the client's chroot_env copies into its
// chroot, never the host's temp dirs.
const ExecBinDir = "/opt/codehub-e2e"

// ExecChrootConfig is agent configuration giving exec tasks Nomad's
// default chroot plus the host directory bins at ExecBinDir. Setting
// chroot_env replaces the default, so the default entries are repeated.
// The chroot copies directories with their modes: bins must be readable
// by the task's user.
func ExecChrootConfig(bins string) string {
	var b strings.Builder
	b.WriteString("client {\n  chroot_env {\n")
	for _, dir := range []string{"/bin", "/etc", "/lib", "/lib32", "/lib64", "/run/resolvconf", "/run/systemd/resolve", "/sbin", "/usr"} {
		fmt.Fprintf(&b, "    %q = %q\n", dir, dir)
	}
	fmt.Fprintf(&b, "    %q = %q\n  }\n}\n", bins, ExecBinDir)
	return b.String()
}

// SkipWithoutExec skips unless the agent's node has a healthy exec
// driver, naming the driver's own verdict. The node registers only after
// every driver's first fingerprint, so what it reports now is that
// verdict, not a race.
func SkipWithoutExec(t testing.TB, a *Agent) {
	t.Helper()
	nodes, _, err := a.Client.Nodes().List(nil)
	if err != nil {
		t.Fatal(err)
	}
	d := nodes[0].Drivers["exec"]
	if d == nil || !d.Detected {
		t.Skip("the nomad binary on PATH has no exec driver: Nomad registers it only in cgo builds (CGO_ENABLED=1)")
	}
	if !d.Healthy {
		t.Skipf("the agent's exec driver is unhealthy: %s", d.HealthDescription)
	}
	t.Logf("exec driver: %s", d.HealthDescription)
}

// ExecUser is the user exec tasks run as: the templates set no user for
// exec, so Nomad's default, nobody, owns what the workspace writes.
func ExecUser(t testing.TB) (uid, gid int) {
	t.Helper()
	u, err := user.Lookup("nobody")
	if err != nil {
		t.Fatalf("exec tasks run as nobody, which this host lacks: %v", err)
	}
	if uid, err = strconv.Atoi(u.Uid); err != nil {
		t.Fatal(err)
	}
	if gid, err = strconv.Atoi(u.Gid); err != nil {
		t.Fatal(err)
	}
	return uid, gid
}
