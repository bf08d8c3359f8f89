package main

import (
	"bytes"
	"strings"
	"testing"
)

// Command lines a command would otherwise misread are usage errors (exit
// 2), reported before any file or database is touched.
func TestCommandLineMistakes(t *testing.T) {
	const id = "01jb3x7k9q2m5n8p4r6s0t1v2w"
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"server", "-config", "codehub.hcl", "other.hcl"}, `unexpected argument "other.hcl"`},
		{[]string{"migrate", "-config", "codehub.hcl", "now"}, `unexpected argument "now"`},
		{[]string{"server"}, "-config FILE is required"},
		{[]string{"server", "codehub.hcl"}, `unexpected argument "codehub.hcl"`},
		{[]string{"migrate"}, "-config FILE is required"},
		{[]string{"user", "list"}, "-config FILE is required"},
		{[]string{"workspace", "recover", id}, "-config FILE is required"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := run(tt.args, strings.NewReader(""), &stdout, &stderr)
			if code != 2 || !strings.Contains(stderr.String(), tt.want) {
				t.Errorf("exit %d, stderr %q; want 2 and %q", code, stderr.String(), tt.want)
			}
			if stdout.Len() != 0 {
				t.Errorf("stdout %q, want nothing", stdout.String())
			}
		})
	}
}
