package nomadtest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/codehub-io/codehub/internal/testenv"
)

// Cluster is one Nomad server and several clients on loopback, each agent
// its own process, so a test can stop, kill or restart one client while
// the rest of the fleet runs on.
type Cluster struct {
	// Addr is the server's HTTP API URL; Client talks to it.
	Addr    string
	Client  *api.Client
	Log     *LockedBuffer
	Clients []*ClusterClient
	// ManagementToken is the bootstrap token's secret when the cluster
	// enforces ACLs; Client carries it.
	ManagementToken string
	// ServerPID is the server process's, for a benchmark to read its
	// memory.
	ServerPID int

	bin     string
	rpcAddr string
	opts    ClusterOptions
}

// ClusterOptions change what StartClusterWith starts.
type ClusterOptions struct {
	// ACL makes every agent enforce ACLs, bootstrapped once the server
	// answers.
	ACL bool
	// ClientConfig is added to every client's configuration (a plugin
	// block, say).
	ClientConfig string
	// Client is added inside every client's client block: the node's
	// capacity (memory_total_mb, cpu_total_compute), for one.
	Client string
	// HeartbeatGrace is how long the server waits past a missed
	// heartbeat before it marks the node down: 2 s unless set, so a test
	// sees a killed client down within seconds; a benchmark that keeps
	// the machine busy gives its clients longer.
	HeartbeatGrace time.Duration
}

const aclEnabled = `
acl {
  enabled = true
}
`

// ClusterClient is one client agent of a Cluster. Its directories survive
// a stop or kill, so a restart brings the same node (same id, same
// volumes) back.
type ClusterClient struct {
	// Name is the node's name; NodeID is filled in once it registered.
	Name           string
	NodeID         string
	HTTPAddr       string
	HostVolumesDir string
	Log            *LockedBuffer

	cluster *Cluster
	base    string
	cfgPath string
	cmd     *exec.Cmd
	done    chan struct{}
}

// agentBase is what every agent of a test shares: loopback only, no update
// check.
const agentBase = `
bind_addr            = "127.0.0.1"
data_dir             = %q
log_level            = "INFO"
# The update check asks a public server; tests reach only loopback.
disable_update_check = true

ports {
  http = %d
  rpc  = %d
  serf = %d
}

advertise {
  http = "127.0.0.1"
  rpc  = "127.0.0.1"
  serf = "127.0.0.1"
}
`

// fingerprintDenylist turns the cloud fingerprints off: these machines set
// AWS_CA_BUNDLE, and the fingerprints then abort the client's start.
const fingerprintDenylist = `"fingerprint.denylist" = "env_aws,env_gce,env_azure,env_digitalocean"`

// rawExecPlugin enables raw_exec, which the tests' workspaces run on.
const rawExecPlugin = `
plugin "raw_exec" {
  config {
    enabled = true
  }
}
`

// StartCluster starts a server and one client per name, each with its own
// data, alloc and state dirs, host_volumes_dir and HTTP port, raw_exec
// enabled and the cloud fingerprints denied, and waits until every client
// node is ready. Everything is stopped when the test ends.
func StartCluster(t testing.TB, names ...string) *Cluster {
	t.Helper()
	return StartClusterWith(t, ClusterOptions{}, names...)
}

