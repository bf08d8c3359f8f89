package e2e

import (
	"bytes"
	"net/http"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/nomad/api"

	"github.com/codehub-io/codehub/archive"
	"github.com/codehub-io/codehub/internal/nomadtest"
	"github.com/codehub-io/codehub/internal/testenv"
)

// TestNomadFleetDrain drains, with `nomad node drain` as an operator types
// it, a client holding homes in every state, under a server started from
// a configuration file with the defaults (no backups): running, stopped
// (saved as it stopped), stopped a second time after more work, archived,
// and three caught half-way when the drain begins: one stopping, one being
// restored and one being created. Every home ends on the other client with
// its files, in its desired state; the archived one stays only in S3;
// nothing stays on the drained client, and the drain command returns. The
// running workspace answers SSH on the other client with the host key a
// laptop pinned before the drain.
func TestNomadFleetDrain(t *testing.T) {
	drainFleet(t, drainNothingKilled, "-deadline", "10m")
}

// TestNomadFleetDrainServerKilled is TestNomadFleetDrain with the codehub
// server killed with SIGKILL as the drain begins and started again from
// the same configuration file 30 s later: the stop archives that fetch
// codehub from it meanwhile try again, and the new server finishes every
// move.
func TestNomadFleetDrainServerKilled(t *testing.T) {
	drainFleet(t, drainServerKilled, "-deadline", "10m")
}

// TestNomadFleetDrainClientKilled is TestNomadFleetDrain with the drained
// client killed with SIGKILL, never to return, once the homes that were
// running are saved: nothing can run there any more, not even a volume
// deletion, and every home, which its archive holds, is restored on the
// other client all the same.
func TestNomadFleetDrainClientKilled(t *testing.T) {
	drainFleet(t, drainClientKilled, "-deadline", "10m")
}

// drainKill is what a drain test kills on the way.
type drainKill int

const (
	drainNothingKilled drainKill = iota
	drainServerKilled
	drainClientKilled
)

// TestNomadFleetDrainShortDeadline is TestNomadFleetDrain with a one-minute
// deadline, after which Nomad stops whatever still runs on the node.
func TestNomadFleetDrainShortDeadline(t *testing.T) {
	drainFleet(t, drainNothingKilled, "-deadline", "1m")
}

// TestNomadFleetDrainForce is TestNomadFleetDrain with -force: Nomad stops
// everything on the node at once.
func TestNomadFleetDrainForce(t *testing.T) {
	drainFleet(t, drainNothingKilled, "-force")
}

// drainCluster starts two clients, node-a and node-b, and the
// configuration of a server on them with the defaults; nomadBin is the
// nomad command an operator drains with.
func drainCluster(t *testing.T) (nomadBin string, cluster *nomadtest.Cluster, agent *nomadtest.Agent, cfg serverConfig) {
	nomadBin, err := exec.LookPath("nomad")
	if err != nil {
		t.Skip("no nomad binary on PATH")
	}
	cluster = nomadtest.StartCluster(t, "node-a", "node-b")
	agent = &nomadtest.Agent{Addr: cluster.Addr, Client: cluster.Client}
	cfg = nomadConfig(t, agent)
	cfg.maxRunning = 4
	return nomadBin, cluster, agent, cfg
}

