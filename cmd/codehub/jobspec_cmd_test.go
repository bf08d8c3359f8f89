package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const jobspecTestWorkspace = "01jb3x7k9q2m5n8p4r6s0t1v2w"

func writeJobspecConfig(t *testing.T, driver string) string {
	t.Helper()
	codehubPath := ""
	if driver != "docker" {
		codehubPath = "  codehub_path = \"/usr/local/bin/codehub\"\n"
	}
	cfg := `
s3 {
  access_key = "render-access-key-1234"
  secret_key = "render-secret-key-5678"
}
backend "nomad" {
  driver    = "` + driver + `"
  job_image = "ghcr.io/codehub-io/codehub:1.0.0"
` + codehubPath + `}
`
	path := filepath.Join(t.TempDir(), "codehub.hcl")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestJobspecRender(t *testing.T) {
	cases := []struct {
		driver, kind string
		want         []string
	}{
		{"docker", "workspace", []string{`job "ws-` + jobspecTestWorkspace + `"`, `destination = "/home/coder"`, `driver = "docker"`}},
		{"raw_exec", "workspace", []string{`HOME = "/srv/volumes/abc"`, `driver = "raw_exec"`}},
		{"docker", "archive", []string{`job "ws-` + jobspecTestWorkspace + `-archive"`, `"codehub.io/attempt"      = "3"`, `"codehub.io/op-id"        = "01op0000000000000000000000"`}},
		{"raw_exec", "restore", []string{`args    = ["job", "restore", "--dst", "/srv/volumes/abc"]`}},
	}
	for _, tc := range cases {
		t.Run(tc.driver+"-"+tc.kind, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			args := []string{"render", "-config", writeJobspecConfig(t, tc.driver), "-kind", tc.kind,
				"-workspace", jobspecTestWorkspace, "-op-id", "01op0000000000000000000000", "-attempt", "3"}
			if tc.driver == "raw_exec" {
				args = append(args, "-home", "/srv/volumes/abc")
			}
			if code := runJobspec(args, &stdout, &stderr); code != 0 {
				t.Fatalf("exit %d: %s", code, stderr.String())
			}
			out := stdout.String()
			for _, w := range tc.want {
				if !strings.Contains(out, w) {
					t.Errorf("output lacks %q", w)
				}
			}
			for _, secret := range []string{"render-access-key-1234", "render-secret-key-5678"} {
				if strings.Contains(out, secret) || strings.Contains(stderr.String(), secret) {
					t.Errorf("render printed a secret")
				}
			}
		})
	}
}

func TestJobspecRenderUsage(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if code := runJobspec([]string{"render", "-kind", "service", "-workspace", "x"}, &stdout, &stderr); code != 2 {
		t.Fatalf("unknown kind: exit %d, want 2", code)
	}
	if code := runJobspec([]string{"render", "-kind", "workspace"}, &stdout, &stderr); code != 2 {
		t.Fatalf("missing workspace: exit %d, want 2", code)
	}
	// Ids and attempts the product never submits are refused, not rendered.
	cfg := writeJobspecConfig(t, "docker")
	for _, args := range [][]string{
		{"-workspace", "not-a-workspace"},
		{"-workspace", strings.ToUpper(jobspecTestWorkspace)},
		{"-workspace", jobspecTestWorkspace, "-kind", "archive", "-attempt", "0"},
		{"-workspace", jobspecTestWorkspace, "extra"},
	} {
		args = append([]string{"render", "-config", cfg, "-home", "/srv/volumes/abc"}, args...)
		if code := runJobspec(args, &stdout, &stderr); code != 2 {
			t.Errorf("%q: exit %d, want 2; stderr %q", args, code, stderr.String())
		}
	}
	if stdout.Len() != 0 {
		t.Fatalf("usage errors printed to stdout: %q", stdout.String())
	}
}
