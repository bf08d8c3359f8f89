package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"
	"github.com/jackc/pgx/v5"
	"github.com/minio/minio-go/v7"

	"github.com/codehub-io/codehub/internal/nomadtest"
	"github.com/codehub-io/codehub/internal/testenv"
)

type doctorFinding struct {
	Check, Status, Detail, Fix, Doc string
}

type doctorReport struct {
	OK       bool
	Findings []doctorFinding
}

func (r doctorReport) find(check string) (doctorFinding, bool) {
	for _, f := range r.Findings {
		if f.Check == check {
			return f, true
		}
	}
	return doctorFinding{}, false
}

// runDoctor runs `codehub doctor -config FILE -json` on a configuration
// file and returns its report and exit status.
func runDoctor(t *testing.T, cfgText string) (doctorReport, int) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "codehub.hcl")
	if err := os.WriteFile(path, []byte(cfgText), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, codehubBinary(t), "doctor", "-config", path, "-json")
	cmd.Env = append(os.Environ(), "NOMAD_TOKEN=", "NOMAD_ADDR=")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	code := 0
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		code = exit.ExitCode()
	case err != nil:
		t.Fatalf("codehub doctor: %v\n%s", err, stderr.String())
	}
	var r doctorReport
	if err := json.Unmarshal(out, &r); err != nil {
		t.Fatalf("codehub doctor -json printed no report (%v): %s\n%s", err, out, stderr.String())
	}
	return r, code
}

