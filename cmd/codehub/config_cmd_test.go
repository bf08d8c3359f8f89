package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestConfigValidate(t *testing.T) {
	missingKeys := filepath.Join(t.TempDir(), "codehub.hcl")
	if err := os.WriteFile(missingKeys, []byte("backend \"local\" {}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name       string
		args       []string
		env        map[string]string
		wantCode   int
		wantStdout string
		wantStderr []string
	}{
		{
			name:       "example file",
			args:       []string{"validate", "-config", "../../config/codehub.example.hcl"},
			wantCode:   0,
			wantStdout: "configuration is valid\n",
		},
		{
			name:     "wrong type and unknown block",
			args:     []string{"validate", "-config", "../../config/testdata/wrong-type-and-unknown-block.hcl"},
			wantCode: 1,
			wantStderr: []string{
				"../../config/testdata/wrong-type-and-unknown-block.hcl:8:1: Unsupported block type",
				"../../config/testdata/wrong-type-and-unknown-block.hcl:17:11: Unsuitable value type",
				"configuration is invalid (2 problems)",
			},
		},
		{
			name:       "credentials missing",
			args:       []string{"validate", "-config", missingKeys},
			wantCode:   1,
			wantStderr: []string{"Invalid s3.access_key: must be set (in the file or CODEHUB_S3_ACCESS_KEY)", "(2 problems)"},
		},
		{
			name:       "credentials from the environment",
			args:       []string{"validate", "-config", missingKeys},
			env:        map[string]string{"CODEHUB_S3_ACCESS_KEY": "env-access", "CODEHUB_S3_SECRET_KEY": "env-secret"},
			wantCode:   0,
			wantStdout: "configuration is valid\n",
		},
		{
			name:       "missing file",
			args:       []string{"validate", "-config", "does-not-exist.hcl"},
			wantCode:   1,
			wantStderr: []string{"read config: open does-not-exist.hcl"},
		},
		{name: "no -config", args: []string{"validate"}, wantCode: 2, wantStderr: []string{"usage: codehub config validate -config FILE"}},
		{name: "no subcommand", args: nil, wantCode: 2, wantStderr: []string{"usage:"}},
		{name: "unknown subcommand", args: []string{"check"}, wantCode: 2, wantStderr: []string{"usage:"}},
		{name: "unknown flag", args: []string{"validate", "-file", "x"}, wantCode: 2, wantStderr: []string{"flag provided but not defined: -file"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, name := range []string{"CODEHUB_S3_ACCESS_KEY", "CODEHUB_S3_SECRET_KEY"} {
				t.Setenv(name, tt.env[name])
			}
			var stdout, stderr bytes.Buffer
			code := runConfig(tt.args, &stdout, &stderr)
			if code != tt.wantCode {
				t.Errorf("exit code %d, want %d\nstderr:\n%s", code, tt.wantCode, stderr.String())
			}
			if stdout.String() != tt.wantStdout {
				t.Errorf("stdout = %q, want %q", stdout.String(), tt.wantStdout)
			}
			for _, want := range tt.wantStderr {
				if !strings.Contains(stderr.String(), want) {
					t.Errorf("stderr lacks %q:\n%s", want, stderr.String())
				}
			}
		})
	}
}
