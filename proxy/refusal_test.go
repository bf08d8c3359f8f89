package proxy

import (
	"encoding/binary"
	"encoding/json"
	"testing"
	"time"

	"github.com/codehub-io/codehub/workspace"
)

func TestVSCodeRefusal(t *testing.T) {
	msg := vscodeRefusal(`stopped "now"`)
	if len(msg) < vsHeaderSize || msg[0] != vsControl || binary.BigEndian.Uint32(msg[1:]) != 0 || binary.BigEndian.Uint32(msg[5:]) != 0 {
		t.Fatalf("header % x", msg[:min(len(msg), vsHeaderSize)])
	}
	body := msg[vsHeaderSize:]
	if n := binary.BigEndian.Uint32(msg[9:]); int(n) != len(body) {
		t.Fatalf("length %d, body %d bytes", n, len(body))
	}
	var got struct{ Type, Reason string }
	if err := json.Unmarshal(body, &got); err != nil || got.Type != "error" || got.Reason != `stopped "now"` {
		t.Fatalf("body %s: %+v %v", body, got, err)
	}
}

func TestNoticeFor(t *testing.T) {
	now := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	reason := "ImagePullFailed"
	row := func(phase workspace.Phase, desired workspace.DesiredState, by workspace.Cause, asked, idle time.Duration) workspace.Workspace {
		at := now.Add(-asked)
		return workspace.Workspace{Phase: phase, DesiredState: desired, Operation: workspace.OpNone, DesiredBy: by, DesiredAt: &at, LastAccessAt: now.Add(-idle)}
	}
	failed := row(workspace.PhaseError, workspace.DesiredRunning, workspace.CauseUser, time.Minute, time.Minute)
	failed.ErrorReason = &reason
	moving := row(workspace.PhaseStandby, workspace.DesiredRunning, workspace.CauseUser, time.Minute, time.Minute)
	moving.Operation = workspace.OpArchiving
	moving.Conditions = workspace.Conditions{workspace.CondMoving: {Status: workspace.ConditionTrue, Reason: workspace.ReasonMoveLeaving, Message: "moving to another machine: leaving node a"}}
	away := row(workspace.PhaseStandby, workspace.DesiredRunning, workspace.CauseUser, time.Minute, time.Minute)
	away.Conditions = workspace.Conditions{workspace.CondVolumeReady: {Status: workspace.ConditionFalse, Reason: workspace.ReasonNodeDown, Message: "unavailable: node a is down"}}
	stopping := row(workspace.PhaseRunning, workspace.DesiredStandby, workspace.CauseUser, 5*time.Second, time.Minute)
	stopping.Operation = workspace.OpStopping
	cases := []struct {
		name string
		ws   workspace.Workspace
		v    verdict
		want notice
	}{
		{"running", row(workspace.PhaseRunning, workspace.DesiredRunning, workspace.CauseUser, time.Hour, 0), verdictProxy, notice{Running: true}},
		{"stop asked, not begun", row(workspace.PhaseRunning, workspace.DesiredStandby, workspace.CauseUser, 5*time.Second, time.Minute), verdictProxy,
			notice{Title: "Stopped", Message: "This workspace was stopped. You stopped it less than a minute ago. Reload the window to start it again."}},
		{"stopping", stopping, verdictStarting,
			notice{Title: "Stopped", Message: "This workspace was stopped. You stopped it less than a minute ago. Reload the window to start it again."}},
		{"idle stop", row(workspace.PhaseStandby, workspace.DesiredStandby, workspace.CauseIdle, 2*time.Minute, 12*time.Minute), verdictNotStarted,
			notice{Title: "Stopped", Message: "This workspace was stopped. It stopped after 10 minutes without use, 2 minutes ago. Reload the window to start it again."}},
		{"archived", row(workspace.PhaseArchived, workspace.DesiredArchived, workspace.CauseUser, 50*time.Hour, 51*time.Hour), verdictArchived,
			notice{Title: "Archived", Message: "This workspace was archived. You archived it 2 days ago. Reload the window to restore it."}},
		{"restarted elsewhere", row(workspace.PhaseStandby, workspace.DesiredRunning, workspace.CauseUser, 90*time.Second, 90*time.Second), verdictStarting,
			notice{Title: "Restarting", Message: "This workspace is starting again; the session of this window has ended. Reload the window to open it."}},
		{"moving", moving, verdictStarting,
			notice{Title: "Moving to another machine", Message: "This workspace is moving to another machine (moving to another machine: leaving node a). Reload the window to open it there."}},
		{"node away", away, verdictStarting,
			notice{Title: "Unavailable", Message: "This workspace's files are on a machine that cannot serve them right now (unavailable: node a is down). Nothing is lost."}},
		{"failed", failed, verdictError, notice{Title: "Failed", Message: "This workspace failed (ImagePullFailed). Reload the window for details."}},
		{"failed without a reason", row(workspace.PhaseError, workspace.DesiredRunning, workspace.CauseUser, 0, 0), verdictError,
			notice{Title: "Failed", Message: "This workspace failed (unknown). Reload the window for details."}},
		{"deleted", workspace.Workspace{}, verdictGone, notice{Title: "Deleted", Message: "This workspace was deleted."}},
	}
	for _, tc := range cases {
		if got := noticeFor(tc.ws, tc.v, now); got != tc.want {
			t.Errorf("%s: %+v, want %+v", tc.name, got, tc.want)
		}
	}
}

