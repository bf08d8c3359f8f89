package config

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

func TestLoggerFollowsLevelAndFormat(t *testing.T) {
	tests := []struct {
		name     string
		level    string
		json     bool
		wantInfo bool
	}{
		{"text at info", "info", false, true},
		{"json at info", "info", true, true},
		{"warn hides info", "warn", false, false},
		{"json at error hides info", "error", true, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := Default()
			c.LogLevel, c.LogJSON = tt.level, tt.json
			var out bytes.Buffer
			logger := c.newLogger(&out)
			logger.Named("controller").Info("pass finished", "workspace_id", "01jb3x7k9q2m5n8p4r6s0t1v2w")
			logger.Error("boom")

			lines := strings.Split(strings.TrimSpace(out.String()), "\n")
			wantLines := 1
			if tt.wantInfo {
				wantLines = 2
			}
			if len(lines) != wantLines {
				t.Fatalf("got %d lines, want %d:\n%s", len(lines), wantLines, out.String())
			}
			if !tt.json {
				if tt.wantInfo && !strings.Contains(lines[0], "codehub.controller: pass finished: workspace_id=01jb3x7k9q2m5n8p4r6s0t1v2w") {
					t.Errorf("text line = %q", lines[0])
				}
				return
			}
			var entry map[string]any
			if err := json.Unmarshal([]byte(lines[0]), &entry); err != nil {
				t.Fatalf("line is not JSON: %q: %v", lines[0], err)
			}
			if tt.wantInfo && (entry["@module"] != "codehub.controller" || entry["workspace_id"] != "01jb3x7k9q2m5n8p4r6s0t1v2w") {
				t.Errorf("json entry = %v", entry)
			}
		})
	}
}