func drainFleet(t *testing.T, kill drainKill, drainArgs ...string) {
	nomadBin, cluster, agent, cfg := drainCluster(t)
	srv := startServer(t, cfg)
	c := login(t, srv)
	a, b := cluster.Node(t, "node-a"), cluster.Node(t, "node-b")
	// Every home starts on node-a: node-b takes none meanwhile.
	if _, err := cluster.Client.Nodes().ToggleEligibility(b.NodeID, false, nil); err != nil {
		t.Fatal(err)
	}
	files := map[string]map[string][]byte{}
	run := func(ids ...string) {
		for _, id := range ids {
			c.settle(id, "RUNNING", time.Now())
			files[id] = writeHomeFiles(t, volumePath(t, agent, id))
		}
	}
	stop := func(ids ...string) {
		for _, id := range ids {
			c.setDesired(id, "STANDBY")
		}
		for _, id := range ids {
			c.settle(id, "STANDBY", time.Now())
			nomadtest.Eventually(t, time.Minute, "the stop archive of "+id+" committed", func() bool {
				rp := recoveryPoint(t, c, id)
				return rp.Current && rp.ArchivedAt != nil
			})
		}
	}
	archiveAll := func(ids ...string) {
		for _, id := range ids {
			c.setDesired(id, "ARCHIVED")
		}
		for _, id := range ids {
			c.settle(id, "ARCHIVED", time.Now())
		}
	}
	running, stopped, again, archived := c.create("running"), c.create("stopped"), c.create("again"), c.create("archived")
	run(running, stopped, again, archived)
	stop(stopped, again, archived)
	// More work on one, then stopped again: its second stop archive.
	c.setDesired(again, "RUNNING")
	run(again)
	if rp := recoveryPoint(t, c, again); rp.Current {
		t.Fatalf("a running home's recovery point is current: %+v", rp)
	}
	stop(again)
	// The second stop uploaded what changed since the first: an
	// incremental archive on it.
	store := archive.NewStore(hclog.NewNullLogger(), cfg.s3.Client, cfg.s3.Bucket)
	list, err := store.List(t.Context(), again)
	if err != nil || len(list.Complete) != 2 {
		t.Fatalf("archives of the twice-stopped workspace: %+v, %v; want two", list, err)
	}
	if meta, err := store.Stat(t.Context(), list.Complete[0]); err != nil || meta.Parent != list.Complete[1] {
		t.Errorf("second stop archive: parent %q (%v), want the first %s", meta.Parent, err, list.Complete[1])
	}
	archiveAll(archived)
	stopping, restoring := c.create("stopping"), c.create("restoring")
	run(stopping, restoring)
	stop(restoring)
	archiveAll(restoring)

	// Half-way when the drain begins.
	c.setDesired(stopping, "STANDBY")
	c.setDesired(restoring, "STANDBY")
	creating := c.create("creating")
	waitFor(t, 2*time.Minute, "the restore and the new home on node-a", func() bool {
		return onNode(t, agent, restoring, a.NodeID) && onNode(t, agent, creating, a.NodeID)
	})
	// A laptop that reached the running workspace over SSH pinned its
	// host key; the move must not change it.
	me := newSSHUser(t, srv, c)
	me.configSSH(t)
	me.run(t, "ssh", "codehub.running", "true")
	if _, err := cluster.Client.Nodes().ToggleEligibility(b.NodeID, true, nil); err != nil {
		t.Fatal(err)
	}
	drain := startDrain(t, nomadBin, cluster.Addr, a.NodeID, drainArgs...)
	switch kill {
	case drainServerKilled:
		srv.kill(t)
		time.Sleep(30 * time.Second)
		srv.start(t)
		c = login(t, srv)
	case drainClientKilled:
		nomadtest.Eventually(t, 3*time.Minute, "the running homes saved", func() bool {
			return recoveryPoint(t, c, running).Current && recoveryPoint(t, c, stopping).Current
		})
		a.Kill(t)
		a.WaitStatus(t, 2*time.Minute, api.NodeStatusDown)
	}

	want := map[string]string{running: "RUNNING", stopped: "STANDBY", again: "STANDBY", archived: "ARCHIVED",
		stopping: "STANDBY", restoring: "STANDBY", creating: "RUNNING"}
	nomadtest.Eventually(t, 8*time.Minute, "every home off node-a in its desired state", func() bool {
		for id, phase := range want {
			var ws apiWorkspace
			if code := c.do("GET", "/api/v1/workspaces/"+id, nil, &ws); code != http.StatusOK {
				t.Fatalf("get %s: %d", id, code)
			}
			if ws.Phase == "ERROR" {
				t.Fatalf("workspace %s in ERROR: %+v", id, ws)
			}
			if ws.Phase != phase || ws.Operation != "NONE" || onNode(t, agent, id, a.NodeID) {
				return false
			}
		}
		return homesOn(t, c, "node-a") == 0
	})
	// A drain of a lost node never completes: Nomad has no client to
	// hear it.
	if kill != drainClientKilled {
		drain.wait(t)
	}
	for id, content := range files {
		if want[id] == "ARCHIVED" {
			if vols := volumes(t, agent, id); len(vols) != 0 {
				t.Errorf("the archived workspace %s has volumes %+v", id, vols)
			}
			continue
		}
		vols := volumes(t, agent, id)
		if len(vols) != 1 || vols[0].NodeID != b.NodeID {
			t.Errorf("workspace %s volumes %+v, want one on node-b", id, vols)
			continue
		}
		checkHomeFiles(t, id, volumePath(t, agent, id), content)
	}
	got, err := me.tool("ssh", "codehub.running", "cat", "\"$HOME\"/"+homeFiles[1].name).Output()
	if err != nil || !bytes.Equal(got, files[running][homeFiles[1].name]) {
		t.Errorf("over SSH after the move, the running workspace shows %d other bytes (%v)", len(got), err)
	}
	// The archived home, opened, comes back with its files.
	c.setDesired(archived, "STANDBY")
	c.settle(archived, "STANDBY", time.Now())
	checkHomeFiles(t, archived, volumePath(t, agent, archived), files[archived])
	for _, v := range homeVolumes(t, agent) {
		if v.NodeID == a.NodeID {
			t.Errorf("the drained node still holds %s", v.Name)
		}
	}
}

