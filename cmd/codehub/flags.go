package main

import (
	"context"
	"flag"
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

// signalContext ends when the process is asked to stop (SIGINT, SIGTERM).
func signalContext() (context.Context, context.CancelFunc) {
	return signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
}
