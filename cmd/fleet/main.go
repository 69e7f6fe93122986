// Command fleet is a per-machine supervisor and reverse proxy for local consoles: one front door on
// 127.0.0.1, published by Tailscale Serve, that proves who is calling and tells each console.
//
// Each subcommand lives in its own file and registers itself in init with addCommand.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
)

// A command is one subcommand of fleet.
type command struct {
	name    string
	summary string // one line for `fleet --help`
	// run runs the command with its arguments (after the name). It returns the exit status.
	run func(args []string, stdout, stderr io.Writer) int
}

var commands = map[string]*command{}

func addCommand(c *command) {
	if _, dup := commands[c.name]; dup {
		panic("duplicate command " + c.name)
	}
	commands[c.name] = c
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		usage(stdout)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	c, ok := commands[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "fleet: unknown command %q; run 'fleet --help'\n", args[0])
		return 2
	}
	return c.run(args[1:], stdout, stderr)
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "fleet — one front door for the consoles on this machine.")
	fmt.Fprintln(w, "\nUsage: fleet <command> [flags]   (fleet <command> --help for its flags)")
	fmt.Fprintln(w, "\nCommands:")
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-14s %s\n", n, commands[n].summary)
	}
}

// newFlags makes a FlagSet for a subcommand whose --help prints summary and the flags to stdout.
func newFlags(name, summary string, stdout, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("fleet "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fs.SetOutput(stdout)
		fmt.Fprintf(stdout, "Usage: fleet %s [flags]\n\n%s\n\nFlags:\n", name, summary)
		fs.PrintDefaults()
		fs.SetOutput(stderr)
	}
	return fs
}

// parseFlags parses args (no positional arguments allowed) and returns (exit status, done): done is true when the caller must return
// the status at once (--help: 0, bad flags: 2).
func parseFlags(fs *flag.FlagSet, args []string) (int, bool) {
	err := fs.Parse(args)
	if errors.Is(err, flag.ErrHelp) {
		return 0, true
	}
	if err != nil {
		return 2, true
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(fs.Output(), "%s: unexpected argument %q\n", fs.Name(), fs.Arg(0))
		return 2, true
	}
	return 0, false
}
