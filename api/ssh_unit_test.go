package api

import (
	"testing"

	"github.com/codehub-io/codehub/workspace"
)

func TestTunnelStep(t *testing.T) {
	reason := "start_failed"
	cases := []struct {
		name  string
		ws    workspace.Workspace
		want  tunnelAction
		words string
	}{
		{"running", workspace.Workspace{Phase: workspace.PhaseRunning, Operation: workspace.OpNone, DesiredState: workspace.DesiredRunning}, tunnelDial, "waiting for the workspace's agent"},
		{"running but asked to stop", workspace.Workspace{Phase: workspace.PhaseRunning, Operation: workspace.OpNone, DesiredState: workspace.DesiredStandby}, tunnelWake, "starting"},
		{"stopped", workspace.Workspace{Phase: workspace.PhaseStandby, Operation: workspace.OpNone, DesiredState: workspace.DesiredStandby}, tunnelWake, "starting"},
		{"archived", workspace.Workspace{Phase: workspace.PhaseArchived, Operation: workspace.OpNone, DesiredState: workspace.DesiredArchived}, tunnelWake, "restoring from archive"},
		{"archived, asked to run", workspace.Workspace{Phase: workspace.PhaseArchived, Operation: workspace.OpNone, DesiredState: workspace.DesiredRunning}, tunnelWait, "restoring from archive"},
		{"restoring", workspace.Workspace{Phase: workspace.PhaseArchived, Operation: workspace.OpRestoring, DesiredState: workspace.DesiredRunning}, tunnelWait, "restoring from archive"},
		{"starting", workspace.Workspace{Phase: workspace.PhaseStandby, Operation: workspace.OpStarting, DesiredState: workspace.DesiredRunning}, tunnelWait, "starting"},
		{"stopping", workspace.Workspace{Phase: workspace.PhaseRunning, Operation: workspace.OpStopping, DesiredState: workspace.DesiredStandby}, tunnelWait, "finishing a stop first"},
		{"error", workspace.Workspace{Name: "w", Phase: workspace.PhaseError, ErrorReason: &reason}, tunnelFail, "codehub: workspace w is in error: start_failed"},
		{"deleted", workspace.Workspace{Name: "w", Phase: workspace.PhaseRunning, DesiredState: workspace.DesiredDeleted}, tunnelFail, "codehub: workspace w is deleted"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, words := tunnelStep(c.ws)
			if got != c.want || words != c.words {
				t.Fatalf("tunnelStep = %d %q, want %d %q", got, words, c.want, c.words)
			}
		})
	}
}