// TestNomadDoctor runs `codehub doctor` as an operator would, from a
// configuration file, against a real Nomad cluster that enforces ACLs,
// with the token of docs/nomad.md's policy, and the real PostgreSQL, Redis
// and S3. The working set-up passes and the doctor leaves nothing behind in
// Nomad or S3; then each broken set-up of the table, one per check, fails
// the check it should, says what to change with a link into the docs, and
// exits 1.
func TestNomadDoctor(t *testing.T) {
	cluster := nomadtest.StartClusterWith(t, nomadtest.ClusterOptions{ACL: true, ClientConfig: `
plugin "docker" {
  config {
    endpoint = "unix:///nonexistent/docker.sock"
  }
}
`}, "node-a")
	base := serverConfig{databaseURL: testenv.PostgresURL(t), redisURL: testenv.RedisURL(t), s3: testenv.NewS3(t)}
	migrate(t, base)
	token := documentedPolicyToken(t, cluster.Client)

	type setup struct {
		serverConfig
		nomadAddr, token, nomadExtra, driver string
		publicURL                            string
	}
	good := setup{serverConfig: base, nomadAddr: cluster.Addr, token: token, driver: "raw_exec"}
	render := func(s setup) string {
		srv := &server{url: s.publicURL, dataDir: t.TempDir()}
		if srv.url == "" {
			srv.url = "http://127.0.0.1:1"
		}
		workspace := `workspace {
  command = "/bin/sleep"
}
`
		if s.driver == "docker" {
			workspace = `workspace {
  image = "codehub-doctor-image:1"
}
`
		}
		s.backend = fmt.Sprintf(`backend "nomad" {
  address = %q
  token   = %q
  driver  = %q
%s}

%s`, s.nomadAddr, s.token, s.driver, s.nomadExtra, workspace)
		return renderConfig(srv, 1, s.serverConfig)
	}

	// Before any allocation runs, the two capabilities a client answers
	// cannot be tried: they are said to be untried, not passed.
	r, code := runDoctor(t, render(good))
	for _, c := range []string{"nomad.capability.read-logs", "nomad.capability.alloc-lifecycle"} {
		if f, _ := r.find(c); f.Status != "skip" {
			t.Errorf("%s with no allocation: %+v", c, f)
		}
	}
	if code != 0 {
		t.Fatalf("the working set-up exits %d: %+v", code, r)
	}

	// A running allocation lets every capability be tried.
	sleeper := sleeperJob()
	if _, _, err := cluster.Client.Jobs().Register(sleeper, nil); err != nil {
		t.Fatal(err)
	}
	nomadtest.Eventually(t, time.Minute, "the sleeper runs", func() bool {
		allocs, _, err := cluster.Client.Jobs().Allocations(*sleeper.ID, false, nil)
		return err == nil && len(allocs) == 1 && allocs[0].ClientStatus == api.AllocClientStatusRunning
	})
	r, code = runDoctor(t, render(good))
	if code != 0 || !r.OK {
		t.Fatalf("the working set-up exits %d: %+v", code, r)
	}
	for _, f := range r.Findings {
		t.Logf("%-40s %-5s %s", f.Check, f.Status, f.Detail)
		switch {
		case f.Status == "fail":
			t.Errorf("%s fails on the working set-up: %s", f.Check, f.Detail)
		case strings.HasPrefix(f.Check, "nomad.") && f.Status != "ok":
			t.Errorf("%s is %s on the working set-up: %s", f.Check, f.Status, f.Detail)
		}
	}
	for _, c := range []string{"nomad", "nomad.version", "nomad.acls", "nomad.token", "nomad.driver", "nomad.volume_plugin",
		"nomad.capability.submit-job", "nomad.capability.host_volume.mount-readwrite", "nomad.capability.read-logs",
		"nomad.capability.alloc-lifecycle", "postgres", "postgres.schema", "redis", "s3", "s3.write", "clock.nomad", "clock.postgres", "public_url"} {
		if f, ok := r.find(c); !ok || f.Status != "ok" {
			t.Errorf("%s on the working set-up: %+v", c, f)
		}
	}
	assertDoctorLeftNothing(t, cluster.Client, base, *sleeper.ID)

	// The same capability probes refused: the token of a policy that lacks
	// one right at a time.
	policy := documentedPolicy(t)
	withoutLine := func(capability string) string {
		var kept []string
		for _, line := range strings.Split(policy, "\n") {
			if !strings.Contains(line, `"`+capability+`",`) {
				kept = append(kept, line)
			}
		}
		return strings.Join(kept, "\n")
	}
	lacking := func(name, rules string) string {
		if _, err := cluster.Client.ACLPolicies().Upsert(&api.ACLPolicy{Name: name, Rules: rules}, nil); err != nil {
			t.Fatalf("policy %s: %v", name, err)
		}
		tok, _, err := cluster.Client.ACLTokens().Create(&api.ACLToken{Name: name, Type: "client", Policies: []string{name}}, nil)
		if err != nil {
			t.Fatal(err)
		}
		return tok.SecretID
	}

	s3Denied := base
	s3Denied.s3.SecretKey = "not-the-secret"
	noPostgres := base
	noPostgres.databaseURL = fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", testenv.FreePort(t))
	newerSchema := base
	newerSchema.databaseURL = testenv.PostgresURL(t)
	migrate(t, newerSchema)
	markNewerSchema(t, newerSchema.databaseURL)
	noRedis := base
	noRedis.redisURL = fmt.Sprintf("redis://127.0.0.1:%d/0", testenv.FreePort(t))
	wildcard := base
	wildcard.subdomainBase = "ws.codehub-doctor.invalid"
	untrusted := httptest.NewTLSServer(http.NotFoundHandler())
	defer untrusted.Close()
	noACLs := nomadtest.Start(t, "", "raw_exec")

	for _, c := range []struct {
		name, check string
		setup       setup
	}{
		{"nomad unreachable", "nomad", setup{serverConfig: base, nomadAddr: fmt.Sprintf("http://127.0.0.1:%d", testenv.FreePort(t)), token: token, driver: "raw_exec"}},
		{"acls not enforced", "nomad.acls", setup{serverConfig: base, nomadAddr: noACLs.Addr, driver: "raw_exec"}},
		{"unknown token", "nomad.token", setup{serverConfig: base, nomadAddr: cluster.Addr, token: "6f2e6b8c-58b6-4c0e-9b1c-7d2f4e1a9c00", driver: "raw_exec"}},
		{"no list-jobs", "nomad.capability.list-jobs", setup{serverConfig: base, nomadAddr: cluster.Addr, token: lacking("no-list-jobs", withoutLine("list-jobs")), driver: "raw_exec"}},
		{"no read-job", "nomad.capability.read-job", setup{serverConfig: base, nomadAddr: cluster.Addr, token: lacking("no-read-job", withoutLine("read-job")), driver: "raw_exec"}},
		{"no submit-job", "nomad.capability.submit-job", setup{serverConfig: base, nomadAddr: cluster.Addr, token: lacking("no-submit-job", withoutLine("submit-job")), driver: "raw_exec"}},
		{"no read-logs", "nomad.capability.read-logs", setup{serverConfig: base, nomadAddr: cluster.Addr, token: lacking("no-read-logs", withoutLine("read-logs")), driver: "raw_exec"}},
		{"no alloc-lifecycle", "nomad.capability.alloc-lifecycle", setup{serverConfig: base, nomadAddr: cluster.Addr, token: lacking("no-alloc-lifecycle", withoutLine("alloc-lifecycle")), driver: "raw_exec"}},
		{"no host-volume-create", "nomad.capability.host-volume-create", setup{serverConfig: base, nomadAddr: cluster.Addr, token: lacking("no-host-volume-create", withoutLine("host-volume-create")), driver: "raw_exec"}},
		{"no host-volume-delete", "nomad.capability.host-volume-delete", setup{serverConfig: base, nomadAddr: cluster.Addr, token: lacking("no-host-volume-delete", strings.Replace(policy, `"host-volume-delete",`, "", 1)), driver: "raw_exec"}},
		{"no variable write", "nomad.capability.variables.write", setup{serverConfig: base, nomadAddr: cluster.Addr, token: lacking("no-var-write", strings.Replace(policy, `["write", "destroy"]`, `["destroy"]`, 1)), driver: "raw_exec"}},
		{"no variable destroy", "nomad.capability.variables.destroy", setup{serverConfig: base, nomadAddr: cluster.Addr, token: lacking("no-var-destroy", strings.Replace(policy, `["write", "destroy"]`, `["write"]`, 1)), driver: "raw_exec"}},
		{"no node read", "nomad.capability.node.read", setup{serverConfig: base, nomadAddr: cluster.Addr, token: lacking("no-node-read", strings.Replace(policy, `policy = "read"`, `policy = "deny"`, 1)), driver: "raw_exec"}},
		{"volume mount read-only", "nomad.capability.host_volume.mount-readwrite", setup{serverConfig: base, nomadAddr: cluster.Addr, token: lacking("ro-volumes", strings.Replace(policy, `["mount-readwrite"]`, `["mount-readonly"]`, 1)), driver: "raw_exec"}},
		{"driver not on the nodes", "nomad.driver", setup{serverConfig: base, nomadAddr: cluster.Addr, token: token, driver: "docker", nomadExtra: "  job_image = \"codehub:doctor\"\n"}},
		{"node pool without nodes", "nomad.driver", setup{serverConfig: base, nomadAddr: cluster.Addr, token: token, driver: "raw_exec", nomadExtra: "  node_pool = \"gpu\"\n"}},
		{"volume plugin not installed", "nomad.volume_plugin", setup{serverConfig: base, nomadAddr: cluster.Addr, token: token, driver: "raw_exec", nomadExtra: "  volume_plugin = \"codehub-doctor-nfs\"\n"}},
		{"postgres unreachable", "postgres", setup{serverConfig: noPostgres, nomadAddr: cluster.Addr, token: token, driver: "raw_exec"}},
		{"schema of a newer release", "postgres.schema", setup{serverConfig: newerSchema, nomadAddr: cluster.Addr, token: token, driver: "raw_exec"}},
		{"redis unreachable", "redis", setup{serverConfig: noRedis, nomadAddr: cluster.Addr, token: token, driver: "raw_exec"}},
		{"s3 refuses the keys", "s3", setup{serverConfig: s3Denied, nomadAddr: cluster.Addr, token: token, driver: "raw_exec"}},
		{"public host does not resolve", "public_url", setup{serverConfig: base, nomadAddr: cluster.Addr, token: token, driver: "raw_exec", publicURL: "https://codehub.codehub-doctor.invalid"}},
		{"certificate not trusted", "public_url.tls", setup{serverConfig: base, nomadAddr: cluster.Addr, token: token, driver: "raw_exec", publicURL: untrusted.URL}},
		{"wildcard does not resolve", "subdomain.wildcard", setup{serverConfig: wildcard, nomadAddr: cluster.Addr, token: token, driver: "raw_exec"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			r, code := runDoctor(t, render(c.setup))
			f, ok := r.find(c.check)
			if !ok || f.Status != "fail" || f.Fix == "" || !strings.HasPrefix(f.Doc, "docs/") {
				t.Errorf("%s: %+v (found %v) in %+v", c.check, f, ok, r.Findings)
			}
			if code != 1 || r.OK {
				t.Errorf("exit status %d, ok %v; want 1, false", code, r.OK)
			}
			t.Logf("%s: %s; fix: %s (%s)", f.Check, f.Detail, f.Fix, f.Doc)
		})
	}
	assertDoctorLeftNothing(t, cluster.Client, base, *sleeper.ID)
}

