package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/phase-console/fleet/internal/peercred"
	"github.com/phase-console/fleet/internal/state"
	"github.com/phase-console/fleet/supervisor"
)

const (
	consolesSummary = "List the consoles registered with the running supervisor."
	registerSummary = "Register a console with the running supervisor (for scripts and non-Go consoles)."
)

func init() {
	addCommand(&command{name: "consoles", summary: consolesSummary, run: runConsoles})
	addCommand(&command{name: "register", summary: registerSummary, run: runRegister})
}

// apiClient talks to the running supervisor's /fleet/v1 API with the fleet bearer.
type apiClient struct {
	base  string // "http://127.0.0.1:7420"
	token string
	http  *http.Client
}

// newAPIClient finds the supervisor (flag, else supervisor.addr) and the token. It refuses an
// address that is not a loopback literal: the bearer never leaves this machine.
func newAPIClient(stateDir, supervisorAddr string) (*apiClient, error) {
	home, err := state.Home(stateDir)
	if err != nil {
		return nil, err
	}
	dir := state.FleetDir(home)
	addr := supervisorAddr
	if addr == "" {
		b, err := state.ReadPrivateFile(filepath.Join(dir, state.AddrFile))
		if errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("no fleet serve is running for %s (%s); start 'fleet serve' with that state folder, or pass --supervisor ADDR",
				home, lookedIn(stateDir))
		}
		if err != nil {
			return nil, err
		}
		addr = strings.TrimSpace(string(b))
	}
	ap, err := netip.ParseAddrPort(addr)
	if err != nil || !ap.Addr().IsLoopback() {
		return nil, fmt.Errorf("supervisor address %q is not a loopback literal like 127.0.0.1:7420; refusing to send the bearer", addr)
	}
	tok, err := readToken(stateDir, home)
	if err != nil {
		return nil, err
	}
	return &apiClient{base: "http://" + ap.String(), token: tok, http: peercred.OwnClient(10*time.Second, true)}, nil // never to a squatter
}

// lookedIn says which state folder a command looked in, and how to name another: a user who ran
// 'fleet serve --state-dir X' must pass the same --state-dir to every other command.
func lookedIn(stateDir string) string {
	if stateDir == "" {
		return "the default state folder, as no --state-dir was given; pass --state-dir DIR if fleet serve uses another"
	}
	return "the folder given with --state-dir"
}

// errNoToken is readToken's error when the token file does not exist.
var errNoToken = errors.New("no fleet token")

// readToken reads the fleet token of home, with an error that says where it looked and what to do.
// The error never holds the token.
func readToken(stateDir, home string) (string, error) {
	path := filepath.Join(state.FleetDir(home), state.TokenFile)
	tok, err := state.ReadToken(path)
	if errors.Is(err, os.ErrNotExist) {
		return "", fmt.Errorf("%w at %s (%s); 'fleet serve' creates it on first start", errNoToken, path, lookedIn(stateDir))
	}
	if err != nil {
		return "", fmt.Errorf("cannot use the fleet token: %w", err)
	}
	return tok, nil
}

func (c *apiClient) do(method, path string, body any) (*http.Response, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, c.base+path, rd)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	req.Header.Set("Accept", "application/json") // refusals come back as supervisor.APIError
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.http.Do(req)
	if err != nil && errors.Is(err, syscall.ECONNREFUSED) {
		return nil, fmt.Errorf("nothing answers at %s: is fleet serve running? (a stale supervisor.addr names where it last ran)", strings.TrimPrefix(c.base, "http://"))
	}
	return resp, err
}

// apiError is one line for a refusal of the API: status, reason word, detail.
func apiError(resp *http.Response) error {
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	var e supervisor.APIError
	if json.Unmarshal(b, &e) == nil && e.Error != "" {
		return fmt.Errorf("the supervisor refused (%d %s): %s", resp.StatusCode, e.Error, e.Detail)
	}
	// Not JSON (an older supervisor, or something else on the port): the reason header alone.
	reason := resp.Header.Get("X-Fleet-Reason")
	if reason == "" {
		reason = "no reason given"
	}
	return fmt.Errorf("the supervisor refused (%d %s)", resp.StatusCode, reason)
}

