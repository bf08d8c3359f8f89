package main

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestWorkspaceLog(t *testing.T) {
	for _, tc := range []struct {
		name, workspace string
		want            []string
	}{
		{"new", `{"image":"i:1","phase":"PENDING","operation":"NONE","desired_state":"RUNNING",
			"created_at":"2026-11-25T10:00:00Z","updated_at":"2026-11-25T10:00:00Z"}`,
			[]string{"created created with image i:1", "state phase PENDING, desired RUNNING"}},
		{"a start that failed once", `{"image":"i:1","phase":"STANDBY","operation":"NONE","desired_state":"RUNNING",
			"desired_by":"schedule","desired_at":"2026-11-25T11:00:00Z",
			"conditions":{"infra.container_ready":{"status":"False","reason":"Timeout","last_transition_time":"2026-11-25T11:02:00Z"},
				"storage.volume_ready":{"status":"True","last_transition_time":"2026-11-25T10:01:00Z"}},
			"error_reason":"Timeout","error_message":"no answer","error_count":1,"next_attempt_at":"2026-11-25T11:03:00Z",
			"created_at":"2026-11-25T10:00:00Z","updated_at":"2026-11-25T11:02:30Z"}`,
			[]string{"created created with image i:1", "condition storage.volume_ready is True",
				"desired the autostart schedule asked for RUNNING", "condition infra.container_ready is False: Timeout",
				"error attempt 1 failed: Timeout (no answer); next attempt at 2026-11-25T11:03:00Z",
				"state phase STANDBY, desired RUNNING"}},
		{"a condition stamped before the creation, two at once", `{"image":"i:1","phase":"STANDBY","operation":"NONE","desired_state":"STANDBY",
			"conditions":{"storage.volume_ready":{"status":"True","last_transition_time":"2026-11-25T09:59:59Z"},
				"policy.healthy":{"status":"True","last_transition_time":"2026-11-25T09:59:59Z"}},
			"created_at":"2026-11-25T10:00:00Z","updated_at":"2026-11-25T10:00:00Z"}`,
			[]string{"created created with image i:1", "condition policy.healthy is True", "condition storage.volume_ready is True",
				"state phase STANDBY, desired STANDBY"}},
		{"in ERROR no retry is promised", `{"phase":"ERROR","operation":"NONE","desired_state":"RUNNING",
			"error_reason":"ImagePullFailed","error_count":3,"next_attempt_at":"2026-11-25T11:03:00Z",
			"created_at":"2026-11-25T10:00:00Z","updated_at":"2026-11-25T11:00:00Z"}`,
			[]string{"created created with image ", "error attempt 3 failed: ImagePullFailed", "state phase ERROR, desired RUNNING"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var ws wsInfo
			if err := json.Unmarshal([]byte(tc.workspace), &ws); err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, e := range workspaceLog(ws) {
				got = append(got, e.Event+" "+e.Message)
			}
			if strings.Join(got, "\n") != strings.Join(tc.want, "\n") {
				t.Fatalf("log:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tc.want, "\n"))
			}
		})
	}
}