// recovery is a workspace's recovery_point as the API shows it.
type recovery struct {
	ArchivedAt *time.Time `json:"archived_at"`
	Current    bool       `json:"current"`
}

func recoveryPoint(t *testing.T, c *apiClient, id string) recovery {
	t.Helper()
	var ws struct {
		RecoveryPoint recovery `json:"recovery_point"`
	}
	if code := c.do("GET", "/api/v1/workspaces/"+id, nil, &ws); code != http.StatusOK {
		t.Fatalf("get %s: %d", id, code)
	}
	return ws.RecoveryPoint
}

// onNode reports a home volume of the workspace on the node.
func onNode(t *testing.T, agent *nomadtest.Agent, id, nodeID string) bool {
	t.Helper()
	return slices.ContainsFunc(volumes(t, agent, id), func(v *api.HostVolumeStub) bool { return v.NodeID == nodeID })
}

// TestNomadFleetDrainS3Away drains a client while S3 is away, under a
// server started from a configuration file with the defaults. Two
// workspaces stopped during the outage on a node in service are given up
// after the stop timeout, and a backup of each begins at once, trying
// until S3 takes the home. One's user starts it again: the backup yields,
// and it runs on its node without S3. The other stays stopped, changed
// since its last archive, with its backup in the middle of its tries.
// Then the drain: the running homes it stops and one stopping as it
// begins cannot be saved, and their stop archives keep trying (far longer
// than the stop timeout and the few tries they used to have) while the
// drain waits for them and for the backup; nothing is deleted or fails.
// Once S3 is back every home moves to the other client with its files,
// and the drain command returns.
func TestNomadFleetDrainS3Away(t *testing.T) {
	nomadBin, cluster, agent, cfg := drainCluster(t)
	s3 := newGate(t, cfg.s3.Endpoint)
	cfg.s3.Endpoint = s3.addr()
	srv := startServer(t, cfg)
	c := login(t, srv)
	a, b := cluster.Node(t, "node-a"), cluster.Node(t, "node-b")
	if _, err := cluster.Client.Nodes().ToggleEligibility(b.NodeID, false, nil); err != nil {
		t.Fatal(err)
	}
	running, stopped, reopened, given := c.create("running"), c.create("stopped"), c.create("reopened"), c.create("given")
	all := []string{running, stopped, reopened, given}
	files := map[string]map[string][]byte{}
	for _, id := range all {
		c.settle(id, "RUNNING", time.Now())
		files[id] = writeHomeFiles(t, volumePath(t, agent, id))
	}
	get := func(id string) apiWorkspace {
		var ws apiWorkspace
		if code := c.do("GET", "/api/v1/workspaces/"+id, nil, &ws); code != http.StatusOK {
			t.Fatalf("get %s: %d", id, code)
		}
		if ws.Phase == "ERROR" {
			t.Fatalf("workspace %s in ERROR: %+v", id, ws)
		}
		return ws
	}

	s3.set(false)
	c.setDesired(reopened, "STANDBY")
	c.setDesired(given, "STANDBY")
	waitFor(t, 5*time.Minute, "the stops during the outage given up, backups trying", func() bool {
		for _, id := range []string{reopened, given} {
			if ws := get(id); !ws.Backup || !backupTrying(t, agent, id, a.NodeID) {
				return false
			}
		}
		return true
	})
	for _, id := range []string{reopened, given} {
		if recoveryPoint(t, c, id).Current {
			t.Fatal("a home stopped while S3 was away is called saved")
		}
	}
	c.setDesired(reopened, "RUNNING")
	c.settle(reopened, "RUNNING", time.Now())
	if !onNode(t, agent, reopened, a.NodeID) {
		t.Fatal("the reopened workspace left its node")
	}

	c.setDesired(stopped, "STANDBY")
	stopping := time.Now()
	waitFor(t, time.Minute, "the program stopped, its home being saved", func() bool {
		return get(stopped).Operation == "STOPPING" && stopArchiveStarted(t, agent, stopped)
	})
	if _, err := cluster.Client.Nodes().ToggleEligibility(b.NodeID, true, nil); err != nil {
		t.Fatal(err)
	}
	drain := startDrain(t, nomadBin, cluster.Addr, a.NodeID, "-deadline", "6m")

	// Well past the stop timeout and the few tries a stop archive used
	// to have.
	for time.Since(stopping) < 4*time.Minute {
		for _, id := range all {
			get(id)
		}
		time.Sleep(5 * time.Second)
	}
	if drain.returned() {
		t.Fatalf("the drain completed while homes needed the node:\n%s", drain.out.String())
	}
	for _, id := range all {
		if !onNode(t, agent, id, a.NodeID) {
			t.Errorf("the home of %s left node-a before it was saved", id)
		}
	}
	if !backupTrying(t, agent, given, a.NodeID) {
		t.Error("the backup of the stopped home no longer runs on the drained node")
	}

	s3.set(true)
	want := map[string]string{running: "RUNNING", stopped: "STANDBY", reopened: "RUNNING", given: "STANDBY"}
	nomadtest.Eventually(t, 8*time.Minute, "every home off node-a in its desired state", func() bool {
		for id, phase := range want {
			ws := get(id)
			if ws.Phase != phase || ws.Operation != "NONE" || onNode(t, agent, id, a.NodeID) {
				return false
			}
		}
		return homesOn(t, c, "node-a") == 0
	})
	drain.wait(t)
	homesMovedTo(t, agent, b.NodeID, files)
}

