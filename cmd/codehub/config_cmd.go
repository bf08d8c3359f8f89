package main

import (
	"errors"
	"fmt"
	"io"

	"github.com/codehub-io/codehub/config"
)

// runConfig implements `codehub config validate -config FILE`: it loads the
// file exactly as the server would, environment included, and prints either
// "configuration is valid" or every problem found, one per line with its
// file:line:column.
func runConfig(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] != "validate" {
		fmt.Fprintln(stderr, "usage: codehub config validate -config FILE")
		return 2
	}
	fs, path := configFlags("config validate", stderr)
	if err := fs.Parse(args[1:]); err != nil {
		return 2
	}
	if *path == "" || fs.NArg() > 0 {
		fmt.Fprintln(stderr, "usage: codehub config validate -config FILE")
		return 2
	}

	if _, err := config.Load(*path); err != nil {
		fmt.Fprintln(stderr, err)
		var cerr *config.Error
		if errors.As(err, &cerr) {
			fmt.Fprintf(stderr, "%s: configuration is invalid (%d %s)\n", *path, len(cerr.Diagnostics), plural(len(cerr.Diagnostics), "problem", "problems"))
		}
		return 1
	}
	fmt.Fprintln(stdout, "configuration is valid")
	return 0
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}
