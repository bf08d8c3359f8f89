package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/hashicorp/go-hclog"

	"github.com/codehub-io/codehub/agent"
)

// runAgent implements `codehub agent -listen ADDR [-socket PATH] [-exclude-port N] [-home DIR] --
// PROGRAM ARGS…`: the workspace agent, which starts the workspace program
// and serves the server beside it (see package agent). Its secrets come in
// its environment, never as flags, which process listings show.
func runAgent(args []string, _ io.Reader, _, stderr io.Writer) int {
	fs := flag.NewFlagSet("agent", flag.ContinueOnError)
	fs.SetOutput(stderr)
	listen := fs.String("listen", "", "address to serve the server on (host:port)")
	home := fs.String("home", "", "the workspace's home: HOME of the program and of SSH sessions (default $HOME)")
	socket := fs.String("socket", "", "a Unix socket (a path, or @name for an abstract one) to serve a server on the same machine on as well")
	var exclude portList
	fs.Var(&exclude, "exclude-port", "a port of the workbench itself, never listed nor forwarded (repeatable, or comma separated)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *listen == "" || fs.NArg() == 0 {
		fmt.Fprintln(stderr, "usage: codehub agent -listen HOST:PORT [-socket PATH] [-exclude-port N] [-home DIR] -- PROGRAM [ARGS…]")
		return 2
	}
	logger := hclog.New(&hclog.LoggerOptions{Name: "agent", Output: stderr, Level: hclog.Info})
	code, err := agent.Run(context.Background(), logger, agent.RunConfig{
		Listen: *listen, Socket: *socket, ExcludePorts: exclude, Home: *home, Program: fs.Arg(0), Args: fs.Args()[1:],
	})
	if err != nil {
		logger.Error("agent failed", "error", err)
	}
	return code
}

// portList is a repeatable flag of port numbers.
type portList []int

func (p *portList) String() string { return fmt.Sprint([]int(*p)) }

func (p *portList) Set(v string) error {
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s == "" {
			continue
		}
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > 65535 {
			return fmt.Errorf("not a port: %q", s)
		}
		*p = append(*p, n)
	}
	return nil
}
