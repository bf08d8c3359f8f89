package e2e

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/cookiejar"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"
	"github.com/jackc/pgx/v5"

	"github.com/codehub-io/codehub/internal/nomadtest"
)

// TestNomadDeployJob deploys codehub as docs/nomad.md's "Deployment" tells
// an operator to: the image from `make image` loaded into the engine, the
// job's Nomad Variable written with `nomad var put`, and
// deploy/codehub.nomad.hcl run with `nomad job run` and a variables file,
// on a two-client cluster that enforces ACLs, with the token of the
// documented policy. Users reach it through a front that sends each
// connection to a replica Nomad's service discovery lists, as a load
// balancer does. Both replicas become healthy, a user logs in and opens a
// workspace, the leader's allocation is stopped (`nomad alloc stop`) and
// the other replica leads while the workspace keeps serving, and a new
// image rolls through the job's update block without touching the
// workspace: its job is never submitted again and its allocation runs on.
func TestNomadDeployJob(t *testing.T) {
	nomadBin := nomadtest.Binary(t)
	base := localConfig(t)
	engine := startDockerEngine(t, base.codeServer)
	cluster := nomadtest.StartClusterWith(t, nomadtest.ClusterOptions{ACL: true, ClientConfig: fmt.Sprintf(`
plugin "docker" {
  config {
    endpoint = %q
    gc {
      image = false
    }
  }
}
`, engine.endpoint)}, "node-a", "node-b")
	nomadtest.Eventually(t, time.Minute, "docker healthy on both clients", func() bool {
		nodes, _, err := cluster.Client.Nodes().List(nil)
		if err != nil || len(nodes) != 2 {
			return false
		}
		for _, n := range nodes {
			if d := n.Drivers["docker"]; d == nil || !d.Healthy {
				return false
			}
		}
		return true
	})
	image1, image2 := buildImage(t, engine, "e2e-1"), buildImage(t, engine, "e2e-2")
	token := documentedPolicyToken(t, cluster.Client)

	nomad := func(args ...string) string {
		t.Helper()
		ctx, cancel := context.WithTimeout(t.Context(), 6*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, nomadBin, args...)
		cmd.Env = append(os.Environ(), "NOMAD_ADDR="+cluster.Addr, "NOMAD_TOKEN="+cluster.ManagementToken)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("nomad %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	nomad("var", "put", "nomad/jobs/codehub",
		"database_url="+base.databaseURL, "redis_url="+base.redisURL,
		"s3_access_key="+base.s3.AccessKey, "s3_secret_key="+base.s3.SecretKey,
		"nomad_token="+token, "admin_password="+adminPassword)

	// The front users reach: any replica the service lists.
	front := newFront(t, func() []string {
		regs, _, err := cluster.Client.Services().Get("codehub", nil)
		if err != nil {
			return nil
		}
		var addrs []string
		for _, r := range regs {
			addrs = append(addrs, net.JoinHostPort(r.Address, strconv.Itoa(r.Port)))
		}
		return addrs
	})
	vars := filepath.Join(t.TempDir(), "codehub.vars.hcl")
	if err := os.WriteFile(vars, []byte(fmt.Sprintf(`public_url             = "http://%s"
listen_host            = "127.0.0.1"
network_mode           = "host"
nomad_address          = %q
s3_endpoint            = %q
s3_bucket              = %q
s3_use_ssl             = false
workspace_network_mode = "host"
config                 = <<-EOT
  workspace {
    image = %q
    uid   = 1000
    gid   = 1000
    %s
  }
EOT
`, front.addr(), cluster.Addr, base.s3.Endpoint, base.s3.Bucket, engine.image, codeServerWorkspace)), 0o600); err != nil {
		t.Fatal(err)
	}
	jobFile := filepath.Join("..", "deploy", "codehub.nomad.hcl")
	t.Logf("nomad job run -var-file %s -var image=%s %s", vars, image1, jobFile)
	nomad("job", "run", "-var-file", vars, "-var", "image="+image1, jobFile)
	servers := healthyServers(t, cluster.Client, image1)
	if servers[0].NodeID == servers[1].NodeID {
		t.Logf("both replicas run on node %s", servers[0].NodeID)
	}

	jar, err := cookiejar.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	// A new connection per request: each goes through the front to a
	// replica that is listed then.
	c := &apiClient{tb: t, base: "http://" + front.addr(), http: &http.Client{
		Jar: jar, Timeout: 30 * time.Second, Transport: &http.Transport{DisableKeepAlives: true},
	}}
	if code := c.do("POST", "/api/v1/login", map[string]string{"username": "admin", "password": adminPassword}, nil); code != http.StatusOK {
		t.Fatalf("login: %d", code)
	}
	ws := apiWorkspace{ID: c.create("deployed"), Name: "deployed"}
	c.settle(ws.ID, "RUNNING", time.Now())
	openWorkbench(t, c, ws, "/home/coder")
	wsAlloc, wsVersion := workspaceAlloc(t, cluster.Client, ws.ID)

	// The preflight, run inside a replica as the docs' last step says,
	// finds nothing to fix in a deployment that works (nomad fails the
	// test on its exit status 1).
	t.Logf("codehub doctor in replica %s:\n%s", servers[0].ID,
		nomad("alloc", "exec", "-task", "server", servers[0].ID, "/codehub", "doctor", "-config", "/local/codehub.hcl"))

	// The leader's allocation stops; the other replica takes over.
	epoch, holder := leader(t, base.databaseURL)
	leaderAlloc := ""
	for _, s := range servers {
		if strings.HasSuffix(holder, " alloc "+s.ID) {
			leaderAlloc = s.ID
		}
	}
	if leaderAlloc == "" {
		t.Fatalf("the leader %q is none of the job's allocations", holder)
	}
	t.Logf("nomad alloc stop %s (the leader, epoch %d)", leaderAlloc, epoch)
	nomad("alloc", "stop", leaderAlloc)
	nomadtest.Eventually(t, 2*time.Minute, "another replica leading", func() bool {
		e, h := leader(t, base.databaseURL)
		return e > epoch && !strings.HasSuffix(h, leaderAlloc)
	})
	openWorkbench(t, c, ws, "/home/coder")
	// The new leader acts: the workspace stops and starts again.
	c.setDesired(ws.ID, "STANDBY")
	c.settle(ws.ID, "STANDBY", time.Now())
	c.setDesired(ws.ID, "RUNNING")
	c.settle(ws.ID, "RUNNING", time.Now())
	openWorkbench(t, c, ws, "/home/coder")
	healthyServers(t, cluster.Client, image1)
	wsAlloc, wsVersion = workspaceAlloc(t, cluster.Client, ws.ID)

	// A new image rolls through, one replica at a time. Every leader term
	// has one holder, and the workspace is left alone.
	var mu sync.Mutex
	terms := map[int64]string{}
	ctx, stopWatch := context.WithCancel(t.Context())
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		for ctx.Err() == nil {
			e, h, err := readLeader(base.databaseURL)
			if err != nil {
				t.Errorf("read the leader: %v", err)
				return
			}
			mu.Lock()
			if prev, ok := terms[e]; ok && prev != h {
				t.Errorf("leader term %d held by %q and %q", e, prev, h)
			}
			terms[e] = h
			mu.Unlock()
			time.Sleep(100 * time.Millisecond)
		}
	}()
	t.Logf("nomad job run -var-file %s -var image=%s %s", vars, image2, jobFile)
	nomad("job", "run", "-var-file", vars, "-var", "image="+image2, jobFile)
	healthyServers(t, cluster.Client, image2)
	stopWatch()
	<-watched
	if alloc, version := workspaceAlloc(t, cluster.Client, ws.ID); alloc != wsAlloc || version != wsVersion {
		t.Errorf("the workspace's job changed during the roll: allocation %s version %d, was %s version %d", alloc, version, wsAlloc, wsVersion)
	}
	c.settle(ws.ID, "RUNNING", time.Now())
	openWorkbench(t, c, ws, "/home/coder")
	mu.Lock()
	t.Logf("leader terms during the roll: %v", terms)
	mu.Unlock()
}

