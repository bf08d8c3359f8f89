package nomad

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/codehub-io/codehub/archive"
	"github.com/codehub-io/codehub/controller"
	"github.com/codehub-io/codehub/workspace"
)

const testWS = "01jb3x7k9q2m5n8p4r6s0t1v2w"

// volumeFixture serves one ready volume for testWS with the given claims.
func volumeFixture(f *fakeNomad, claims []*api.AllocationListStub) {
	f.json("GET /v1/volumes", []*api.HostVolumeStub{{ID: "vol-1", Name: controller.VolumeName(testWS), State: api.HostVolumeStateReady}})
	f.json("GET /v1/volume/host/vol-1", &api.HostVolume{
		ID: "vol-1", Name: controller.VolumeName(testWS), State: api.HostVolumeStateReady,
		HostPath: "/var/nomad/host_volumes/vol-1", Allocations: claims,
	})
}

var jobName = regexp.MustCompile(`(?m)^job "([^"]+)"`)

// parseFixture answers /v1/jobs/parse like the server: a job named as in the HCL.
func parseFixture(f *fakeNomad) {
	f.handle("PUT /v1/jobs/parse", func(w http.ResponseWriter, r *http.Request) {
		var req api.JobsParseRequest
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		m := jobName.FindStringSubmatch(req.JobHCL)
		if m == nil {
			http.Error(w, "no job block", http.StatusBadRequest)
			return
		}
		_ = json.NewEncoder(w).Encode(&api.Job{ID: &m[1], Name: &m[1]})
	})
	f.json("PUT /v1/jobs", &api.JobRegisterResponse{EvalID: "eval-1"})
}

func TestProvisionVolume(t *testing.T) {
	f := newFakeNomad(t)
	f.json("GET /v1/volumes", []*api.HostVolumeStub{})
	f.json("PUT /v1/volume/host/create", &api.HostVolumeCreateResponse{Volume: &api.HostVolume{ID: "vol-1"}})
	f.json("GET /v1/nodes", []*api.NodeListStub{{ID: "n1", Name: "node-1", Status: api.NodeStatusReady,
		SchedulingEligibility: api.NodeSchedulingEligible, NodePool: "default", Datacenter: "dc1"}})
	b := newTestBackend(t, f, testOptions())

	if err := b.ProvisionVolume(t.Context(), controller.VolumeSpec{WorkspaceID: testWS, UID: 1000, GID: 1001}); err != nil {
		t.Fatal(err)
	}
	creates := f.calls("PUT /v1/volume/host/create")
	if len(creates) != 1 {
		t.Fatalf("%d create calls, want 1", len(creates))
	}
	var req api.HostVolumeCreateRequest
	if err := json.Unmarshal([]byte(creates[0].Body), &req); err != nil {
		t.Fatal(err)
	}
	v := req.Volume
	if v.Name != controller.VolumeName(testWS) || v.PluginID != "mkdir" || v.NodePool != "default" || v.Namespace != "default" || v.NodeID != "n1" {
		t.Errorf("volume = %+v", v)
	}
	if v.Parameters["uid"] != "1000" || v.Parameters["gid"] != "1001" {
		t.Errorf("parameters = %v, want the workspace uid/gid", v.Parameters)
	}
	if len(v.RequestedCapabilities) == 0 || v.RequestedCapabilities[0].AccessMode != api.HostVolumeAccessModeSingleNodeWriter {
		t.Errorf("capabilities = %+v", v.RequestedCapabilities)
	}

	// An existing volume of that name is kept: no second create.
	volumeFixture(f, nil)
	if err := b.ProvisionVolume(t.Context(), controller.VolumeSpec{WorkspaceID: testWS, UID: 1000, GID: 1000}); err != nil {
		t.Fatal(err)
	}
	if n := len(f.calls("PUT /v1/volume/host/create")); n != 1 {
		t.Errorf("%d create calls after the volume existed, want 1", n)
	}
}

func TestDeleteVolume(t *testing.T) {
	t.Run("claimed volume is in use", func(t *testing.T) {
		f := newFakeNomad(t)
		volumeFixture(f, []*api.AllocationListStub{{ID: "a1", ClientStatus: "running"}})
		err := newTestBackend(t, f, testOptions()).DeleteVolume(t.Context(), testWS, "vol-1")
		if !errors.Is(err, controller.ErrVolumeInUse) {
			t.Fatalf("err = %v, want ErrVolumeInUse", err)
		}
		if n := len(f.calls("DELETE /v1/volume/host/vol-1")); n != 0 {
			t.Fatalf("%d delete calls on a claimed volume", n)
		}
	})
	t.Run("unclaimed volume is deleted", func(t *testing.T) {
		f := newFakeNomad(t)
		volumeFixture(f, nil)
		f.json("DELETE /v1/volume/host/vol-1", struct{}{})
		if err := newTestBackend(t, f, testOptions()).DeleteVolume(t.Context(), testWS, "vol-1"); err != nil {
			t.Fatal(err)
		}
		if n := len(f.calls("DELETE /v1/volume/host/vol-1")); n != 1 {
			t.Fatalf("%d delete calls, want 1", n)
		}
	})
	t.Run("missing volume is done", func(t *testing.T) {
		f := newFakeNomad(t)
		f.handle("GET /v1/volume/host/vol-1", func(w http.ResponseWriter, _ *http.Request) {
			http.Error(w, "volume not found", http.StatusNotFound)
		})
		if err := newTestBackend(t, f, testOptions()).DeleteVolume(t.Context(), testWS, "vol-1"); err != nil {
			t.Fatal(err)
		}
	})
	// The id names what the controller observed; one that now names
	// another workspace's volume is never deleted.
	t.Run("another workspace's volume is refused", func(t *testing.T) {
		f := newFakeNomad(t)
		volumeFixture(f, nil)
		f.json("DELETE /v1/volume/host/vol-1", struct{}{})
		if err := newTestBackend(t, f, testOptions()).DeleteVolume(t.Context(), "01jb3x7k9q2m5n8p4r6s0tother", "vol-1"); err == nil {
			t.Fatal("deleted a volume named for another workspace")
		}
		if n := len(f.calls("DELETE /v1/volume/host/vol-1")); n != 0 {
			t.Fatalf("%d delete calls", n)
		}
	})
}

