package proxy

import (
	"strings"
	"testing"
	"time"

	"github.com/codehub-io/codehub/workspace"
)

func TestStartingWords(t *testing.T) {
	reason, message := "StartFailed", "exited with code 1: Cannot find module './cli'"
	next := time.Date(2026, 11, 25, 23, 40, 5, 0, time.UTC)
	cases := []struct {
		name  string
		ws    workspace.Workspace
		words string
		fails bool
	}{
		{"new", workspace.Workspace{Phase: workspace.PhasePending, Operation: workspace.OpNone}, "Preparing its home directory", false},
		{"provisioning", workspace.Workspace{Phase: workspace.PhasePending, Operation: workspace.OpProvisioning}, "Preparing its home directory", false},
		{"archived", workspace.Workspace{Phase: workspace.PhaseArchived, Operation: workspace.OpNone}, "Restoring its home directory", false},
		{"restoring", workspace.Workspace{Phase: workspace.PhaseArchived, Operation: workspace.OpRestoring}, "Restoring its home directory", false},
		{"standby", workspace.Workspace{Phase: workspace.PhaseStandby, Operation: workspace.OpNone}, "Starting the editor", false},
		{"starting", workspace.Workspace{Phase: workspace.PhaseStandby, Operation: workspace.OpStarting}, "Starting the editor", false},
		{"health check", workspace.Workspace{Phase: workspace.PhaseRunning, Operation: workspace.OpStarting}, "Waiting for the editor", false},
		{"stopping", workspace.Workspace{Phase: workspace.PhaseRunning, Operation: workspace.OpStopping}, "Finishing a stop first", false},
		{"archiving", workspace.Workspace{Phase: workspace.PhaseStandby, Operation: workspace.OpArchiving}, "Finishing archiving first", false},
		{"backing up", workspace.Workspace{Phase: workspace.PhaseStandby, Operation: workspace.OpArchiving, OpBackup: true}, "Ending a backup of its home directory first; it starts right after.", false},
		{"retry waits", workspace.Workspace{Phase: workspace.PhaseStandby, Operation: workspace.OpNone,
			ErrorReason: &reason, ErrorMessage: &message, ErrorCount: 2, NextAttemptAt: &next},
			"Attempt 2 of 3 failed while starting the program: StartFailed (exited with code 1: Cannot find module './cli'). Next attempt at 23:40:05 UTC.", true},
		{"retry due", workspace.Workspace{Phase: workspace.PhaseStandby, Operation: workspace.OpNone, ErrorReason: &reason, ErrorCount: 1},
			"Attempt 1 of 3 failed while starting the program: StartFailed. Trying again shortly.", true},
		{"retry runs", workspace.Workspace{Phase: workspace.PhaseStandby, Operation: workspace.OpStarting, ErrorReason: &reason, ErrorCount: 1},
			"Attempt 1 of 3 failed while starting the program: StartFailed. Trying again now.", true},
	}
	// A timeout says where it happened by what was up.
	timeout := workspace.ReasonTimeout
	cases = append(cases, struct {
		name  string
		ws    workspace.Workspace
		words string
		fails bool
	}{"timed out answering", workspace.Workspace{Phase: workspace.PhaseStandby, Operation: workspace.OpNone, ErrorReason: &timeout, ErrorCount: 1,
		DesiredState: workspace.DesiredRunning, Conditions: workspace.Conditions{
			workspace.CondVolumeReady:    {Status: workspace.ConditionTrue},
			workspace.CondContainerReady: {Status: workspace.ConditionTrue}}},
		"Attempt 1 of 3 failed waiting for the program to answer: Timeout. Trying again shortly.", true})
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			words, f := startingWords(tc.ws)
			if !strings.HasPrefix(words, tc.words) {
				t.Errorf("words = %q, want %q first", words, tc.words)
			}
			if (f != nil) != tc.fails {
				t.Errorf("failure = %+v, want one: %v", f, tc.fails)
			}
			// Internal names are not words a user knows.
			for _, internal := range []string{"phase", "operation", "NONE", "STANDBY", "PROVISIONING"} {
				if strings.Contains(words, internal) {
					t.Errorf("words %q say %q", words, internal)
				}
			}
		})
	}
}