// StartClusterWith is StartCluster with opts.
func StartClusterWith(t testing.TB, opts ClusterOptions, names ...string) *Cluster {
	t.Helper()
	bin := Binary(t)
	dir, err := os.MkdirTemp("", "codehub-nomad-cluster-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { RemoveDir(t, dir) })
	http, rpc, serf := testenv.FreePort(t), testenv.FreePort(t), testenv.FreePort(t)
	c := &Cluster{
		Addr:    fmt.Sprintf("http://127.0.0.1:%d", http),
		Log:     &LockedBuffer{},
		bin:     bin,
		rpcAddr: fmt.Sprintf("127.0.0.1:%d", rpc),
		opts:    opts,
	}
	grace := 2 * time.Second
	if opts.HeartbeatGrace > 0 {
		grace = opts.HeartbeatGrace
	}
	server := fmt.Sprintf(agentBase, filepath.Join(dir, "server"), http, rpc, serf) + fmt.Sprintf(`
server {
  enabled          = true
  bootstrap_expect = 1
  # A killed client is down within seconds, not the default half minute.
  heartbeat_grace   = %q
  min_heartbeat_ttl = "2s"
}
`, grace)
	if opts.ACL {
		server += aclEnabled
	}
	serverCfg := filepath.Join(dir, "server.hcl")
	if err := os.WriteFile(serverCfg, []byte(server), 0o600); err != nil {
		t.Fatal(err)
	}
	stop, pid := startProcess(t, bin, serverCfg, c.Log)
	c.ServerPID = pid
	t.Cleanup(func() {
		stop()
		if t.Failed() {
			t.Logf("nomad server log:\n%s", c.Log.String())
		}
	})
	client, err := api.NewClient(&api.Config{Address: c.Addr})
	if err != nil {
		t.Fatal(err)
	}
	c.Client = client
	if opts.ACL {
		c.bootstrapACL(t)
	}

	for _, name := range names {
		c.Clients = append(c.Clients, c.addClient(t, dir, name))
	}
	t.Cleanup(func() { c.shutdown(t) })
	for _, cc := range c.Clients {
		cc.startFirst(t)
	}
	return c
}

// bootstrapACL takes the cluster's one-time management token once the
// server answers.
func (c *Cluster) bootstrapACL(t testing.TB) {
	t.Helper()
	Eventually(t, time.Minute, "nomad server ready for the ACL bootstrap", func() bool {
		token, _, err := c.Client.ACLTokens().Bootstrap(nil)
		if err != nil {
			return false
		}
		c.ManagementToken = token.SecretID
		c.Client.SetSecretID(token.SecretID)
		return true
	})
}

// shutdown stops every job and waits for their allocations to end, then
// stops the clients. Unlike a dev agent, a client that stops leaves its
// tasks running, so the jobs go first.
func (c *Cluster) shutdown(t testing.TB) {
	t.Helper()
	jobs, _, err := c.Client.Jobs().List(nil)
	if err != nil {
		t.Logf("list jobs at shutdown: %v", err)
	}
	for _, j := range jobs {
		if _, _, err := c.Client.Jobs().Deregister(j.ID, false, nil); err != nil {
			t.Logf("stop job %s at shutdown: %v", j.ID, err)
		}
	}
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) && c.liveAllocs() > 0 {
		time.Sleep(200 * time.Millisecond)
	}
	for _, cc := range c.Clients {
		cc.Stop(t)
		if t.Failed() {
			t.Logf("nomad client %s log:\n%s", cc.Name, cc.Log.String())
		}
	}
}

// liveAllocs counts allocations on ready nodes that have not ended.
func (c *Cluster) liveAllocs() int {
	allocs, _, err := c.Client.Allocations().List(nil)
	if err != nil {
		return 0
	}
	n := 0
	for _, a := range allocs {
		switch a.ClientStatus {
		case api.AllocClientStatusPending, api.AllocClientStatusRunning:
			if c.nodeReady(a.NodeID) {
				n++
			}
		}
	}
	return n
}

func (c *Cluster) nodeReady(id string) bool {
	n, _, err := c.Client.Nodes().Info(id, nil)
	return err == nil && n.Status == api.NodeStatusReady
}

func (c *Cluster) addClient(t testing.TB, dir, name string) *ClusterClient {
	t.Helper()
	base := filepath.Join(dir, name)
	cc := &ClusterClient{
		Name:           name,
		HostVolumesDir: filepath.Join(base, "host_volumes"),
		Log:            &LockedBuffer{},
		cluster:        c,
		base:           base,
		cfgPath:        filepath.Join(base, "client.hcl"),
	}
	if err := os.MkdirAll(base, 0o700); err != nil {
		t.Fatal(err)
	}
	cc.writeConfig(t)
	return cc
}

// writeConfig writes the client's agent configuration on ports free now.
func (cc *ClusterClient) writeConfig(t testing.TB) {
	t.Helper()
	http, rpc, serf := testenv.FreePort(t), testenv.FreePort(t), testenv.FreePort(t)
	cc.HTTPAddr = fmt.Sprintf("http://127.0.0.1:%d", http)
	cfg := fmt.Sprintf(agentBase, filepath.Join(cc.base, "data"), http, rpc, serf) + fmt.Sprintf(`
name = %q

client {
  enabled           = true
  servers           = [%q]
  network_interface = "lo"
  alloc_dir         = %q
  state_dir         = %q
  host_volumes_dir  = %q
  options = {
    %s
  }
%s
}
`, cc.Name, cc.cluster.rpcAddr, filepath.Join(cc.base, "alloc"), filepath.Join(cc.base, "state"), cc.HostVolumesDir, fingerprintDenylist, cc.cluster.opts.Client) + rawExecPlugin + cc.cluster.opts.ClientConfig
	if cc.cluster.opts.ACL {
		cfg += aclEnabled
	}
	if err := os.WriteFile(cc.cfgPath, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
}

// startFirst starts the client's agent for the first time and waits until
// its node is ready. Its ports were free when picked, but another process
// may take one before the agent binds it: an agent that exits before its
// node is ready is started again on new ports, up to three times.
func (cc *ClusterClient) startFirst(t testing.TB) {
	t.Helper()
	for try := 1; ; try++ {
		cc.Start(t)
		if cc.becameReady(t) {
			return
		}
		if try == 3 {
			t.Fatalf("nomad client %s exited before it was ready, three times; its log:\n%s", cc.Name, cc.Log.String())
		}
		t.Logf("nomad client %s exited before it was ready; starting it on new ports", cc.Name)
		cc.cmd, cc.done = nil, nil
		cc.writeConfig(t)
	}
}

// becameReady waits until the node is ready (true) or its agent exited
// (false).
func (cc *ClusterClient) becameReady(t testing.TB) bool {
	t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	for !cc.ready() {
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting for nomad client %s ready after 90s", cc.Name)
		}
		select {
		case <-cc.done:
			return false
		case <-time.After(100 * time.Millisecond):
		}
	}
	return true
}

