package main

import (
	"fmt"
	"io"
	"sort"
)

const reachSummary = "The direct-reach door for paired phones: 'fleet reach status|password|pair|devices|revoke'."

func init() {
	addCommand(&command{name: "reach", summary: reachSummary, run: runReach})
}

// reachCommands are the subcommands of `fleet reach`; each lives in its own file and adds itself
// in init with addReachCommand.
var reachCommands = map[string]*command{}

func addReachCommand(c *command) {
	if _, dup := reachCommands[c.name]; dup {
		panic("duplicate reach command " + c.name)
	}
	reachCommands[c.name] = c
}

// runReach dispatches `fleet reach <subcommand>`.
func runReach(args []string, stdout, stderr io.Writer) int {
	usage := func(w io.Writer) {
		fmt.Fprintf(w, "Usage: fleet reach <subcommand> [flags]\n\n%s\n\nSubcommands:\n", reachSummary)
		names := make([]string, 0, len(reachCommands))
		for n := range reachCommands {
			names = append(names, n)
		}
		sort.Strings(names)
		for _, n := range names {
			fmt.Fprintf(w, "  %-10s %s\n", n, reachCommands[n].summary)
		}
	}
	if len(args) == 0 {
		usage(stderr)
		return 2
	}
	switch args[0] {
	case "-h", "--help", "-help", "help":
		usage(stdout)
		return 0
	}
	c, ok := reachCommands[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "fleet reach: unknown subcommand %q; run 'fleet reach --help'\n", args[0])
		return 2
	}
	return c.run(args[1:], stdout, stderr)
}
