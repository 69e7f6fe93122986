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
	"strconv"
	"strings"

	"github.com/phase-console/fleet/pairing"
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

// scryptHelperArg runs fleet as the scrypt helper process of a running supervisor (see
// pairing.ServeKeyHelper): not a command a person uses, so it is not listed.
const scryptHelperArg = "__scrypt-helper"

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 1 && args[0] == scryptHelperArg {
		if err := pairing.ServeKeyHelper(os.Stdin, stdout); err != nil {
			fmt.Fprintln(stderr, err)
			return 1
		}
		return 0
	}
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "-help" {
		usage(stdout)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	if args[0] == "--version" || args[0] == "-version" {
		return runVersion(args[1:], stdout, stderr)
	}
	if args[0] == "help" {
		// `fleet help serve` is `fleet serve --help`.
		if len(args) == 1 {
			usage(stdout)
			return 0
		}
		c, ok := commands[args[1]]
		if !ok {
			fmt.Fprintf(stderr, "fleet help: unknown command %q; run 'fleet --help'\n", args[1])
			return 2
		}
		return c.run([]string{"--help"}, stdout, stderr)
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
	fmt.Fprintln(w, "\nUsage: fleet <command> [flags]   (fleet help <command>, or fleet <command> --help, for its flags)")
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

// A flagSet is a subcommand's flags. Its help (--help, -h) goes to stdout and spells every flag
// with two dashes, as docs/commands.md does; a bad flag is one line on stderr and exit status 2.
type flagSet struct {
	*flag.FlagSet
	cmd     string // "serve", "token rotate"
	summary string
	stdout  io.Writer
	stderr  io.Writer
}

// newFlags makes the flags of `fleet <name>`. Every subcommand uses it, so that help and errors
// look the same everywhere.
func newFlags(name, summary string, stdout, stderr io.Writer) *flagSet {
	fs := &flagSet{FlagSet: flag.NewFlagSet("fleet "+name, flag.ContinueOnError), cmd: name, summary: summary, stdout: stdout, stderr: stderr}
	fs.SetOutput(io.Discard) // the flag package's own messages spell flags with one dash
	fs.Usage = func() {}
	return fs
}

// printHelp writes the usage, the summary and every flag as --name.
func (fs *flagSet) printHelp(w io.Writer) {
	fmt.Fprintf(w, "Usage: fleet %s [flags]\n\n%s\n\nFlags:\n", fs.cmd, fs.summary)
	fs.VisitAll(func(f *flag.Flag) {
		typ, help := flag.UnquoteUsage(f)
		line := "  --" + f.Name
		if _, isPort := f.Value.(portValue); isPort || typ == "int" {
			typ = "n"
		}
		if typ != "" {
			line += " " + strings.ToUpper(typ)
		}
		fmt.Fprintf(w, "%s\n    \t%s", line, strings.ReplaceAll(help, "\n", "\n    \t"))
		if d := f.DefValue; d != "" && d != "0" && d != "false" && d != "-1" {
			fmt.Fprintf(w, " (default %s)", d)
		}
		fmt.Fprintln(w)
	})
	fmt.Fprintln(w, "  --help\n    \tthis help")
}

// parseFlags parses args (no positional arguments allowed) and returns (exit status, done): done
// is true when the caller must return the status at once (--help: 0, bad flags: 2).
func parseFlags(fs *flagSet, args []string) (int, bool) {
	err := fs.Parse(args)
	if errors.Is(err, flag.ErrHelp) {
		fs.printHelp(fs.stdout)
		return 0, true
	}
	if err != nil {
		fmt.Fprintf(fs.stderr, "fleet %s: %s; see 'fleet %s --help'\n", fs.cmd, doubleDash(err.Error()), fs.cmd)
		return 2, true
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(fs.stderr, "fleet %s: unexpected argument %q; see 'fleet %s --help'\n", fs.cmd, fs.Arg(0), fs.cmd)
		return 2, true
	}
	return 0, false
}

// doubleDash rewrites the flag package's "-name" in its error messages as "--name".
func doubleDash(msg string) string {
	for _, p := range []string{"for flag -", "not defined: -", "argument: -"} {
		msg = strings.Replace(msg, p, p+"-", 1)
	}
	return msg
}

// portValue is a TCP port flag that refuses, at parse time, anything outside min-65535.
type portValue struct {
	p   *int
	min int
}

func (v portValue) String() string {
	if v.p == nil {
		return ""
	}
	return strconv.Itoa(*v.p)
}

func (v portValue) Set(s string) error {
	n, err := strconv.Atoi(s)
	if err != nil || n < v.min || n > 65535 {
		return fmt.Errorf("want %d-65535", v.min)
	}
	*v.p = n
	return nil
}

// portFlag defines --name, a TCP port: a value outside min-65535 is bad usage (exit 2, one line
// naming --name). def is the default, used when the flag is not given (it may be outside the
// range, e.g. 0 for "not given").
func portFlag(fs *flagSet, name string, def, min int, usage string) *int {
	p := new(int)
	*p = def
	fs.Var(portValue{p: p, min: min}, name, usage)
	return p
}
