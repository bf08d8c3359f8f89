// Command codehub is CodeHub's single binary: the server (API, proxy and
// coordinator), migrations, the archive/restore data mover that runs inside
// Nomad batch jobs, the admin CLI, and the users' CLI (login, ws), which
// talks to a server through its REST API only.
package main

import (
	"fmt"
	"io"
	"os"
	"sort"
	// Owners' autostart schedules name IANA time zones; the server must
	// know them on a host without a zone database.
	_ "time/tzdata"
)

// version is set at build time with -ldflags "-X main.version=…".
var version = "dev"

type command struct {
	summary string
	run     func(args []string, stdin io.Reader, stdout, stderr io.Writer) int
}

func commands() map[string]command {
	return map[string]command{
		"server":  {"run the API, proxy and coordinator", runServer},
		"migrate": {"apply database migrations", runMigrate},
		"config": {"check a configuration file", func(a []string, _ io.Reader, o, e io.Writer) int {
			return runConfig(a, o, e)
		}},
		"job": {"archive or restore a workspace home (runs inside batch jobs)", func(a []string, _ io.Reader, o, e io.Writer) int {
			return runJob(a, o, e)
		}},
		"user": {"manage users: add, passwd, list, delete", func(a []string, i io.Reader, o, e io.Writer) int {
			return runUser(a, o, e, i)
		}},
		"workspace": {"administer workspaces: recover, stop-all, restore-elsewhere", func(a []string, i io.Reader, o, e io.Writer) int {
			return runWorkspace(a, o, e, i)
		}},
		"doctor": {"check that Nomad, PostgreSQL, Redis, S3 and the public URL are ready for codehub", runDoctor},
		"jobspec": {"print the HCL codehub would submit to Nomad", func(a []string, _ io.Reader, o, e io.Writer) int {
			return runJobspec(a, o, e)
		}},
		"agent":        {"the workspace agent (runs inside each workspace, started by its job)", runAgent},
		"login":        {"log in to a CodeHub server for the ws commands", runLogin},
		"ssh":          {"open a shell or run a command in a workspace over SSH, or carry SSH for ProxyCommand", runSSH},
		"config-ssh":   {"write ~/.ssh/config entries for your workspaces (ssh codehub.NAME, IDEs)", runConfigSSH},
		"logout":       {"revoke the stored token on its server and remove it", runLogout},
		"port-forward": {"forward a local port to a port of one of your workspaces", runPortForward},
		"ws":           {"work with your workspaces on a server: list, create, start, stop, open, logs, ...", runWs},
		"version": {"print the version", func(_ []string, _ io.Reader, stdout, _ io.Writer) int {
			fmt.Fprintf(stdout, "codehub %s\n", version)
			return 0
		}},
	}
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

func run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	cmds := commands()
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		usage(stderr, cmds)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	c, ok := cmds[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "codehub: unknown command %q\n\n", args[0])
		usage(stderr, cmds)
		return 2
	}
	return c.run(args[1:], stdin, stdout, stderr)
}

func usage(w io.Writer, cmds map[string]command) {
	fmt.Fprintln(w, "usage: codehub <command> [flags]")
	fmt.Fprintln(w)
	names := make([]string, 0, len(cmds))
	for n := range cmds {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-10s %s\n", n, cmds[n].summary)
	}
}