// Node returns the cluster client named name, or fails the test.
func (c *Cluster) Node(t testing.TB, name string) *ClusterClient {
	t.Helper()
	for _, cc := range c.Clients {
		if cc.Name == name {
			return cc
		}
	}
	t.Fatalf("no cluster client %q", name)
	return nil
}

// startProcess runs `nomad agent -config cfg` until the returned func or
// the test's end stops it with an interrupt.
func startProcess(t testing.TB, bin, cfg string, log *LockedBuffer) (stop func(), pid int) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, bin, "agent", "-config", cfg)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) }
	cmd.WaitDelay = 20 * time.Second
	if err := cmd.Start(); err != nil {
		cancel()
		t.Fatal(err)
	}
	return func() {
		cancel()
		_ = cmd.Wait()
	}, cmd.Process.Pid
}

// Start starts the client's agent (again, after Stop or Kill). It does not
// wait for the node to be ready: WaitReady does.
func (cc *ClusterClient) Start(t testing.TB) {
	t.Helper()
	if cc.cmd != nil {
		t.Fatalf("client %s is running already", cc.Name)
	}
	cmd := exec.Command(cc.cluster.bin, "agent", "-config", cc.cfgPath)
	cmd.Stdout, cmd.Stderr = cc.Log, cc.Log
	cmd.WaitDelay = 20 * time.Second
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = cmd.Wait()
	}()
	cc.cmd, cc.done = cmd, done
}

// PID is the running agent's process id, 0 while it is stopped.
func (cc *ClusterClient) PID() int {
	if cc.cmd == nil {
		return 0
	}
	return cc.cmd.Process.Pid
}

// Stop interrupts the client's agent and waits for it to exit, as an
// operator's restart would.
func (cc *ClusterClient) Stop(t testing.TB) { cc.signal(t, os.Interrupt) }

// Kill ends the client's agent with SIGKILL: a machine that vanished. Tasks
// it started (raw_exec) run on as orphans, as they would on a node that
// lost only its agent; a test that needs them gone kills them itself.
func (cc *ClusterClient) Kill(t testing.TB) { cc.signal(t, syscall.SIGKILL) }

func (cc *ClusterClient) signal(t testing.TB, sig os.Signal) {
	t.Helper()
	if cc.cmd == nil {
		return
	}
	if err := cc.cmd.Process.Signal(sig); err != nil {
		t.Logf("signal nomad client %s: %v", cc.Name, err)
	}
	select {
	case <-cc.done:
	case <-time.After(30 * time.Second):
		_ = cc.cmd.Process.Kill()
		<-cc.done
	}
	cc.cmd, cc.done = nil, nil
}

// WaitReady waits until the server lists the client's node as ready with
// raw_exec healthy, and records its node id.
func (cc *ClusterClient) WaitReady(t testing.TB) {
	t.Helper()
	Eventually(t, 90*time.Second, "nomad client "+cc.Name+" ready", cc.ready)
}

// ready reports whether the node is ready with raw_exec healthy, recording
// its id once it is.
func (cc *ClusterClient) ready() bool {
	n := cc.node()
	if n == nil || n.Status != api.NodeStatusReady {
		return false
	}
	d := n.Drivers["raw_exec"]
	if d == nil || !d.Healthy {
		return false
	}
	cc.NodeID = n.ID
	return true
}

// WaitStatus waits until the server reports the node in status (e.g.
// api.NodeStatusDown after a kill).
func (cc *ClusterClient) WaitStatus(t testing.TB, limit time.Duration, status string) {
	t.Helper()
	Eventually(t, limit, "nomad client "+cc.Name+" "+status, func() bool {
		n := cc.node()
		return n != nil && n.Status == status
	})
}

func (cc *ClusterClient) node() *api.NodeListStub {
	nodes, _, err := cc.cluster.Client.Nodes().List(nil)
	if err != nil {
		return nil
	}
	for _, n := range nodes {
		if n.Name == cc.Name {
			return n
		}
	}
	return nil
}
