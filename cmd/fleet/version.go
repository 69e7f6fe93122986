package main

import (
	"fmt"
	"io"

	"github.com/phase-console/fleet/internal/version"
)

const versionSummary = "Print which fleet this is: version, commit, Go version and platform, on one line."

func init() {
	addCommand(&command{name: "version", summary: versionSummary, run: runVersion})
}

// runVersion is `fleet version` (and `fleet --version`, SPEC O1).
func runVersion(args []string, stdout, stderr io.Writer) int {
	fs := newFlags("version", versionSummary, stdout, stderr)
	if st, done := parseFlags(fs, args); done {
		return st
	}
	fmt.Fprintln(stdout, version.Line())
	return 0
}
