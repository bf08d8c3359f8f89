package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/codehub-io/codehub/controller"
	"github.com/codehub-io/codehub/local"
)

// `make stop` relies on stop-all to end the workspaces a stopped server
// left running.
func TestWorkspaceStopAllEndsLocalWorkspaces(t *testing.T) {
	dir := t.TempDir()
	program := filepath.Join(dir, "code-server")
	if err := os.WriteFile(program, []byte("#!/bin/sh\nexec sleep 3600\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	dataDir := filepath.Join(dir, "data")
	cfg := filepath.Join(dir, "codehub.hcl")
	src := fmt.Sprintf("s3 {\n  access_key = \"a\"\n  secret_key = \"b\"\n}\nbackend \"local\" {\n  data_dir = %q\n  code_server = %q\n}\n", dataDir, program)
	if err := os.WriteFile(cfg, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	b, err := local.New(hclog.NewNullLogger(), local.Options{DataDir: dataDir, CodeServer: program})
	if err != nil {
		t.Fatal(err)
	}
	const id = "01jb3x7k9q2m5n8p4r6s0t1v2w"
	ctx := context.Background()
	if err := b.ProvisionVolume(ctx, controller.VolumeSpec{WorkspaceID: id}); err != nil {
		t.Fatal(err)
	}
	if err := b.StartWorkspace(ctx, controller.WorkspaceSpec{WorkspaceID: id}); err != nil {
		t.Fatal(err)
	}
	live := func() bool {
		snap, err := b.Observe(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return snap.Workspaces[id].ContainerLive
	}
	if !live() {
		t.Fatal("workspace not live after start")
	}
	t.Cleanup(func() { _ = b.StopAll(ctx) })

	var out, errOut bytes.Buffer
	if code := runWorkspace([]string{"stop-all", "-config", cfg}, &out, &errOut, strings.NewReader("")); code != 0 {
		t.Fatalf("stop-all: exit %d: %s", code, errOut.String())
	}
	// SIGKILL is delivered before kill returns; only the reaping by init
	// may lag, and a bound keeps a broken build from hanging.
	for deadline := time.Now().Add(30 * time.Second); live(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("workspace still live after stop-all")
		}
	}
}

func TestWorkspaceStopAllRefusesNomad(t *testing.T) {
	cfg := filepath.Join(t.TempDir(), "codehub.hcl")
	src := "s3 {\n  access_key = \"a\"\n  secret_key = \"b\"\n}\nbackend \"nomad\" {\n  job_image = \"x:1\"\n}\n"
	if err := os.WriteFile(cfg, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	var out, errOut bytes.Buffer
	if code := runWorkspace([]string{"stop-all", "-config", cfg}, &out, &errOut, strings.NewReader("")); code != 2 || !strings.Contains(errOut.String(), "local") {
		t.Fatalf("stop-all on nomad: exit %d: %s", code, errOut.String())
	}
}