func TestStartWorkspace(t *testing.T) {
	f := newFakeNomad(t)
	volumeFixture(f, nil)
	parseFixture(f)
	b := newTestBackend(t, f, testOptions())
	spec := controller.WorkspaceSpec{WorkspaceID: testWS, OwnerID: "01owner0000000000000000000"}

	if err := b.StartWorkspace(t.Context(), spec); err != nil {
		t.Fatal(err)
	}
	parses := f.calls("PUT /v1/jobs/parse")
	regs := f.calls("PUT /v1/jobs")
	if len(parses) != 1 || len(regs) != 1 {
		t.Fatalf("%d parse and %d register calls, want 1 each", len(parses), len(regs))
	}
	var parse api.JobsParseRequest
	if err := json.Unmarshal([]byte(parses[0].Body), &parse); err != nil {
		t.Fatal(err)
	}
	var reg api.JobRegisterRequest
	if err := json.Unmarshal([]byte(regs[0].Body), &reg); err != nil {
		t.Fatal(err)
	}
	if reg.Submission == nil || reg.Submission.Source != parse.JobHCL || reg.Submission.Format != "hcl2" {
		t.Fatalf("submission = %+v, want the parsed HCL as hcl2", reg.Submission)
	}
	// No job was read, so only "no such job" may be overwritten: a job
	// another leader registered meanwhile makes this registration fail.
	if !reg.EnforceIndex || reg.JobModifyIndex != 0 {
		t.Errorf("register enforce index %v at %d, want enforced at 0", reg.EnforceIndex, reg.JobModifyIndex)
	}
	for _, want := range []string{
		`job "ws-` + testWS + `"`,
		`HOME = "/var/nomad/host_volumes/vol-1"`,
		`"-listen", "127.0.0.1:${NOMAD_PORT_http}", "-home", "/var/nomad/host_volumes/vol-1"`,
		`"codehub.io/managed"      = "true"`,
		`kill_signal  = "SIGKILL"`,
		`path     = "/healthz"`,
	} {
		if !strings.Contains(parse.JobHCL, want) {
			t.Errorf("rendered HCL lacks %q", want)
		}
	}
	// Without upstream auth no variable is written and the task reads none.
	for _, route := range f.routesCalled() {
		if strings.HasPrefix(route, "PUT /v1/var/") {
			t.Errorf("variable written without an upstream token: %s", route)
		}
	}
	for _, unwanted := range []string{"HASHED_PASSWORD", "nomadVar"} {
		if strings.Contains(parse.JobHCL, unwanted) {
			t.Errorf("rendered HCL has %q without an upstream token", unwanted)
		}
	}

	// The same spec registered and running: starting again is a no-op.
	registered(f, 3, false, parse.JobHCL)
	if err := b.StartWorkspace(t.Context(), spec); err != nil {
		t.Fatal(err)
	}
	if n := len(f.calls("PUT /v1/jobs")); n != 1 {
		t.Errorf("%d register calls after an unchanged start, want 1", n)
	}
	if got := f.calls("GET /v1/job/ws-" + testWS + "/submission")[0].Query["version"]; len(got) != 1 || got[0] != "3" {
		t.Errorf("submission version query = %v, want 3", got)
	}

	// A stopped job is registered again even from the same source.
	registered(f, 3, true, parse.JobHCL)
	if err := b.StartWorkspace(t.Context(), spec); err != nil {
		t.Fatal(err)
	}
	regs = f.calls("PUT /v1/jobs")
	if len(regs) != 2 {
		t.Fatalf("%d register calls after starting a stopped job, want 2", len(regs))
	}
	if err := json.Unmarshal([]byte(regs[1].Body), &reg); err != nil {
		t.Fatal(err)
	}
	if !reg.EnforceIndex || reg.JobModifyIndex != 103 {
		t.Errorf("re-register enforce index %v at %d, want enforced at the job's 103", reg.EnforceIndex, reg.JobModifyIndex)
	}
	// The volume's host path was read once for the three starts.
	if n := len(f.calls("GET /v1/volume/host/vol-1")); n != 1 {
		t.Errorf("host path read %d times, want once", n)
	}
}

// registered makes the fake report ws-{testWS} at version, submitted from
// hcl, stopped or not.
func registered(f *fakeNomad, version uint64, stopped bool, hcl string) {
	id := jobID(testWS)
	index := 100 + version
	f.json("GET /v1/job/"+id, &api.Job{ID: &id, Version: &version, Stop: &stopped, JobModifyIndex: &index})
	f.json("GET /v1/job/"+id+"/submission", &api.JobSubmission{Source: hcl, Format: "hcl2"})
}

