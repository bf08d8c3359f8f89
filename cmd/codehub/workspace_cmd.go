package main

import (
	"errors"
	"fmt"
	"io"

	"github.com/codehub-io/codehub/proxy"
	"github.com/codehub-io/codehub/workspace"
)

const workspaceUsage = `usage:
  codehub workspace recover -config FILE ID`

// runWorkspace holds the administrator's workspace commands: recover
// clears the error of an ERROR workspace so reconciliation resumes, the
// same as POST /api/v1/admin/workspaces/{id}/recover.
func runWorkspace(args []string, stdout, stderr io.Writer, _ io.Reader) int {
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