func runConsoles(args []string, stdout, stderr io.Writer) int {
	fs := newFlags("consoles", consolesSummary, stdout, stderr)
	stateDir := fs.String("state-dir", "", "the state folder `DIR` (default $PHASE_CONSOLE_STATE_HOME, $XDG_STATE_HOME/phase-console or ~/.local/state/phase-console)")
	sup := fs.String("supervisor", "", "the supervisor's address `ADDR`, a loopback literal (default: from <stateHome>/fleet/supervisor.addr)")
	asJSON := fs.Bool("json", false, "print JSON")
	if st, done := parseFlags(fs, args); done {
		return st
	}
	c, err := newAPIClient(*stateDir, *sup)
	if err != nil {
		fmt.Fprintf(stderr, "fleet consoles: %v\n", err)
		return 1
	}
	resp, err := c.do(http.MethodGet, "/fleet/v1/consoles", nil)
	if err != nil {
		fmt.Fprintf(stderr, "fleet consoles: %v\n", err)
		return 1
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		fmt.Fprintf(stderr, "fleet consoles: %v\n", apiError(resp))
		return 1
	}
	var list struct {
		Consoles []supervisor.ConsoleStatus `json:"consoles"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&list); err != nil {
		fmt.Fprintf(stderr, "fleet consoles: %v\n", err)
		return 1
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		enc.Encode(list)
		return 0
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tNAME\tADDR\tHEALTH\tPATH")
	for _, c := range list.Consoles {
		h := string(c.Health) // unknown until the first probe
		if h == "" {          // a supervisor from before "health"
			h = map[bool]string{true: "up", false: "down"}[c.Up]
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", c.ID, c.Name, c.Addr, h, c.URL)
	}
	tw.Flush()
	return 0
}

func runRegister(args []string, stdout, stderr io.Writer) int {
	fs := newFlags("register", registerSummary, stdout, stderr)
	stateDir := fs.String("state-dir", "", "the state folder `DIR` (default $PHASE_CONSOLE_STATE_HOME, $XDG_STATE_HOME/phase-console or ~/.local/state/phase-console)")
	sup := fs.String("supervisor", "", "the supervisor's address `ADDR`, a loopback literal (default: from <stateHome>/fleet/supervisor.addr)")
	id := fs.String("id", "", "the console `ID`, [a-z0-9][a-z0-9-]{0,62} (required)")
	addr := fs.String("addr", "", "the console's loopback address `ADDR`, like 127.0.0.1:9001 (required)")
	name := fs.String("name", "", "a display `NAME`")
	remove := fs.Bool("delete", false, "deregister the console instead")
	if st, done := parseFlags(fs, args); done {
		return st
	}
	if *id == "" || (*addr == "" && !*remove) {
		fmt.Fprintln(stderr, "fleet register: --id and --addr are required")
		return 2
	}
	c, err := newAPIClient(*stateDir, *sup)
	if err != nil {
		fmt.Fprintf(stderr, "fleet register: %v\n", err)
		return 1
	}
	var resp *http.Response
	if *remove {
		resp, err = c.do(http.MethodDelete, "/fleet/v1/consoles/"+*id, nil)
	} else {
		resp, err = c.do(http.MethodPost, "/fleet/v1/consoles", supervisor.Console{ID: *id, Addr: *addr, Name: *name})
	}
	if err != nil {
		fmt.Fprintf(stderr, "fleet register: %v\n", err)
		return 1
	}
	defer resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusCreated:
		fmt.Fprintf(stdout, "registered %s at /c/%s/\n", *id, *id)
	case http.StatusOK:
		fmt.Fprintf(stdout, "refreshed %s at /c/%s/\n", *id, *id)
	case http.StatusNoContent:
		fmt.Fprintf(stdout, "deregistered %s\n", *id)
	default:
		fmt.Fprintf(stderr, "fleet register: %v\n", apiError(resp))
		return 1
	}
	return 0
}