func TestStartWorkspaceWritesUpstreamToken(t *testing.T) {
	f := newFakeNomad(t)
	volumeFixture(f, nil)
	parseFixture(f)
	varRoute := "PUT /v1/var/nomad/jobs/ws-" + testWS
	f.json(varRoute, &api.Variable{})
	f.json("PUT /v1/var/"+stopVariablePath(testWS), &api.Variable{})
	opts := testOptions()
	opts.Workspace.UpstreamAuth = true
	var asked []string
	opts.UpstreamToken = func(id, run string) string {
		asked = append(asked, id+"/"+run)
		return "tok-" + id + "-" + run + "-never-in-hcl"
	}
	token := "tok-" + testWS + "-run1-never-in-hcl"
	b := newTestBackend(t, f, opts)
	spec := controller.WorkspaceSpec{WorkspaceID: testWS, RunID: "run1", OwnerID: "01owner0000000000000000000"}

	if err := b.StartWorkspace(t.Context(), spec); err != nil {
		t.Fatal(err)
	}
	if len(asked) == 0 || asked[0] != testWS+"/run1" {
		t.Fatalf("token asked for %v, want %s/run1", asked, testWS)
	}
	vars := f.calls(varRoute)
	if len(vars) != 1 {
		t.Fatalf("%d variable writes, want 1", len(vars))
	}
	v := writtenVariable(t, vars[0])
	if len(v.Items) != 1 || v.Items["token"] != token || v.Namespace != "default" {
		t.Fatalf("variable = %+v, want namespace default and only the token item", v)
	}
	// The task's template blocks until its variable exists.
	if order := f.routesInOrder(); indexOf(order, varRoute) > indexOf(order, "PUT /v1/jobs") {
		t.Fatalf("job registered before its token was written: %v", order)
	}
	// The stop-archive task's own variable: the S3 keys and the run whose
	// stop it archives, written before the job.
	stopRoute := "PUT /v1/var/" + stopVariablePath(testWS)
	stops := f.calls(stopRoute)
	if len(stops) != 1 {
		t.Fatalf("%d stop-archive variable writes, want 1", len(stops))
	}
	sv := writtenVariable(t, stops[0])
	if sv.Items["run"] != "run1" || sv.Items["access_key"] != "AKIA-TEST-ACCESS-KEY" || sv.Items["secret_key"] != "s3cr3t-value-never-in-hcl" {
		t.Fatalf("stop-archive variable = %+v, want the run and the S3 keys", sv.Items)
	}
	if order := f.routesInOrder(); indexOf(order, stopRoute) > indexOf(order, "PUT /v1/jobs") {
		t.Fatalf("job registered before its stop-archive variable was written: %v", order)
	}
	for _, route := range []string{"PUT /v1/jobs/parse", "PUT /v1/jobs"} {
		for _, c := range f.calls(route) {
			if strings.Contains(c.Body, token) {
				t.Errorf("%s body contains the upstream token", route)
			}
		}
	}
	var parse api.JobsParseRequest
	if err := json.Unmarshal([]byte(f.calls("PUT /v1/jobs/parse")[0].Body), &parse); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		`nomadVar "nomad/jobs/ws-` + testWS + `"`,
		`HASHED_PASSWORD={{ .token }}`,
		`destination = "secrets/upstream.env"`,
		`task "stop-archive"`,
		`hook = "poststop"`,
		`ARCHIVE_URL    = "s3://codehub/` + archive.Key(testWS, "run1") + `"`,
		`nomadVarExists "` + stopVariablePath(testWS) + `"`,
	} {
		if !strings.Contains(parse.JobHCL, want) {
			t.Errorf("rendered HCL lacks %q", want)
		}
	}

	// Starting the running spec again writes nothing.
	registered(f, 1, false, parse.JobHCL)
	if err := b.StartWorkspace(t.Context(), spec); err != nil {
		t.Fatal(err)
	}
	if n := len(f.calls("PUT /v1/jobs")); n != 1 {
		t.Errorf("%d register calls after an unchanged start, want 1", n)
	}
	if n := len(f.calls(varRoute)); n != 1 {
		t.Errorf("%d variable writes after an unchanged start, want 1", n)
	}

	// A new run replaces the job, even one still running, with the new
	// token written first: the old program's token opens nothing.
	next := spec
	next.RunID = "run2"
	if err := b.StartWorkspace(t.Context(), next); err != nil {
		t.Fatal(err)
	}
	if n := len(f.calls("PUT /v1/jobs")); n != 2 {
		t.Fatalf("%d register calls after a new run, want 2", n)
	}
	vars = f.calls(varRoute)
	if len(vars) != 2 {
		t.Fatalf("%d variable writes after a new run, want 2", len(vars))
	}
	v = writtenVariable(t, vars[1])
	if v.Items["token"] != "tok-"+testWS+"-run2-never-in-hcl" {
		t.Fatalf("variable after a new run = %+v, want the run's token", v.Items)
	}
	registered(f, 1, false, parse.JobHCL)

	// A token that cannot be written registers nothing.
	registered(f, 1, true, parse.JobHCL)
	f.status(varRoute, http.StatusForbidden, "Permission denied")
	err := b.StartWorkspace(t.Context(), spec)
	assertFailure(t, err, workspace.ReasonBackendError)
	if n := len(f.calls("PUT /v1/jobs")); n != 2 {
		t.Errorf("%d register calls after a failed token write, want 2", n)
	}

	// Upstream auth without tokens is a wiring fault, not a silent open port.
	opts.UpstreamToken = nil
	if err := newTestBackend(t, f, opts).StartWorkspace(t.Context(), spec); !errors.Is(err, errNoTokens) {
		t.Fatalf("start with upstream auth and no tokens: %v, want errNoTokens", err)
	}
	if n := len(f.calls("PUT /v1/jobs")); n != 2 {
		t.Errorf("%d register calls without tokens, want 2", n)
	}
}