// backupTrying reports that the archive job of the workspace has an
// allocation on the node that has not ended: running, or between two tries.
func backupTrying(t *testing.T, agent *nomadtest.Agent, id, nodeID string) bool {
	t.Helper()
	allocs, _, err := agent.Client.Jobs().Allocations("ws-"+id+"-archive", true, nil)
	if err != nil {
		return false
	}
	return slices.ContainsFunc(allocs, func(a *api.AllocationListStub) bool {
		return a.NodeID == nodeID && a.DesiredStatus == api.AllocDesiredStatusRun &&
			(a.ClientStatus == api.AllocClientStatusRunning || a.ClientStatus == api.AllocClientStatusPending)
	})
}

// stopArchiveStarted reports that the stop-archive task of the workspace's
// newest allocation has started: its program has stopped.
func stopArchiveStarted(t *testing.T, agent *nomadtest.Agent, id string) bool {
	t.Helper()
	allocs, _, err := agent.Client.Jobs().Allocations("ws-"+id, true, nil)
	if err != nil {
		t.Fatal(err)
	}
	var newest *api.AllocationListStub
	for _, a := range allocs {
		if newest == nil || a.CreateIndex > newest.CreateIndex {
			newest = a
		}
	}
	if newest == nil {
		return false
	}
	ts := newest.TaskStates["stop-archive"]
	return ts != nil && !ts.StartedAt.IsZero()
}

// drainRun is `nomad node drain -enable -yes` as an operator types it,
// running in the background.
type drainRun struct {
	cmd      *exec.Cmd
	started  time.Time
	deadline time.Duration // 0 with -force
	done     chan struct{}
	err      error
	out      syncBuffer
}

func startDrain(t *testing.T, nomadBin, addr, nodeID string, args ...string) *drainRun {
	t.Helper()
	args = append([]string{"node", "drain", "-address", addr, "-enable", "-yes"}, args...)
	d := &drainRun{done: make(chan struct{})}
	if i := slices.Index(args, "-deadline"); i >= 0 && i+1 < len(args) {
		var err error
		if d.deadline, err = time.ParseDuration(args[i+1]); err != nil {
			t.Fatal(err)
		}
	}
	d.cmd = exec.CommandContext(t.Context(), nomadBin, append(args, nodeID)...)
	d.cmd.Stdout, d.cmd.Stderr = &d.out, &d.out
	d.started = time.Now()
	if err := d.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		d.err = d.cmd.Wait()
		close(d.done)
	}()
	t.Logf("%s %s %s", nomadBin, strings.Join(args, " "), nodeID)
	return d
}

