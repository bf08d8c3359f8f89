package nomad

import (
	"testing"

	"github.com/hashicorp/nomad/api"
)

func TestAgentAddr(t *testing.T) {
	const wsID = "01jb3x7k9q2m5n8p4r6s0t1v2w"
	alloc := func(edit func(a *api.Allocation)) *api.Allocation {
		a := &api.Allocation{
			Namespace: "default", JobID: jobID(wsID),
			DesiredStatus: api.AllocDesiredStatusRun, ClientStatus: api.AllocClientStatusRunning,
			Job: &api.Job{Meta: map[string]string{MetaManaged: "true", MetaWorkspaceID: wsID}},
			AllocatedResources: &api.AllocatedResources{Shared: api.AllocatedSharedResources{Ports: []api.PortMapping{
				{Label: "http", Value: 20001, HostIP: "10.0.0.7"},
				{Label: "agent", Value: 20002, HostIP: "10.0.0.7"},
			}}},
		}
		if edit != nil {
			edit(a)
		}
		return a
	}
	cases := []struct {
		name string
		a    *api.Allocation
		want string
	}{
		{"the agent port", alloc(nil), "10.0.0.7:20002"},
		{"another job's", alloc(func(a *api.Allocation) { a.JobID = "ws-other" }), ""},
		{"not codehub's", alloc(func(a *api.Allocation) { a.Job.Meta[MetaManaged] = "false" }), ""},
		{"stopping", alloc(func(a *api.Allocation) { a.DesiredStatus = api.AllocDesiredStatusStop }), ""},
		{"no agent port", alloc(func(a *api.Allocation) { a.AllocatedResources.Shared.Ports = a.AllocatedResources.Shared.Ports[:1] }), ""},
		{"no resources", alloc(func(a *api.Allocation) { a.AllocatedResources = nil }), ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, ok := agentAddr(c.a, "", wsID)
			if got != c.want || ok != (c.want != "") {
				t.Fatalf("agentAddr = %q %v, want %q", got, ok, c.want)
			}
		})
	}
}