// writtenVariable decodes the variable a recorded write carried.
func writtenVariable(t *testing.T, r recorded) api.Variable {
	t.Helper()
	var v api.Variable
	if err := json.Unmarshal([]byte(r.Body), &v); err != nil {
		t.Fatal(err)
	}
	return v
}

func TestStopWorkspaceDoesNotPurge(t *testing.T) {
	f := newFakeNomad(t)
	id := "ws-" + testWS
	running, stopped := false, true
	f.json("GET /v1/job/"+id, &api.Job{ID: &id, Stop: &running})
	f.json("DELETE /v1/job/"+id, &api.JobDeregisterResponse{})
	f.json("DELETE /v1/var/"+stopVariablePath(testWS), nil)
	b := newTestBackend(t, f, testOptions())
	if err := b.StopWorkspace(t.Context(), testWS, controller.StopSave); err != nil {
		t.Fatal(err)
	}
	calls := f.calls("DELETE /v1/job/" + id)
	if len(calls) != 1 || calls[0].Query.Get("purge") == "true" {
		t.Fatalf("stop calls = %+v, want one deregister without purge", calls)
	}
	// A stop codehub asks for keeps the home where it is: the stop-archive
	// task loses its variable before the program is stopped.
	if order := f.routesInOrder(); indexOf(order, "DELETE /v1/var/"+stopVariablePath(testWS)) > indexOf(order, "DELETE /v1/job/"+id) {
		t.Fatalf("job stopped before its stop archive was called off: %v", order)
	}
	// A job stopped already is not stopped again.
	f.json("GET /v1/job/"+id, &api.Job{ID: &id, Stop: &stopped})
	if err := b.StopWorkspace(t.Context(), testWS, controller.StopSave); err != nil {
		t.Fatal(err)
	}
	if n := len(f.calls("DELETE /v1/job/" + id)); n != 1 {
		t.Errorf("%d deregisters after stopping a stopped job, want 1", n)
	}

	// Stopping a job that does not exist is done.
	f2 := newFakeNomad(t)
	if err := newTestBackend(t, f2, testOptions()).StopWorkspace(t.Context(), testWS, controller.StopSave); err != nil {
		t.Fatalf("stop of a missing job: %v", err)
	}
}

// Stopping a finished batch job would make Nomad count its allocation as
// an earlier attempt's, and its result would be lost.
func TestStopJobLeavesAFinishedJob(t *testing.T) {
	id := controller.JobName(testWS, controller.JobArchive)
	for _, tc := range []struct {
		status string
		stops  int
	}{{"dead", 0}, {"running", 1}, {"pending", 1}} {
		t.Run(tc.status, func(t *testing.T) {
			f := newFakeNomad(t)
			f.json("GET /v1/job/"+id, &api.Job{ID: &id, Status: &tc.status})
			f.json("DELETE /v1/job/"+id, &api.JobDeregisterResponse{})
			if err := newTestBackend(t, f, testOptions()).StopJob(t.Context(), testWS, controller.JobArchive); err != nil {
				t.Fatal(err)
			}
			calls := f.calls("DELETE /v1/job/" + id)
			if len(calls) != tc.stops || (tc.stops > 0 && calls[0].Query.Get("purge") == "true") {
				t.Fatalf("stop calls = %+v, want %d without purge", calls, tc.stops)
			}
		})
	}
}

func TestPurgeJob(t *testing.T) {
	t.Run("refuses while an allocation is live", func(t *testing.T) {
		f := newFakeNomad(t)
		f.json("GET /v1/job/ws-"+testWS+"/allocations", []*api.AllocationListStub{{ID: "a1", ClientStatus: "complete"}, {ID: "a2", ClientStatus: "running"}})
		if err := newTestBackend(t, f, testOptions()).PurgeJob(t.Context(), testWS, controller.JobWorkspace); !errors.Is(err, controller.ErrJobLive) {
			t.Fatalf("purge of a job with a running allocation = %v, want ErrJobLive", err)
		}
		if n := len(f.calls("DELETE /v1/job/ws-" + testWS)); n != 0 {
			t.Fatalf("%d deregister calls", n)
		}
		if n := len(f.calls("DELETE /v1/var/nomad/jobs/ws-" + testWS)); n != 0 {
			t.Fatalf("%d variable deletes while an allocation is live", n)
		}
	})
	for _, tc := range []struct {
		name     string
		kind     controller.JobKind
		allocs   []*api.AllocationListStub
		variable bool // whether the job's variable exists
	}{
		{"purges a finished workspace job and its token", controller.JobWorkspace, []*api.AllocationListStub{{ID: "a1", ClientStatus: "complete"}}, true},
		{"a missing variable is already deleted", controller.JobWorkspace, []*api.AllocationListStub{}, false},
		{"purges a finished batch job and its credentials", controller.JobArchive, []*api.AllocationListStub{{ID: "a1", ClientStatus: "failed"}}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeNomad(t)
			id := controller.JobName(testWS, tc.kind)
			f.json("GET /v1/job/"+id+"/allocations", tc.allocs)
			f.json("DELETE /v1/job/"+id, &api.JobDeregisterResponse{})
			if tc.variable {
				f.json("DELETE /v1/var/nomad/jobs/"+id, struct{}{})
			}
			if err := newTestBackend(t, f, testOptions()).PurgeJob(t.Context(), testWS, tc.kind); err != nil {
				t.Fatal(err)
			}
			calls := f.calls("DELETE /v1/job/" + id)
			if len(calls) != 1 || calls[0].Query.Get("purge") != "true" {
				t.Fatalf("purge calls = %+v", calls)
			}
			if n := len(f.calls("DELETE /v1/var/nomad/jobs/" + id)); n != 1 {
				t.Fatalf("%d variable deletes, want 1", n)
			}
		})
	}
}

