package main

import (
	"errors"
	"fmt"
	"io"

	"github.com/codehub-io/codehub/config"
	"github.com/codehub-io/codehub/local"
	"github.com/codehub-io/codehub/proxy"
	"github.com/codehub-io/codehub/workspace"
)

const workspaceUsage = `usage:
  codehub workspace recover  -config FILE ID
  codehub workspace stop-all -config FILE
  codehub workspace restore-elsewhere -config FILE [-confirm ARCHIVE_KEY] ID`

// runWorkspace holds the administrator's workspace commands: recover
// clears the error of an ERROR workspace so reconciliation resumes, the
// same as POST /api/v1/admin/workspaces/{id}/recover; stop-all ends every
// process of the local backend.
func runWorkspace(args []string, stdout, stderr io.Writer, _ io.Reader) int {
	if len(args) > 0 && args[0] == "stop-all" {
		return runStopAll(args[1:], stdout, stderr)
	}
	if len(args) > 0 && args[0] == "restore-elsewhere" {
		return runRestoreElsewhere(args[1:], stdout, stderr)
	}
	if len(args) == 0 || args[0] != "recover" {
		fmt.Fprintln(stderr, workspaceUsage)
		return 2
	}
	fs, path := configFlags("workspace recover", stderr)
	if err := fs.Parse(args[1:]); err != nil {
		return 2
	}
	if fs.NArg() != 1 || !proxy.ValidID(fs.Arg(0)) {
		fmt.Fprintln(stderr, "codehub workspace recover: give exactly one workspace id (26 lowercase characters)")
		return 2
	}
	if *path == "" {
		fmt.Fprintln(stderr, "codehub workspace recover: -config FILE is required")
		return 2
	}
	id := fs.Arg(0)
	ctx, pool, closeDB, ok := adminDB("codehub workspace recover", *path, stderr)
	if !ok {
		return 1
	}
	defer closeDB()
	logger := cliLogger("workspace", stderr)
	svc := workspace.NewService(logger, pool, workspace.Options{})
	w, err := svc.Recover(ctx, id)
	switch {
	case errors.Is(err, workspace.ErrNotFound):
		fmt.Fprintf(stderr, "codehub workspace recover: no workspace %s\n", id)
		return 1
	case err != nil:
		fmt.Fprintf(stderr, "codehub workspace recover: %v\n", err)
		return 1
	}
	fmt.Fprintf(stdout, "recovered workspace %s: phase %s, desired %s\n", w.ID, w.Phase, w.DesiredState)
	return 0
}

// runStopAll kills every workspace process and job the local backend of the
// config started, for tearing a single-machine installation down: they
// outlive codehub by design. Run it after the server stopped, or the
// controller starts the workspaces again.
func runStopAll(args []string, stdout, stderr io.Writer) int {
	fs, path := configFlags("workspace stop-all", stderr)
	if !parseConfigCommand(fs, path, args, stderr) {
		return 2
	}
	cfg, err := loadConfig(*path, stderr)
	if err != nil {
		return 1
	}
	if cfg.Backend.Kind != config.BackendLocal {
		fmt.Fprintf(stderr, "codehub workspace stop-all: applies to backend %q only; Nomad stops its own jobs\n", config.BackendLocal)
		return 2
	}
	opts, err := local.OptionsFromConfig(cfg)
	if err != nil {
		fmt.Fprintf(stderr, "codehub workspace stop-all: %v\n", err)
		return 1
	}
	b, err := local.New(cliLogger("local", stderr), opts)
	if err != nil {
		fmt.Fprintf(stderr, "codehub workspace stop-all: %v\n", err)
		return 1
	}
	ctx, stop := signalContext()
	defer stop()
	if err := b.StopAll(ctx); err != nil {
		fmt.Fprintf(stderr, "codehub workspace stop-all: %v\n", err)
		return 1
	}
	fmt.Fprintf(stdout, "stopped every workspace process and job under %s\n", opts.DataDir)
	return 0
}
