package main

import (
	"bufio"
	"crypto/subtle"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strings"

	"github.com/phase-console/fleet/internal/state"
	"github.com/phase-console/fleet/pairing"
)

const reachPasswordSummary = "Set the pairing password a phone needs, with a code, to pair (stored only as its scrypt hash)."

func init() {
	addReachCommand(&command{name: "password", summary: reachPasswordSummary, run: runReachPassword})
}

// runReachPassword is `fleet reach password [--stdin] [--state-dir DIR]` (SPEC R8). The password
// is typed twice on the terminal without echo, or read as one line from stdin with --stdin, and
// stored only as `$scrypt$ln=17,r=8,p=1$<salt>$<hash>` in <stateHome>/fleet/reach/password (0600,
// atomic). It is never printed. Two different passwords, or one shorter than 8 bytes, store
// nothing and exit 1.
func runReachPassword(args []string, stdout, stderr io.Writer) int {
	const summary = reachPasswordSummary + "\nIt is asked twice on the terminal without echo; --stdin reads one line from stdin instead.\nCodes already issued stay valid with the new password."
	fs := newFlags("reach password", summary, stdout, stderr)
	fromStdin := fs.Bool("stdin", false, "read the password as one line from stdin (for scripts), not from the terminal")
	stateDir := fs.String("state-dir", "", "the state folder `DIR` (default $PHASE_CONSOLE_STATE_HOME, $XDG_STATE_HOME/phase-console or ~/.local/state/phase-console)")
	if st, done := parseFlags(fs, args); done {
		return st
	}
	fail := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "fleet reach password: "+format+"\n", a...)
		return 1
	}
	home, err := state.Home(*stateDir)
	if err != nil {
		return fail("%v", err)
	}

	var pw []byte
	switch {
	case *fromStdin:
		pw, err = readPasswordLine(passwordStdin)
		if err != nil {
			return fail("reading stdin: %v; nothing was stored", err)
		}
	case stdinIsTerminal():
		fmt.Fprint(stderr, "Pairing password: ")
		pw, err = readHidden()
		fmt.Fprintln(stderr)
		if err != nil {
			return fail("reading the password: %v; nothing was stored", err)
		}
		fmt.Fprint(stderr, "Again: ")
		again, err := readHidden()
		fmt.Fprintln(stderr)
		if err != nil {
			return fail("reading the password: %v; nothing was stored", err)
		}
		same := subtle.ConstantTimeCompare(pw, again) == 1
		clear(again)
		if !same {
			clear(pw)
			return fail("the two passwords differ; nothing was stored")
		}
	default:
		return fail("stdin is not a terminal: run it in a terminal to type the password, or pass --stdin to read one line from stdin")
	}
	defer clear(pw)

	dir := pairingFolder(home)
	if err := pairing.SetPassword(dir, pw); err != nil {
		return fail("%v; nothing was stored", err)
	}
	fmt.Fprintf(stdout, "stored the pairing password's scrypt hash in %s; codes already issued stay valid\n", filepath.Join(dir, pairing.PasswordFile))
	return 0
}

// readPasswordLine reads one line (its \n or \r\n dropped) of at most pairing.MaxPasswordLen
// bytes; a longer one is an error, so that it is never cut short silently.
func readPasswordLine(r io.Reader) ([]byte, error) {
	br := bufio.NewReaderSize(io.LimitReader(r, pairing.MaxPasswordLen+2), pairing.MaxPasswordLen+2)
	line, err := br.ReadSlice('\n')
	if err != nil && !errors.Is(err, io.EOF) {
		if errors.Is(err, bufio.ErrBufferFull) {
			return nil, fmt.Errorf("the line is longer than %d bytes", pairing.MaxPasswordLen)
		}
		return nil, err
	}
	s := strings.TrimSuffix(strings.TrimSuffix(string(line), "\n"), "\r")
	if len(s) > pairing.MaxPasswordLen {
		return nil, fmt.Errorf("the line is longer than %d bytes", pairing.MaxPasswordLen)
	}
	return []byte(s), nil
}