// sleeperJob is a service job that only runs, so that an allocation
// exists to try the client's capabilities on.
func sleeperJob() *api.Job {
	job := api.NewServiceJob("sleeper", "sleeper", "global", 50)
	job.Datacenters = []string{"*"}
	tg := api.NewTaskGroup("sleeper", 1)
	task := api.NewTask("sleeper", "raw_exec")
	task.Config = map[string]any{"command": "/bin/sleep", "args": []string{"600"}}
	task.Require(&api.Resources{CPU: new(50), MemoryMB: new(32)})
	tg.AddTask(task)
	job.AddTaskGroup(tg)
	return job
}

// assertDoctorLeftNothing checks that the doctor's probes made nothing:
// no job but the sleeper, no volume, no variable, no object in S3.
func assertDoctorLeftNothing(t *testing.T, client *api.Client, cfg serverConfig, keep string) {
	t.Helper()
	jobs, _, err := client.Jobs().List(nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, j := range jobs {
		if j.ID != keep {
			t.Errorf("the doctor left job %s (%s)", j.ID, j.Status)
		}
	}
	vols, _, err := client.HostVolumes().List(&api.HostVolumeListRequest{}, nil)
	if err != nil || len(vols) != 0 {
		t.Errorf("the doctor left volumes %v (%v)", vols, err)
	}
	vars, _, err := client.Variables().List(nil)
	if err != nil || len(vars) != 0 {
		t.Errorf("the doctor left variables %v (%v)", vars, err)
	}
	for o := range cfg.s3.Client.ListObjects(t.Context(), cfg.s3.Bucket, minio.ListObjectsOptions{Recursive: true}) {
		t.Errorf("the doctor left an object in S3: %s %v", o.Key, o.Err)
	}
}

// migrate brings the database of cfg to this release's schema with
// `codehub migrate`, as an operator would before the first start.
func migrate(t *testing.T, cfg serverConfig) {
	t.Helper()
	srv := &server{url: "http://127.0.0.1:1", dataDir: t.TempDir()}
	path := filepath.Join(t.TempDir(), "codehub.hcl")
	if err := os.WriteFile(path, []byte(renderConfig(srv, 1, cfg)), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(codehubBinary(t), "migrate", "-config", path).CombinedOutput(); err != nil {
		t.Fatalf("codehub migrate: %v\n%s", err, out)
	}
}

// markNewerSchema records a migration this release does not have, as a
// newer release's migrate would.
func markNewerSchema(t *testing.T, databaseURL string) {
	t.Helper()
	conn, err := pgx.Connect(t.Context(), databaseURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(t.Context())
	if _, err := conn.Exec(t.Context(), "INSERT INTO schema_migrations (version, name) VALUES (9999, '9999_from_a_newer_release.sql')"); err != nil {
		t.Fatal(err)
	}
}