func TestSubmitArchiveKeepsSecretsOutOfHCL(t *testing.T) {
	f := newFakeNomad(t)
	volumeFixture(f, nil)
	parseFixture(f)
	id := "ws-" + testWS + "-archive"
	f.json("PUT /v1/var/nomad/jobs/"+id, &api.Variable{})
	opts := testOptions()
	b := newTestBackend(t, f, opts)
	job := controller.JobSpec{WorkspaceID: testWS, OpID: "01op0000000000000000000000", ArchiveKey: "archives/" + testWS + "/01op0000000000000000000000/home.tar.zst", Attempt: 2}

	if err := b.SubmitArchive(t.Context(), job); err != nil {
		t.Fatal(err)
	}
	vars := f.calls("PUT /v1/var/nomad/jobs/" + id)
	if len(vars) != 1 {
		t.Fatalf("%d variable writes, want 1", len(vars))
	}
	var v api.Variable
	if err := json.Unmarshal([]byte(vars[0].Body), &v); err != nil {
		t.Fatal(err)
	}
	if v.Items["access_key"] != opts.S3.AccessKey.Reveal() || v.Items["secret_key"] != opts.S3.SecretKey.Reveal() {
		t.Fatalf("variable items = %v, want the S3 keys", v.Items)
	}
	// The variable is written before the job that reads it is submitted.
	if order := f.routesInOrder(); indexOf(order, "PUT /v1/var/nomad/jobs/"+id) > indexOf(order, "PUT /v1/jobs") {
		t.Fatalf("job registered before its credentials were written: %v", order)
	}

	for _, route := range []string{"PUT /v1/jobs/parse", "PUT /v1/jobs"} {
		for _, c := range f.calls(route) {
			for _, secret := range []string{opts.S3.AccessKey.Reveal(), opts.S3.SecretKey.Reveal()} {
				if strings.Contains(c.Body, secret) {
					t.Errorf("%s body contains a secret", route)
				}
			}
		}
	}
	var parse api.JobsParseRequest
	if err := json.Unmarshal([]byte(f.calls("PUT /v1/jobs/parse")[0].Body), &parse); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		`"codehub.io/attempt"      = "2"`,
		`"codehub.io/op-id"        = "01op0000000000000000000000"`,
		`ARCHIVE_URL = "s3://codehub/archives/` + testWS + `/01op0000000000000000000000/home.tar.zst"`,
		`args    = ["job", "archive", "--src", "/var/nomad/host_volumes/vol-1"]`,
		`nomadVar "nomad/jobs/` + id + `"`,
	} {
		if !strings.Contains(parse.JobHCL, want) {
			t.Errorf("archive HCL lacks %q", want)
		}
	}
}

func (f *fakeNomad) routesInOrder() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]string, len(f.requests))
	for i, r := range f.requests {
		out[i] = r.Method + " " + r.Path
	}
	return out
}

func indexOf(list []string, s string) int {
	for i, v := range list {
		if v == s {
			return i
		}
	}
	return -1
}

func TestActuatorFailures(t *testing.T) {
	f := newFakeNomad(t)
	volumeFixture(f, nil)
	f.status("PUT /v1/jobs/parse", http.StatusBadRequest, "1:1: invalid HCL")
	f.status("PUT /v1/volume/host/create", http.StatusServiceUnavailable, "no leader")
	b := newTestBackend(t, f, testOptions())

	err := b.StartWorkspace(t.Context(), controller.WorkspaceSpec{WorkspaceID: testWS})
	assertFailure(t, err, workspace.ReasonBackendError)

	f.json("GET /v1/volumes", []*api.HostVolumeStub{})
	f.json("GET /v1/nodes", []*api.NodeListStub{{ID: "n1", Name: "node-1", Status: api.NodeStatusReady,
		SchedulingEligibility: api.NodeSchedulingEligible, NodePool: "default", Datacenter: "dc1"}})
	err = b.ProvisionVolume(t.Context(), controller.VolumeSpec{WorkspaceID: testWS, UID: 1, GID: 1})
	assertFailure(t, err, workspace.ReasonUnreachable)
}

