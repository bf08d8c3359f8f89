package main

import (
	"errors"
	"fmt"
	"io"

	"github.com/codehub-io/codehub/proxy"
	"github.com/codehub-io/codehub/workspace"
)

// runRestoreElsewhere gives up a home on a node that is down or gone for
// the workspace's last archive, restored on another node: the same as
// POST /api/v1/admin/workspaces/{id}/restore-elsewhere. Without -confirm
// (or with another archive key) it changes nothing and prints what would
// be lost.
func runRestoreElsewhere(args []string, stdout, stderr io.Writer) int {
	const name = "codehub workspace restore-elsewhere"
	fs, path := configFlags("workspace restore-elsewhere", stderr)
	confirm := fs.String("confirm", "", "the workspace's archive key: accept losing every change made since that archive")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() != 1 || !proxy.ValidID(fs.Arg(0)) {
		fmt.Fprintln(stderr, name+": give exactly one workspace id (26 lowercase characters)")
		return 2
	}
	if *path == "" {
		fmt.Fprintln(stderr, name+": -config FILE is required")
		return 2
	}
	id := fs.Arg(0)
	ctx, pool, closeDB, ok := adminDB(name, *path, stderr)
	if !ok {
		return 1
	}
	defer closeDB()
	svc := workspace.NewService(cliLogger("workspace", stderr), pool, workspace.Options{})
	w, err := svc.RestoreElsewhere(ctx, id, *confirm)
	var loss *workspace.LossError
	switch {
	case errors.As(err, &loss):
		fmt.Fprintf(stderr, "%s: nothing changed: %v\nto accept: %s -config %s -confirm %s %s\n", name, loss, name, *path, loss.ArchiveKey, id)
		return 1
	case errors.Is(err, workspace.ErrNotFound):
		fmt.Fprintf(stderr, "%s: no workspace %s\n", name, id)
		return 1
	case err != nil:
		fmt.Fprintf(stderr, "%s: %v\n", name, err)
		return 1
	}
	fmt.Fprintf(stdout, "workspace %s: its home on the lost node is given up; archive %s is restored on another node (desired %s)\n", w.ID, *confirm, w.DesiredState)
	return 0
}