func TestStoppedWords(t *testing.T) {
	now := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	at := func(d time.Duration) *time.Time { t := now.Add(-d); return &t }
	row := func(phase workspace.Phase, desired workspace.DesiredState, by workspace.Cause, asked *time.Time, used time.Duration) workspace.Workspace {
		return workspace.Workspace{Phase: phase, DesiredState: desired, DesiredBy: by, DesiredAt: asked, LastAccessAt: now.Add(-used)}
	}
	cases := []struct {
		name string
		ws   workspace.Workspace
		want string
	}{
		{"stopped by its owner", row(workspace.PhaseStandby, workspace.DesiredStandby, workspace.CauseUser, at(3*time.Minute), 4*time.Minute),
			"You stopped it 3 minutes ago."},
		{"stopping for its owner", row(workspace.PhaseRunning, workspace.DesiredStandby, workspace.CauseUser, at(5*time.Second), time.Minute),
			"You stopped it less than a minute ago."},
		{"idle stop", row(workspace.PhaseStandby, workspace.DesiredStandby, workspace.CauseIdle, at(20*time.Minute), 30*time.Minute),
			"It stopped after 10 minutes without use, 20 minutes ago."},
		{"archived by its owner", row(workspace.PhaseArchived, workspace.DesiredArchived, workspace.CauseUser, at(50*time.Hour), 60*time.Hour),
			"You archived it 2 days ago."},
		{"idle archive", row(workspace.PhaseArchived, workspace.DesiredArchived, workspace.CauseIdle, at(3*time.Hour), 3*time.Hour+7*24*time.Hour),
			"It was archived after 7 days without use, 3 hours ago."},
		{"being archived by its owner", row(workspace.PhaseStandby, workspace.DesiredArchived, workspace.CauseUser, at(time.Minute), time.Hour),
			"You archived it 1 minute ago."},
		{"created stopped", row(workspace.PhasePending, workspace.DesiredStandby, workspace.CauseUser, at(time.Minute), time.Minute),
			"It has not been started yet."},
		{"no time recorded", row(workspace.PhaseStandby, workspace.DesiredStandby, workspace.CauseUser, nil, time.Hour),
			"You stopped it."},
		{"stopped by an administrator", row(workspace.PhaseStandby, workspace.DesiredStandby, workspace.CauseAdmin, at(2*time.Minute), time.Hour),
			"An administrator stopped it 2 minutes ago."},
		{"archived by an administrator", row(workspace.PhaseArchived, workspace.DesiredArchived, workspace.CauseAdmin, at(2*time.Hour), 3*time.Hour),
			"An administrator archived it 2 hours ago."},
		{"stopped by a schedule", row(workspace.PhaseStandby, workspace.DesiredStandby, workspace.CauseSchedule, at(3*time.Hour), 3*time.Hour),
			"It was stopped 3 hours ago."},
	}
	for _, tc := range cases {
		if got := stoppedWords(tc.ws, now); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
}