// TestStartWorkspaceAfterCrash: a workspace job that nothing runs any more
// (dead after its allocation failed, or stopped) is purged before it is
// registered again, since Nomad would keep the failed allocation in place
// of a new one; a stopped job whose task is still being killed is not.
func TestStartWorkspaceAfterCrash(t *testing.T) {
	spec := controller.WorkspaceSpec{WorkspaceID: testWS, OwnerID: "01owner0000000000000000000"}
	id := jobID(testWS)
	for _, tc := range []struct {
		name      string
		status    string
		stopped   bool
		allocs    []*api.AllocationListStub
		wantPurge bool
	}{
		{"dead after a crash", "dead", false, []*api.AllocationListStub{{ID: "a1", ClientStatus: "failed", DesiredStatus: "run"}}, true},
		{"stopped and gone", "dead", true, []*api.AllocationListStub{{ID: "a1", ClientStatus: "complete", DesiredStatus: "stop"}}, true},
		{"stopped, task still being killed", "running", true, []*api.AllocationListStub{{ID: "a1", ClientStatus: "running", DesiredStatus: "stop"}}, false},
	} {
		// With the mirror or without, the job and its allocations are
		// read: a purge cannot be made conditional on what was judged.
		for _, mirrored := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/mirrored=%v", tc.name, mirrored), func(t *testing.T) {
				f, b, hcl := startFixture(t, spec)
				version, typ := uint64(0), api.JobTypeService
				f.json("GET /v1/job/"+id, &api.Job{ID: &id, Type: &typ, Version: &version, Stop: &tc.stopped, Status: &tc.status})
				f.json("GET /v1/job/"+id+"/submission", &api.JobSubmission{Source: hcl, Format: "hcl2"})
				f.json("GET /v1/job/"+id+"/allocations", tc.allocs)
				f.json("DELETE /v1/job/"+id, &api.JobDeregisterResponse{})
				if mirrored {
					for _, a := range tc.allocs {
						a.JobID = id
					}
					installMirror(b, listing{
						jobs:   []*api.JobListStub{{ID: id, Type: typ, Stop: tc.stopped, Status: tc.status, JobModifyIndex: 90}},
						allocs: tc.allocs,
					})
				}

				if err := b.StartWorkspace(t.Context(), spec); err != nil {
					t.Fatal(err)
				}
				if n := len(f.calls("GET /v1/job/" + id)); n != 1 {
					t.Errorf("the job read %d times, want 1", n)
				}
				if n := len(f.calls("GET /v1/job/" + id + "/allocations")); n != 1 {
					t.Errorf("allocations listed %d times, want 1", n)
				}
				purges := 0
				for _, c := range f.calls("DELETE /v1/job/" + id) {
					if c.Query.Get("purge") == "true" {
						purges++
					}
				}
				if tc.wantPurge && purges != 1 {
					t.Errorf("%d purges, want 1 before registering again", purges)
				}
				if !tc.wantPurge && purges != 0 {
					t.Errorf("%d purges of a job with a live allocation", purges)
				}
				if n := len(f.calls("PUT /v1/jobs")); n != 1 {
					t.Fatalf("%d register calls, want 1", n)
				}
				if order := f.routesInOrder(); tc.wantPurge && indexOf(order, "DELETE /v1/job/"+id) > indexOf(order, "PUT /v1/jobs") {
					t.Errorf("registered before the purge: %v", order)
				}
			})
		}
	}
}

// TestStartWorkspaceBehindTheMirror: a mirror that still shows the job
// stopped while Nomad holds a newer registration of it (one whose answer
// was lost, say) leads to no purge, which would delete that registration
// and the allocation it placed, and to no second registration.
func TestStartWorkspaceBehindTheMirror(t *testing.T) {
	spec := controller.WorkspaceSpec{WorkspaceID: testWS, OwnerID: "01owner0000000000000000000"}
	id := jobID(testWS)
	f, b, hcl := startFixture(t, spec)
	installMirror(b, listing{
		jobs:   []*api.JobListStub{{ID: id, Type: api.JobTypeService, Stop: true, Status: "dead", JobModifyIndex: 90}},
		allocs: []*api.AllocationListStub{{ID: "a1", JobID: id, ClientStatus: "complete", DesiredStatus: "stop"}},
	})
	version, index, typ, status, stop := uint64(3), uint64(95), api.JobTypeService, "pending", false
	f.json("GET /v1/job/"+id, &api.Job{ID: &id, Type: &typ, Version: &version, JobModifyIndex: &index, Stop: &stop, Status: &status})
	f.json("GET /v1/job/"+id+"/submission", &api.JobSubmission{Source: hcl, Format: "hcl2"})
	f.json("GET /v1/job/"+id+"/allocations", []*api.AllocationListStub{
		{ID: "a2", JobID: id, ClientStatus: "pending", DesiredStatus: "run", CreateIndex: 96},
		{ID: "a1", JobID: id, ClientStatus: "complete", DesiredStatus: "stop"},
	})
	f.json("DELETE /v1/job/"+id, &api.JobDeregisterResponse{})

	if err := b.StartWorkspace(t.Context(), spec); err != nil {
		t.Fatal(err)
	}
	if n := len(f.calls("DELETE /v1/job/" + id)); n != 0 {
		t.Errorf("%d deregister calls, want none", n)
	}
	if n := len(f.calls("PUT /v1/jobs")); n != 0 {
		t.Errorf("%d register calls, want none: the registration Nomad holds is this one", n)
	}
}

// startFixture is a fake Nomad ready for a start of spec (its volume and
// the parse), a backend on it, and the jobspec the start submits.
func startFixture(t *testing.T, spec controller.WorkspaceSpec) (*fakeNomad, *Backend, string) {
	t.Helper()
	f := newFakeNomad(t)
	volumeFixture(f, nil)
	parseFixture(f)
	b := newTestBackend(t, f, testOptions())
	hcl, err := b.RenderWorkspace(spec, "/var/nomad/host_volumes/vol-1")
	if err != nil {
		t.Fatal(err)
	}
	return f, b, hcl
}

// installMirror makes l the mirror's contents, under a connected stream.
func installMirror(b *Backend, l listing) {
	m := b.mirror
	m.connected()
	m.mu.Lock()
	defer m.mu.Unlock()
	m.install(l, tableIndexes{}, nil, time.Now())
}

