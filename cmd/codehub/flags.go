package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os/signal"
	"syscall"
)

// configFlags returns the flag set of a command that reads the HCL
// configuration, with its -config flag; parse errors and usage go to stderr.
func configFlags(name string, stderr io.Writer) (*flag.FlagSet, *string) {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	return fs, fs.String("config", "", "path of the HCL configuration file")
}

// parseConfigCommand parses the command line of a command that takes
// nothing but flags and reads the configuration. It refuses, as usage
// errors, what the command would otherwise ignore or misread: a positional
// argument (often a file meant for -config) and a missing -config.
func parseConfigCommand(fs *flag.FlagSet, path *string, args []string, stderr io.Writer) bool {
	if err := fs.Parse(args); err != nil {
		return false
	}
	switch {
	case fs.NArg() > 0:
		fmt.Fprintf(stderr, "codehub %s: unexpected argument %q\n", fs.Name(), fs.Arg(0))
	case *path == "":
		fmt.Fprintf(stderr, "codehub %s: -config FILE is required\n", fs.Name())
	default:
		return true
	}
	return false
}

// signalContext ends when the process is asked to stop (SIGINT, SIGTERM).
func signalContext() (context.Context, context.CancelFunc) {
	return signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
}