// buildImage runs `make image`'s script with the engine as DOCKER_HOST and
// returns the image it loaded there.
func buildImage(t *testing.T, engine dockerEngine, version string) string {
	t.Helper()
	cmd := exec.Command(filepath.Join("..", "scripts", "image.sh"), version, "codehub")
	cmd.Env = append(os.Environ(), "DOCKER_HOST="+engine.endpoint)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("scripts/image.sh %s: %v\n%s", version, err, out)
	}
	t.Cleanup(func() { os.Remove(filepath.Join("..", "bin", "codehub-image-"+version+".tar")) })
	return "codehub:" + version
}

// documentedPolicy is the policy block docs/nomad.md documents.
func documentedPolicy(t *testing.T) string {
	t.Helper()
	doc, err := os.ReadFile("../docs/nomad.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, found := strings.Cut(string(doc), "```hcl\n# codehub-control-plane.policy.hcl\n")
	policy, _, closed := strings.Cut(rest, "\n```")
	if !found || !closed {
		t.Fatal("docs/nomad.md has no closed policy block")
	}
	return policy + "\n"
}

// documentedPolicyToken creates the policy docs/nomad.md documents and
// returns the secret of a client token holding it alone.
func documentedPolicyToken(t *testing.T, client *api.Client) string {
	t.Helper()
	if _, err := client.ACLPolicies().Upsert(&api.ACLPolicy{Name: "codehub", Rules: documentedPolicy(t)}, nil); err != nil {
		t.Fatal(err)
	}
	token, _, err := client.ACLTokens().Create(&api.ACLToken{Name: "codehub", Type: "client", Policies: []string{"codehub"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return token.SecretID
}

// healthyServers waits until the codehub job runs two allocations of image,
// both healthy in their deployment and nothing else, and returns them.
func healthyServers(t *testing.T, client *api.Client, image string) []*api.AllocationListStub {
	t.Helper()
	var healthy []*api.AllocationListStub
	nomadtest.Eventually(t, 5*time.Minute, "two healthy codehub allocations of "+image, func() bool {
		allocs, _, err := client.Jobs().Allocations("codehub", false, nil)
		if err != nil {
			return false
		}
		job, _, err := client.Jobs().Info("codehub", nil)
		if err != nil || job.TaskGroups[0].Tasks[0].Config["image"] != image {
			return false
		}
		healthy = healthy[:0]
		for _, a := range allocs {
			if a.ClientStatus != api.AllocClientStatusRunning && a.ClientStatus != api.AllocClientStatusPending {
				continue
			}
			if a.JobVersion != *job.Version || a.DeploymentStatus == nil || a.DeploymentStatus.Healthy == nil || !*a.DeploymentStatus.Healthy {
				return false
			}
			healthy = append(healthy, a)
		}
		return len(healthy) == 2
	})
	return slices.Clone(healthy)
}

// workspaceAlloc returns the running allocation of the workspace's job and
// the job's version.
func workspaceAlloc(t *testing.T, client *api.Client, wsID string) (string, uint64) {
	t.Helper()
	job, _, err := client.Jobs().Info("ws-"+wsID, nil)
	if err != nil {
		t.Fatal(err)
	}
	allocs, _, err := client.Jobs().Allocations("ws-"+wsID, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range allocs {
		if a.ClientStatus == api.AllocClientStatusRunning {
			return a.ID, *job.Version
		}
	}
	t.Fatalf("workspace %s has no running allocation", wsID)
	return "", 0
}

// leader returns the current leader term and its holder.
func leader(t *testing.T, databaseURL string) (int64, string) {
	t.Helper()
	epoch, holder, err := readLeader(databaseURL)
	if err != nil {
		t.Fatal(err)
	}
	return epoch, holder
}

func readLeader(databaseURL string) (int64, string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, databaseURL)
	if err != nil {
		return 0, "", err
	}
	defer conn.Close(ctx)
	var epoch int64
	var holder string
	err = conn.QueryRow(ctx, `SELECT epoch, holder FROM coordinator_epoch`).Scan(&epoch, &holder)
	return epoch, holder, err
}

// TestPackMatchesDeployJob renders packs/codehub with nomad-pack and
// deploy/codehub.nomad.hcl with the nomad CLI, with the same values (the
// required ones alone, then every variable set), and finds the same job,
// as Nomad parses both: the pack and the job file never drift. Their
// variables are the same text.
func TestPackMatchesDeployJob(t *testing.T) {
	nomadBin := nomadtest.Binary(t)
	packBin, err := exec.LookPath("nomad-pack")
	if err != nil {
		t.Skip("no nomad-pack binary on PATH: the pack render test needs one")
	}
	jobFile, err := os.ReadFile(filepath.Join("..", "deploy", "codehub.nomad.hcl"))
	if err != nil {
		t.Fatal(err)
	}
	packVars, err := os.ReadFile(filepath.Join("..", "packs", "codehub", "variables.hcl"))
	if err != nil {
		t.Fatal(err)
	}
	start, end := strings.Index(string(jobFile), `variable "image"`), strings.Index(string(jobFile), `job "codehub"`)
	if start < 0 || end < start || strings.TrimSpace(string(jobFile[start:end])) != strings.TrimSpace(string(packVars)) {
		t.Fatal("packs/codehub/variables.hcl is not the variables of deploy/codehub.nomad.hcl")
	}

	dir := t.TempDir()
	for name, values := range map[string]string{
		"required": `image       = "registry.internal/codehub:1.0.0"
public_url  = "https://codehub.example.com"
s3_endpoint = "minio.internal:9000"
`,
		"every variable": `image                  = "registry.internal/codehub:1.2.3"
count                  = 3
datacenters            = ["dc1", "dc2"]
public_url             = "https://dev.example.org"
listen_host            = "127.0.0.1"
network_mode           = "host"
nomad_address          = "https://nomad.internal:4646"
s3_endpoint            = "s3.internal:443"
s3_bucket              = "homes"
s3_use_ssl             = false
workspace_driver       = "exec"
workspace_network_mode = "host"
config                 = <<-EOT
  workspace {
    command = "/usr/bin/code-server"
    args    = ["--bind-addr", "127.0.0.1:%PORT%"]
  }

  limits {
    max_running_per_user = 3
  }
EOT
`,
	} {
		t.Run(name, func(t *testing.T) {
			vars := filepath.Join(dir, strings.ReplaceAll(name, " ", "-")+".vars.hcl")
			if err := os.WriteFile(vars, []byte(values), 0o600); err != nil {
				t.Fatal(err)
			}
			out := filepath.Join(dir, strings.ReplaceAll(name, " ", "-"))
			pack, err := filepath.Abs(filepath.Join("..", "packs", "codehub"))
			if err != nil {
				t.Fatal(err)
			}
			cmd := exec.Command(packBin, "render", pack, "--var-file", vars, "--to-dir", out, "--auto-approve")
			// nomad-pack keeps a cache under HOME.
			cmd.Env = append(os.Environ(), "HOME="+dir)
			if b, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("nomad-pack render: %v\n%s", err, b)
			}
			rendered := filepath.Join(out, "codehub", "codehub.nomad")
			fromPack := parseJob(t, nomadBin, rendered)
			fromFile := parseJob(t, nomadBin, "-var-file", vars, filepath.Join("..", "deploy", "codehub.nomad.hcl"))
			if fromPack != fromFile {
				t.Errorf("the pack renders another job than the job file:\npack: %s\nfile: %s", fromPack, fromFile)
			}
		})
	}
}

// parseJob is the job Nomad's CLI parses from args, as JSON.
func parseJob(t *testing.T, nomadBin string, args ...string) string {
	t.Helper()
	cmd := exec.Command(nomadBin, append([]string{"job", "run", "-output"}, args...)...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("nomad job run -output %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return string(out)
}