// TestJudgedByMirror: the mirror alone judges a registration only where
// a mirror behind Nomad cannot lead to overwriting or purging the wrong
// job.
func TestJudgedByMirror(t *testing.T) {
	id := jobID(testWS)
	stub := func(stop bool, status string, index uint64) *api.JobListStub {
		return &api.JobListStub{ID: id, Type: api.JobTypeService, Stop: stop, Status: status, JobModifyIndex: index}
	}
	for _, tc := range []struct {
		name   string
		stream bool
		job    *api.JobListStub
		own    uint64 // the index of this backend's own registration, 0 for none
		want   registration
		index  uint64
		judged bool
	}{
		{name: "no stream", job: nil, judged: false},
		{name: "no such job", stream: true, want: registeredNone, judged: true},
		{name: "absent but registered here since", stream: true, own: 50, judged: false},
		// An idle job is purged next, unconditionally: Nomad must say it
		// is idle, and still the job judged.
		{name: "stopped", stream: true, job: stub(true, "dead", 60), judged: false},
		{name: "dead after failing", stream: true, job: stub(false, "dead", 60), judged: false},
		{name: "stopped, registered here before", stream: true, job: stub(true, "dead", 60), own: 55, judged: false},
		{name: "running", stream: true, job: stub(false, "running", 60), judged: false},
		{name: "batch job stopped", stream: true, job: &api.JobListStub{ID: id, Type: api.JobTypeBatch, Stop: true, JobModifyIndex: 60}, judged: false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := newTestBackend(t, newFakeNomad(t), testOptions())
			if tc.stream {
				var l listing
				if tc.job != nil {
					l.jobs = []*api.JobListStub{tc.job}
				}
				installMirror(b, l)
			}
			if tc.own != 0 {
				b.registrations.Store(id, ownRegistration{index: tc.own})
			}
			r, index, judged := b.judgedByMirror(id)
			if judged != tc.judged || judged && (r != tc.want || index != tc.index) {
				t.Errorf("judged %v: %v at %d, want %v: %v at %d", judged, r, index, tc.judged, tc.want, tc.index)
			}
		})
	}
}

// TestRefusedSubmissionDropsSecrets: credentials written for a job Nomad
// then refused to parse or register are deleted again. Nothing else would
// delete them: a job that was never registered is never observed, so no
// purge ever names it. A failure that may have registered the job keeps
// them, since the job's template reads them.
func TestRefusedSubmissionDropsSecrets(t *testing.T) {
	id := "ws-" + testWS + "-archive"
	job := controller.JobSpec{WorkspaceID: testWS, OpID: "01op0000000000000000000000", ArchiveKey: "archives/" + testWS + "/01op0000000000000000000000/home.tar.zst", Attempt: 1}
	for _, tc := range []struct {
		name     string
		route    string
		code     int
		wantDrop bool
	}{
		{"parse refused", "PUT /v1/jobs/parse", http.StatusBadRequest, true},
		{"register forbidden", "PUT /v1/jobs", http.StatusForbidden, true},
		{"register unanswered", "PUT /v1/jobs", http.StatusInternalServerError, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeNomad(t)
			volumeFixture(f, nil)
			parseFixture(f)
			f.json("PUT /v1/var/nomad/jobs/"+id, &api.Variable{})
			f.json("DELETE /v1/var/nomad/jobs/"+id, struct{}{})
			f.status(tc.route, tc.code, "refused")
			if err := newTestBackend(t, f, testOptions()).SubmitArchive(t.Context(), job); err == nil {
				t.Fatal("submission succeeded")
			}
			// The parse runs beside the variable's write, whose request its
			// refusal may cancel before it is sent.
			if n := len(f.calls("PUT /v1/var/nomad/jobs/" + id)); n > 1 || n == 0 && tc.route != "PUT /v1/jobs/parse" {
				t.Fatalf("%d variable writes", n)
			}
			drops := len(f.calls("DELETE /v1/var/nomad/jobs/" + id))
			if tc.wantDrop && drops != 1 {
				t.Errorf("%d variable deletes after Nomad refused the job, want 1", drops)
			}
			if !tc.wantDrop && drops != 0 {
				t.Errorf("%d variable deletes after a failure that may have registered the job", drops)
			}
		})
	}
}

