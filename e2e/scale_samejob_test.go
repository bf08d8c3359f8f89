package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/hashicorp/nomad/api"

	"github.com/codehub-io/codehub/controller"
	"github.com/codehub-io/codehub/nomad"
)

// sameJob is the second baseline's shape: the very job codehub registered
// for workspace wsID (its workspace agent, its templates and its stop
// archive task), under the direct client's name and volume, with a copy
// of the variable its workspace task reads. The stop archive's variable
// is not copied, so a copy's stop archives nothing, as a deleted
// workspace's does. The artifacts the job downloads are served by the
// harness from the bytes codehub served, so that the baseline runs
// while the server does not.
func sameJob(tb testing.TB, client *api.Client, wsID string) jobShape {
	tb.Helper()
	jobID := controller.JobName(wsID, controller.JobWorkspace)
	job, _, err := client.Jobs().Info(jobID, nil)
	if err != nil {
		tb.Fatalf("read the job of workspace %s: %v", wsID, err)
	}
	variable, _, err := client.Variables().Read("nomad/jobs/"+jobID, nil)
	if err != nil {
		tb.Fatalf("read the variable of workspace %s: %v", wsID, err)
	}
	if len(job.TaskGroups) != 1 || job.TaskGroups[0].Volumes["home"] == nil {
		tb.Fatalf("workspace job %s has no single group with a home volume", jobID)
	}
	group := job.TaskGroups[0]
	volume, home := group.Volumes["home"].Source, ""
	served := map[string]string{}
	for _, task := range group.Tasks {
		if task.Name == "workspace" {
			home = task.Env["HOME"]
		}
		for _, a := range task.Artifacts {
			source := *a.GetterSource
			if served[source] == "" {
				served[source] = serveArtifact(tb, source)
			}
			*a.GetterSource = served[source]
		}
	}
	if home == "" {
		tb.Fatalf("workspace job %s names no home", jobID)
	}
	job.Status, job.StatusDescription, job.Stop, job.Stable = nil, nil, nil, nil
	job.Version, job.SubmitTime, job.CreateIndex, job.ModifyIndex, job.JobModifyIndex = nil, nil, nil, nil, nil
	// Without codehub's mark a server that starts again never takes a
	// copy for its own.
	delete(job.Meta, nomad.MetaManaged)
	source, err := json.Marshal(job)
	if err != nil {
		tb.Fatal(err)
	}
	return func(name string, vol *api.HostVolume) (*api.Job, []*api.Variable, error) {
		// The volume's name holds the job's, which holds the workspace's
		// id: the longest first.
		text := strings.NewReplacer(home, vol.HostPath, volume, vol.Name, jobID, name, wsID, name).Replace(string(source))
		var copied api.Job
		if err := json.Unmarshal([]byte(text), &copied); err != nil {
			return nil, nil, fmt.Errorf("copy job %s: %w", jobID, err)
		}
		return &copied, []*api.Variable{{Path: "nomad/jobs/" + name, Items: variable.Items}}, nil
	}
}

// serveArtifact downloads source, serves its bytes from a loopback server
// of the harness until the benchmark ends, and returns their address
// there.
func serveArtifact(tb testing.TB, source string) string {
	tb.Helper()
	u, err := url.Parse(source)
	if err != nil {
		tb.Fatalf("artifact source %q: %v", source, err)
	}
	resp, err := http.Get(source)
	if err != nil {
		tb.Fatalf("download artifact %s: %v", source, err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK {
		tb.Fatalf("download artifact %s: %d %v", source, resp.StatusCode, err)
	}
	files := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write(body)
	}))
	tb.Cleanup(files.Close)
	return files.URL + u.RequestURI()
}
