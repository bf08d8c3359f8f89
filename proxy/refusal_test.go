package proxy

import (
	"encoding/binary"
	"encoding/json"
	"strings"
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

func TestRefusalReason(t *testing.T) {
	now := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	reason := "ImagePullFailed"
	row := func(desired workspace.DesiredState, idle time.Duration) workspace.Workspace {
		return workspace.Workspace{DesiredState: desired, LastAccessAt: now.Add(-idle)}
	}
	failed := row(workspace.DesiredRunning, time.Minute)
	failed.ErrorReason = &reason
	cases := []struct {
		name string
		ws   workspace.Workspace
		v    verdict
		want string
	}{
		{"stopped", row(workspace.DesiredStandby, 12*time.Minute+10*time.Second), verdictNotStarted,
			"This workspace was stopped. It was last used 12 minutes ago. Reload the window to start it again."},
		{"stopping", row(workspace.DesiredStandby, 30*time.Second), verdictStarting,
			"This workspace was stopped. It was last used less than a minute ago. Reload the window to start it again."},
		{"archived", row(workspace.DesiredArchived, 50*time.Hour), verdictArchived,
			"This workspace was archived. It was last used 2 days ago. Reload the window to restore it."},
		{"archiving", row(workspace.DesiredArchived, 3*time.Hour), verdictStarting,
			"This workspace was archived. It was last used 3 hours ago. Reload the window to restore it."},
		{"restarted elsewhere", row(workspace.DesiredRunning, 90*time.Second), verdictStarting,
			"This workspace is starting again; the session of this window has ended. Reload the window to open it."},
		{"never started", row(workspace.DesiredStandby, 0), verdictNotStarted,
			"This workspace was stopped. It was last used less than a minute ago. Reload the window to start it again."},
		{"failed", failed, verdictError, "This workspace failed (ImagePullFailed). Reload the window for details."},
		{"failed without a reason", row(workspace.DesiredRunning, 0), verdictError, "This workspace failed (unknown). Reload the window for details."},
		{"deleted", row(workspace.DesiredRunning, 0), verdictGone, "This workspace was deleted."},
	}
	for _, tc := range cases {
		if got := refusalReason(tc.ws, tc.v, now); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
	if got := refusalReason(row(workspace.DesiredStandby, 90*time.Second), verdictNotStarted, now); !strings.Contains(got, "1 minute ago") {
		t.Errorf("a minute and a half: %q", got)
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
		{"stopped by a schedule", row(workspace.PhaseStandby, workspace.DesiredStandby, workspace.CauseSchedule, at(3*time.Hour), 3*time.Hour),
			"It was stopped 3 hours ago."},
	}
	for _, tc := range cases {
		if got := stoppedWords(tc.ws, now); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
}
