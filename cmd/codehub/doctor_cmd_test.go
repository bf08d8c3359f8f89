package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/codehub-io/codehub/doctor"
	"github.com/codehub-io/codehub/internal/testenv"
)

func TestDoctorUsage(t *testing.T) {
	for _, args := range [][]string{
		nil,
		{"-config", "a.hcl", "extra"},
		{"-config", "a.hcl", "-clock-tolerance", "0s"},
		{"-config", "a.hcl", "-no-such-flag"},
	} {
		var stdout, stderr bytes.Buffer
		if code := runDoctor(args, nil, &stdout, &stderr); code != 2 || stdout.Len() != 0 || stderr.Len() == 0 {
			t.Errorf("%q: exit %d, stdout %q, stderr %q", args, code, stdout.String(), stderr.String())
		}
	}
}

// An invalid file is a failed finding, in the form asked for, and nothing
// else is tried.
func TestDoctorInvalidConfig(t *testing.T) {
	path := filepath.Join(t.TempDir(), "codehub.hcl")
	if err := os.WriteFile(path, []byte("backend \"local\" {}\nnonsense = 1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	if code := runDoctor([]string{"-config", path, "-json"}, nil, &stdout, &stderr); code != 1 {
		t.Fatalf("exit %d: %s %s", code, stdout.String(), stderr.String())
	}
	var r struct {
		OK       bool
		Findings []doctor.Finding
	}
	if err := json.Unmarshal(stdout.Bytes(), &r); err != nil || r.OK || len(r.Findings) != 1 || r.Findings[0].Check != "config" || r.Findings[0].Status != doctor.Fail {
		t.Fatalf("report %+v (%v): %s", r, err, stdout.String())
	}
}

// The single-machine backend: the services are checked, Nomad is not; a
// database not migrated yet is a warning the server resolves at start,
// so the exit status is 0, and the text says what to change.
func TestDoctorLocal(t *testing.T) {
	path := testConfigFile(t, testenv.RedisURL(t))
	var stdout, stderr bytes.Buffer
	code := runDoctor([]string{"-config", path}, nil, &stdout, &stderr)
	out := stdout.String()
	if code != 0 {
		t.Fatalf("exit %d:\n%s%s", code, out, stderr.String())
	}
	for _, want := range []string{"OK    postgres ", "WARN  postgres.schema", "OK    redis", "OK    s3.write", "OK    public_url", "To change:", "- postgres.schema: codehub server applies them at start", "0 failed, 1 warnings"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if regexp.MustCompile(`(?m)^[A-Z]+ +(nomad|clock\.nomad)`).MatchString(out) {
		t.Errorf("Nomad checked for the single-machine backend:\n%s", out)
	}
}
