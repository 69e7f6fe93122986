package main

import (
	"os"
	"strings"
	"testing"
)

// TestMain lets the test binary stand in for fleet as the supervisor's scrypt helper process
// (serve runs it as os.Executable() with scryptHelperArg).
func TestMain(m *testing.M) {
	if len(os.Args) == 2 && os.Args[1] == scryptHelperArg {
		os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
	}
	if os.Getenv("FLEET_RUN_MAIN") == "1" { // the test binary as the fleet binary, for process tests
		os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}

// TestHelpCommand: `fleet help CMD` prints CMD's own help (exit 0), the same as `fleet CMD --help`;
// `fleet help` alone is the general help; an unknown command is bad usage.
func TestHelpCommand(t *testing.T) {
	for name := range commands {
		st, out, errs := runFleet("help", name)
		_, want, _ := runFleet(name, "--help")
		if st != 0 || out != want || out == "" {
			t.Errorf("fleet help %s: exit %d, stdout %q, stderr %q; want %q", name, st, out, errs, want)
		}
	}
	if st, out, _ := runFleet("help"); st != 0 || !strings.Contains(out, "Commands:") {
		t.Errorf("fleet help: %d %q", st, out)
	}
	if st, _, errs := runFleet("help", "nope"); st != 2 || !strings.Contains(errs, "nope") {
		t.Errorf("fleet help nope: %d %q", st, errs)
	}
}

// TestHelpSpellsDoubleDash: every subcommand's help lists its flags as --name, docs/commands.md's
// spelling, never -name; a bad flag is one stderr line that spells it --name.
func TestHelpSpellsDoubleDash(t *testing.T) {
	for name := range commands {
		if name == "token" || name == "reach" {
			continue // their help is the subcommand list; the subcommands are below
		}
		_, out, _ := runFleet(name, "--help")
		checkDoubleDash(t, name, out)
	}
	_, out, _ := runFleet("token", "rotate", "--help")
	checkDoubleDash(t, "token rotate", out)
	for name := range reachCommands {
		_, out, _ := runFleet("reach", name, "--help")
		checkDoubleDash(t, "reach "+name, out)
	}
	if _, out, _ := runFleet("serve", "--help"); !strings.Contains(out, "--port N") || !strings.Contains(out, "--state-dir DIR") {
		t.Errorf("serve --help:\n%s", out)
	}

	st, out, errs := runFleet("serve", "--bogus")
	if st != 2 || out != "" || strings.Count(errs, "\n") != 1 || !strings.Contains(errs, "--bogus") || !strings.Contains(errs, "fleet serve --help") {
		t.Errorf("serve --bogus: exit %d, stdout %q, stderr %q", st, out, errs)
	}
	st, _, errs = runFleet("consoles", "--supervisor")
	if st != 2 || !strings.Contains(errs, "argument: --supervisor") {
		t.Errorf("consoles --supervisor without a value: exit %d, stderr %q", st, errs)
	}
}

func checkDoubleDash(t *testing.T, name, help string) {
	t.Helper()
	flags := 0
	for _, l := range strings.Split(help, "\n") {
		f := strings.Fields(l)
		if len(f) == 0 || !strings.HasPrefix(l, "  -") {
			continue
		}
		flags++
		if !strings.HasPrefix(f[0], "--") {
			t.Errorf("fleet %s --help: %q spells a flag with one dash", name, l)
		}
	}
	if flags == 0 {
		t.Errorf("fleet %s --help lists no flag:\n%s", name, help)
	}
}

// TestPortFlag: a port flag refuses a value outside its range at parse time: exit 2, one line
// naming --port. (serve: 1-65535; console: 0-65535, 0 is any free port.)
func TestPortFlag(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want int
	}{
		{[]string{"serve", "--port", "0"}, 2},
		{[]string{"serve", "--port", "65536"}, 2},
		{[]string{"console", "--id", "alpha", "--port", "-1"}, 2},
		{[]string{"console", "--id", "alpha", "--port", "x"}, 2},
	} {
		st, _, errs := runFleet(tc.args...)
		if st != tc.want || !strings.Contains(errs, "--port") || strings.Count(errs, "\n") != 1 {
			t.Errorf("%v: exit %d, stderr %q; want %d and one line naming --port", tc.args, st, errs, tc.want)
		}
	}
	fs := newFlags("x", "", nil, nil)
	p := portFlag(fs, "port", 0, 1, "")
	if err := fs.Parse(nil); err != nil || *p != 0 {
		t.Errorf("default: %d, %v; want the default 0 kept when the flag is not given", *p, err)
	}
	if err := fs.Parse([]string{"--port", "0"}); err == nil {
		t.Error("--port 0 accepted with min 1")
	}
}