func (d *drainRun) returned() bool {
	select {
	case <-d.done:
		return true
	default:
		return false
	}
}

// wait fails the test unless the command returns without error. Nomad
// checks whether a drain is done only as an allocation it migrates ends;
// when the last allocation to end is one codehub stopped itself (a stop
// begun before the drain), the drain completes at its deadline instead
// (docs/nomad.md), so the wait lasts until then, or 2 minutes.
func (d *drainRun) wait(t *testing.T) {
	t.Helper()
	limit := max(time.Until(d.started.Add(d.deadline+time.Minute)), 2*time.Minute)
	select {
	case <-d.done:
		if d.err != nil {
			t.Fatalf("nomad node drain: %v\n%s", d.err, d.out.String())
		}
	case <-time.After(limit):
		t.Fatalf("the drain command did not return:\n%s", d.out.String())
	}
}

// TestNomadFleetDrainWarmHomes drains the node that holds a template's
// warm homes: they move to the other node as stopped homes do (their
// prebuilt home restored there), stay in the pool, and a creation still
// claims one, on the node that took it.
func TestNomadFleetDrainWarmHomes(t *testing.T) {
	nomadBin, cluster, agent, cfg := drainCluster(t)
	repo := testenv.BareRepo(t, "service", map[string]string{"README": "v1", "build.sh": buildScript})
	cfg.workspace += strings.Replace(prebuildTemplate(repo), "  prebuild {", "  warm = 2\n  prebuild {", 1)
	a, b := cluster.Node(t, "node-a"), cluster.Node(t, "node-b")
	if _, err := cluster.Client.Nodes().ToggleEligibility(b.NodeID, false, nil); err != nil {
		t.Fatal(err)
	}
	srv := startServer(t, cfg)
	c := login(t, srv)
	first := awaitPrebuild(t, c, "service", "", 3*time.Minute)
	warm := awaitWarm(t, c, "service", first.ID)
	for id := range warm {
		if !onNode(t, agent, id, a.NodeID) {
			t.Fatalf("warm home %s is not on node-a", id)
		}
	}
	if _, err := cluster.Client.Nodes().ToggleEligibility(b.NodeID, true, nil); err != nil {
		t.Fatal(err)
	}
	drain := startDrain(t, nomadBin, cluster.Addr, a.NodeID, "-deadline", "10m")
	nomadtest.Eventually(t, 8*time.Minute, "the warm homes on node-b, ready", func() bool {
		for id := range warm {
			if vols := volumes(t, agent, id); len(vols) != 1 || vols[0].NodeID != b.NodeID {
				return false
			}
		}
		return c.pool("service").Ready == 2
	})
	drain.wait(t)
	if now := awaitWarm(t, c, "service", first.ID); len(now) != 2 {
		t.Fatalf("warm homes after the drain: %v, were %v", now, warm)
	}
	ws := c.createFrom("after-the-drain", "service", nil)
	c.settle(ws.ID, "RUNNING", time.Now())
	if _, claimed := warm[ws.ID]; !claimed || !onNode(t, agent, ws.ID, b.NodeID) {
		t.Errorf("after the drain %s is not a warm home moved to node-b (%v)", ws.ID, warm)
	}
	if at := readFile(t, filepath.Join(volumePath(t, agent, ws.ID), "service", "built-at")); at == "" {
		t.Error("the moved warm home lost its prebuilt checkout")
	}
}

// homesMovedTo checks that every workspace in files has one volume, on
// nodeID, holding the files written to its home before the move.
func homesMovedTo(t *testing.T, agent *nomadtest.Agent, nodeID string, files map[string]map[string][]byte) {
	t.Helper()
	for id, content := range files {
		vols := volumes(t, agent, id)
		if len(vols) != 1 || vols[0].NodeID != nodeID {
			t.Errorf("workspace %s volumes %+v, want one on node %s", id, vols, nodeID)
			continue
		}
		checkHomeFiles(t, id, volumePath(t, agent, id), content)
	}
}