// TestProvisionVolumeInDatacenters: the volume is placed only on a node of
// the configured datacenters (globs as in a job's datacenters), since the
// job that mounts it can only run there.
func TestProvisionVolumeInDatacenters(t *testing.T) {
	for _, tc := range []struct {
		name        string
		datacenters []string
		match       []string
		noMatch     []string
	}{
		{"named and glob", []string{"dc1", "eu-*"}, []string{"dc1", "eu-west", "eu-"}, []string{"dc2", "dc10", "xdc1", "us-eu-1"}},
		{"dots are literal", []string{"us.east"}, []string{"us.east"}, []string{"usxeast"}},
		{"any", []string{"*"}, nil, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeNomad(t)
			f.json("GET /v1/volumes", []*api.HostVolumeStub{})
			f.json("PUT /v1/volume/host/create", &api.HostVolumeCreateResponse{Volume: &api.HostVolume{ID: "vol-1"}})
			dc := "dc1"
			if len(tc.match) > 0 {
				dc = tc.match[len(tc.match)-1]
			}
			f.json("GET /v1/nodes", []*api.NodeListStub{{ID: "n1", Status: api.NodeStatusReady, SchedulingEligibility: api.NodeSchedulingEligible,
				NodePool: "default", Datacenter: dc}})
			opts := testOptions()
			opts.Datacenters = tc.datacenters
			if err := newTestBackend(t, f, opts).ProvisionVolume(t.Context(), controller.VolumeSpec{WorkspaceID: testWS, UID: 1000, GID: 1000}); err != nil {
				t.Fatal(err)
			}
			var req api.HostVolumeCreateRequest
			if err := json.Unmarshal([]byte(f.calls("PUT /v1/volume/host/create")[0].Body), &req); err != nil {
				t.Fatal(err)
			}
			cs := req.Volume.Constraints
			if tc.match == nil {
				if len(cs) != 0 {
					t.Fatalf("constraints %+v for any datacenter, want none", cs)
				}
				return
			}
			if len(cs) != 1 || cs[0].LTarget != "${node.datacenter}" || cs[0].Operand != "regexp" {
				t.Fatalf("constraints = %+v, want one regexp on ${node.datacenter}", cs)
			}
			re := regexp.MustCompile(cs[0].RTarget)
			for _, dc := range tc.match {
				if !re.MatchString(dc) {
					t.Errorf("datacenter %q not allowed by %q", dc, cs[0].RTarget)
				}
			}
			for _, dc := range tc.noMatch {
				if re.MatchString(dc) {
					t.Errorf("datacenter %q allowed by %q", dc, cs[0].RTarget)
				}
			}
		})
	}
}

// TestGiveUpStopArchive: giving up signals the stop-archive task of the
// workspace's live allocation where it runs now, and nothing where it waits
// to be run again or has ended.
func TestGiveUpStopArchive(t *testing.T) {
	f := newFakeNomad(t)
	id := "ws-" + testWS
	f.json("GET /v1/job/"+id+"/allocations", []*api.AllocationListStub{
		{ID: "a-saving", ClientStatus: "running", TaskStates: map[string]*api.TaskState{stopArchiveTask: {State: "running"}}},
		{ID: "a-waiting", ClientStatus: "running", TaskStates: map[string]*api.TaskState{stopArchiveTask: {State: "pending"}}},
		{ID: "a-program", ClientStatus: "running", TaskStates: map[string]*api.TaskState{"workspace": {State: "running"}}},
		{ID: "a-done", ClientStatus: "complete", TaskStates: map[string]*api.TaskState{stopArchiveTask: {State: "running"}}},
	})
	f.json("PUT /v1/client/allocation/a-saving/signal", &api.GenericResponse{})
	if err := newTestBackend(t, f, testOptions()).GiveUpStopArchive(t.Context(), testWS); err != nil {
		t.Fatal(err)
	}
	calls := f.calls("PUT /v1/client/allocation/a-saving/signal")
	if len(calls) != 1 {
		t.Fatalf("%d signals to the saving allocation, want 1 (routes %v)", len(calls), f.routesCalled())
	}
	var req api.AllocSignalRequest
	if err := json.Unmarshal([]byte(calls[0].Body), &req); err != nil || req.Task != stopArchiveTask || req.Signal != "SIGUSR1" {
		t.Fatalf("signal request %+v (%v), want SIGUSR1 to %s", req, err, stopArchiveTask)
	}
	for _, r := range f.routesCalled() {
		if strings.HasSuffix(r, "/signal") && !strings.Contains(r, "a-saving") {
			t.Errorf("signalled %s", r)
		}
	}
}

// A start repeated while Nomad places the job reads nothing once the
// mirror shows the job as this backend registered it; a job changed since
// is read and judged again.
func TestStartWorkspaceAgainReadsNothing(t *testing.T) {
	f := newFakeNomad(t)
	volumeFixture(f, nil)
	parseFixture(f)
	f.json("PUT /v1/jobs", &api.JobRegisterResponse{EvalID: "eval-1", JobModifyIndex: 77})
	b := newTestBackend(t, f, testOptions())
	m := b.mirror
	m.connected()
	m.mu.Lock()
	m.install(listing{}, tableIndexes{}, nil, time.Now())
	m.mu.Unlock()
	spec := controller.WorkspaceSpec{WorkspaceID: testWS, OwnerID: "01owner0000000000000000000"}
	if err := b.StartWorkspace(t.Context(), spec); err != nil {
		t.Fatal(err)
	}
	id := jobID(testWS)
	// The mirror holds no such job: none is read before registering.
	if n := len(f.calls("GET /v1/job/" + id)); n != 0 {
		t.Errorf("a first start read the job %d times", n)
	}
	registeredAt := func(index uint64) {
		m.mu.Lock()
		defer m.mu.Unlock()
		m.jobs[id] = &api.JobListStub{ID: id, Type: "service", Status: "pending", JobModifyIndex: index}
	}
	registeredAt(77)
	reads := len(f.calls("GET /v1/job/" + id))
	if err := b.StartWorkspace(t.Context(), spec); err != nil {
		t.Fatal(err)
	}
	if n := len(f.calls("GET /v1/job/" + id)); n != reads {
		t.Errorf("a start of the job as registered read it %d times", n-reads)
	}
	if n := len(f.calls("PUT /v1/jobs")); n != 1 {
		t.Errorf("%d registrations, want 1", n)
	}
	// Someone changed the job: it is read again.
	registeredAt(80)
	registered(f, 1, false, "another source")
	if err := b.StartWorkspace(t.Context(), spec); err != nil {
		t.Fatal(err)
	}
	if n := len(f.calls("GET /v1/job/" + id)); n != reads+1 {
		t.Errorf("a start of a job changed since read it %d times, want once", n-reads)
	}
}
