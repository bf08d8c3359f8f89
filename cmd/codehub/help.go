package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
)

// userCommand describes a command of the user CLI for its help text,
// which is laid out like nomad's: usage line, what it does, then each
// option with its description below it.
type userCommand struct {
	usage string // after "Usage: "
	about string // paragraphs, each line indented by two spaces when printed
	extra string // printed after the options, as it is
}

// flagSet makes the flag set of a user command; -h prints its help to
// stdout.
func (c userCommand) flagSet(name string, stdout, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { c.printHelp(fs, stdout) }
	return fs
}

func (c userCommand) printHelp(fs *flag.FlagSet, w io.Writer) {
	fmt.Fprintf(w, "Usage: %s\n\n", c.usage)
	for _, line := range strings.Split(strings.TrimSpace(c.about), "\n") {
		if line == "" {
			fmt.Fprintln(w)
			continue
		}
		fmt.Fprintf(w, "  %s\n", line)
	}
	var opts strings.Builder
	fs.VisitAll(func(f *flag.Flag) {
		value, usage := flag.UnquoteUsage(f)
		if value == "" {
			fmt.Fprintf(&opts, "  -%s\n", f.Name)
		} else {
			fmt.Fprintf(&opts, "  -%s=<%s>\n", f.Name, value)
		}
		fmt.Fprintf(&opts, "    %s\n\n", usage)
	})
	if opts.Len() > 0 {
		fmt.Fprintf(w, "\nOptions:\n\n%s", opts.String())
	} else {
		fmt.Fprintln(w)
	}
	if c.extra != "" {
		fmt.Fprint(w, c.extra)
	}
}

// parseArgs parses flags given before, between or after the positional
// arguments (`ws create NAME -image I`) and returns the positional ones.
// help is true when -h or -help was asked for (the help is printed).
func parseArgs(fs *flag.FlagSet, args []string) (positional []string, help bool, err error) {
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil, true, nil
			}
			return nil, false, err
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return positional, false, nil
		}
		if rest[0] == "--" {
			return append(positional, rest[1:]...), false, nil
		}
		positional = append(positional, rest[0])
		args = rest[1:]
	}
}
