package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"

	"github.com/phase-console/fleet/deploy"
	"github.com/phase-console/fleet/internal/state"
)

const serviceSummary = "Set fleet up as your service: 'fleet service install|uninstall|status [--dry-run]'."

func init() {
	addCommand(&command{name: "service", summary: serviceSummary, run: runService})
}

// This file is `fleet service` (SPEC O2): it writes the units of package deploy — on Linux the
// systemd user service with its two socket units (socket activation, SPEC O3), on macOS the
// LaunchAgent — with the running binary's absolute path and the default state folder, and has
// the service manager enable and start them. Every step is idempotent: a file already as it
// should be is left alone, a unit already enabled and running is not touched, and a run that
// changes nothing says so. --dry-run prints every file and command instead and changes nothing.
// Uninstall removes the units and never the state folder. What it runs goes through a
// commandRunner, so that the tests see the exact commands without running systemctl.

// A commandRunner runs a service manager's command (systemctl, launchctl) and returns what it
// printed.
type commandRunner interface {
	Run(name string, args ...string) (output string, err error)
}

type execRunner struct{}

func (execRunner) Run(name string, args ...string) (string, error) {
	out, err := exec.Command(name, args...).CombinedOutput()
	return string(out), err
}

// What fleet service uses from its surroundings; the tests replace them.
var (
	serviceRunner     commandRunner = execRunner{}
	serviceOS                       = runtime.GOOS
	serviceExecutable               = func() (string, error) {
		exe, err := os.Executable()
		if err != nil {
			return "", err
		}
		return filepath.EvalSymlinks(exe)
	}
	// serviceDoctor runs `fleet doctor` for the set-up just installed.
	serviceDoctor = func(stdout, stderr io.Writer, socket string) int {
		return run([]string{"doctor", "--socket", socket}, stdout, stderr)
	}
)

// The units' names.
const (
	systemdService    = "fleet.service"
	systemdTCPSocket  = "fleet.socket"
	systemdUnixSocket = "fleet-unix.socket"
	launchdLabel      = "dev.fleet.supervisor"
)

// serviceFile is one file fleet service writes.
type serviceFile struct {
	path    string
	content []byte
}

// servicePlan is what fleet service installs on this machine.
type servicePlan struct {
	files   []serviceFile
	socket  string // the unix-socket door's path
	stateHm string
	exe     string
	uid     int
}

func runService(args []string, stdout, stderr io.Writer) int {
	usage := func(w io.Writer) {
		fmt.Fprintf(w, "Usage: fleet service install|uninstall|status [--dry-run]\n\n%s\n"+
			"On Linux: the systemd user units fleet.service, fleet.socket and fleet-unix.socket in\n"+
			"~/.config/systemd/user; on macOS: the LaunchAgent %s. install writes them with this\n"+
			"binary's path and the default state folder, enables and starts them; uninstall stops and\n"+
			"removes them (the state folder stays); status says whether fleet runs and on which doors.\n\n"+
			"Flags:\n  --dry-run\n    \tprint the files and the commands, and change nothing\n", serviceSummary, launchdLabel)
	}
	if len(args) == 0 {
		usage(stderr)
		return 2
	}
	sub := args[0]
	switch sub {
	case "-h", "--help", "-help", "help":
		usage(stdout)
		return 0
	case "install", "uninstall", "status":
	default:
		fmt.Fprintf(stderr, "fleet service: unknown subcommand %q; want install, uninstall or status\n", sub)
		return 2
	}
	fs := newFlags("service "+sub, serviceSummary, stdout, stderr)
	dry := fs.Bool("dry-run", false, "print the files and the commands, and change nothing")
	if st, done := parseFlags(fs, args[1:]); done {
		return st
	}
	if serviceOS != "linux" && serviceOS != "darwin" {
		fmt.Fprintf(stderr, "fleet service: %s is not supported (systemd on Linux, launchd on macOS)\n", serviceOS)
		return 1
	}
	plan, err := newServicePlan()
	if err != nil {
		fmt.Fprintf(stderr, "fleet service %s: %v\n", sub, err)
		return 1
	}
	s := &serviceRun{plan: plan, dry: *dry, out: stdout, r: serviceRunner}
	switch sub {
	case "install":
		err = s.install()
	case "uninstall":
		err = s.uninstall()
	default:
		return s.status(stderr)
	}
	if err != nil {
		fmt.Fprintf(stderr, "fleet service %s: %v\n", sub, err)
		return 1
	}
	if sub == "install" {
		fmt.Fprintf(stdout, "\nNext, publish the unix-socket door with Tailscale Serve:\n  sudo tailscale serve --bg unix:%s\n", plan.socket)
		if *dry {
			fmt.Fprintln(stdout, "\nThen check the set-up with: fleet doctor --socket "+plan.socket)
			return 0
		}
		fmt.Fprintf(stdout, "\nfleet doctor --socket %s:\n", plan.socket)
		serviceDoctor(stdout, stderr, plan.socket)
	}
	return 0
}

// newServicePlan makes the units for this binary, this user and the default state folder.
func newServicePlan() (*servicePlan, error) {
	exe, err := serviceExecutable()
	if err != nil {
		return nil, fmt.Errorf("cannot tell where this fleet binary is: %w", err)
	}
	if !filepath.IsAbs(exe) {
		return nil, fmt.Errorf("this fleet binary's path %q is not absolute", exe)
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return nil, err
	}
	stateHome, err := state.Home("")
	if err != nil {
		return nil, err
	}
	p := &servicePlan{exe: exe, stateHm: stateHome, uid: os.Getuid()}
	if serviceOS == "darwin" {
		tmpl, err := deploy.Files.ReadFile("launchd/dev.fleet.supervisor.plist")
		if err != nil {
			return nil, err
		}
		plist := bytes.Replace(tmpl, []byte("exec /usr/local/bin/fleet serve"), []byte("exec "+xmlShell(exe)+" serve --state-dir "+xmlShell(stateHome)), 1)
		p.files = []serviceFile{{filepath.Join(home, "Library", "LaunchAgents", launchdLabel+".plist"), plist}}
		p.socket = filepath.Join(home, "Library", "Application Support", "fleet", "serve.sock")
		return p, nil
	}
	config := os.Getenv("XDG_CONFIG_HOME")
	if config == "" || !filepath.IsAbs(config) {
		config = filepath.Join(home, ".config")
	}
	dir := filepath.Join(config, "systemd", "user")
	header := fmt.Sprintf("# Written by 'fleet service install' for %s; 'fleet service uninstall' removes it.\n", exe)
	for _, name := range []string{systemdService, systemdTCPSocket, systemdUnixSocket} {
		b, err := deploy.Files.ReadFile("systemd/" + name)
		if err != nil {
			return nil, err
		}
		if name == systemdService {
			b = bytes.Replace(b, []byte("ExecStart=%h/go/bin/fleet serve"), []byte("ExecStart="+systemdQuote(exe)+" serve"), 1)
			b = bytes.Replace(b, []byte("--state-dir %h/.local/state/phase-console"), []byte("--state-dir "+systemdQuote(stateHome)), 1)
		}
		p.files = append(p.files, serviceFile{filepath.Join(dir, name), append([]byte(header), b...)})
	}
	runtimeDir := os.Getenv("XDG_RUNTIME_DIR")
	if runtimeDir == "" {
		runtimeDir = "/run/user/" + strconv.Itoa(p.uid)
	}
	p.socket = filepath.Join(runtimeDir, "fleet", "serve.sock")
	return p, nil
}

// systemdQuote writes s as one argument of a unit's command line: % and $ doubled, and quoted
// when it holds a space, a quote or a backslash.
func systemdQuote(s string) string {
	s = strings.NewReplacer("%", "%%", "$", "$$").Replace(s)
	if !strings.ContainsAny(s, " \t\"'\\") {
		return s
	}
	return `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(s) + `"`
}

// shellQuote quotes s for /bin/sh.
func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// xmlShell quotes s for /bin/sh inside a plist's <string> (its &, < and > escaped).
func xmlShell(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;").Replace(shellQuote(s))
}

// serviceRun is one run of fleet service.
type serviceRun struct {
	plan    *servicePlan
	dry     bool
	out     io.Writer
	r       commandRunner
	changed bool
}

// do runs a command that changes something (printed instead under --dry-run).
func (s *serviceRun) do(name string, args ...string) error {
	line := strings.Join(append([]string{name}, args...), " ")
	s.changed = true
	if s.dry {
		fmt.Fprintf(s.out, "would run: %s\n", line)
		return nil
	}
	fmt.Fprintf(s.out, "running: %s\n", line)
	if out, err := s.r.Run(name, args...); err != nil {
		return fmt.Errorf("%s: %v: %s", line, err, strings.TrimSpace(out))
	}
	return nil
}

// ask runs a command that only reads (under --dry-run too).
func (s *serviceRun) ask(name string, args ...string) (string, error) { return s.r.Run(name, args...) }

// writeFiles writes every file that is not as it should be, and reports how many it wrote.
func (s *serviceRun) writeFiles() (int, error) {
	n := 0
	for _, f := range s.plan.files {
		if old, err := os.ReadFile(f.path); err == nil && bytes.Equal(old, f.content) {
			fmt.Fprintf(s.out, "unchanged: %s\n", f.path)
			continue
		}
		n++
		s.changed = true
		if s.dry {
			fmt.Fprintf(s.out, "would write %s:\n%s\n", f.path, indent(f.content))
			continue
		}
		if err := writeUnitFile(f.path, f.content); err != nil {
			return n, err
		}
		fmt.Fprintf(s.out, "wrote: %s\n", f.path)
	}
	return n, nil
}

func indent(b []byte) string {
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	return "    " + strings.Join(lines, "\n    ")
}

// writeUnitFile writes content to path atomically (a temporary file in the same folder, synced,
// renamed), 0644 as unit files are; its folders are made 0755 when missing.
func writeUnitFile(path string, content []byte) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	if _, err := f.Write(content); err != nil {
		f.Close()
		return err
	}
	if err := f.Chmod(0o644); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(f.Name(), path)
}

// unitStates asks systemd for one property of each unit ("is-active" or "is-enabled"): one word a
// unit, in order (systemctl prints them, and exits non-zero when one is not active or enabled).
// An answer that is not one word a unit — systemctl missing, no user manager to ask — is an error
// that says so; under --dry-run the units are then taken as not installed.
func (s *serviceRun) unitStates(verb string, units ...string) ([]string, error) {
	out, err := s.ask("systemctl", append([]string{"--user", verb}, units...)...)
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	ok := len(lines) == len(units)
	for _, l := range lines {
		if l == "" || strings.ContainsAny(l, " \t") {
			ok = false
		}
	}
	if ok {
		return lines, nil
	}
	first, _, _ := strings.Cut(strings.TrimSpace(out), "\n")
	if first == "" && err != nil {
		first = err.Error()
	}
	why := fmt.Errorf("cannot ask systemd (systemctl --user %s): %s; is your user manager running? (log in, or 'loginctl enable-linger $USER')", verb, first)
	if s.dry {
		fmt.Fprintf(s.out, "note: %v; taken as not installed\n", why)
		states := make([]string, len(units))
		for i := range states {
			states[i] = "unknown"
		}
		return states, nil
	}
	return nil, why
}

// bothStates is unitStates for is-active and is-enabled.
func (s *serviceRun) bothStates(units ...string) (active, enabled []string, err error) {
	if active, err = s.unitStates("is-active", units...); err != nil {
		return nil, nil, err
	}
	if enabled, err = s.unitStates("is-enabled", units...); err != nil {
		return nil, nil, err
	}
	return active, enabled, nil
}

func all(words []string, want string) bool {
	for _, w := range words {
		if w != want {
			return false
		}
	}
	return true
}

func (s *serviceRun) install() error {
	if serviceOS == "darwin" {
		return s.installLaunchd()
	}
	units := []string{systemdTCPSocket, systemdUnixSocket, systemdService}
	// systemd is asked first: with no user manager to tell, nothing is written.
	active, enabled, err := s.bothStates(units...)
	if err != nil {
		return err
	}
	wrote, err := s.writeFiles()
	if err != nil {
		return err
	}
	if wrote == 0 && all(active, "active") && all(enabled, "enabled") {
		fmt.Fprintf(s.out, "fleet service: already installed, enabled and running (%s); nothing changed\n", s.plan.exe)
		return nil
	}
	// Reloaded whenever anything is to be done: files written by a run that stopped half-way
	// are as new to systemd as files written now.
	if err := s.do("systemctl", "--user", "daemon-reload"); err != nil {
		return err
	}
	if active[2] == "active" && (wrote > 0 || active[0] != "active" || active[1] != "active") {
		// A running fleet serve holds the loopback door itself (no socket units yet), or runs
		// from the old units: it stops, the sockets open, and it starts on them.
		if err := s.do("systemctl", "--user", "stop", systemdService); err != nil {
			return err
		}
	}
	if err := s.do("systemctl", "--user", "enable", "--now", systemdTCPSocket, systemdUnixSocket); err != nil {
		return err
	}
	if err := s.do("systemctl", "--user", "enable", "--now", systemdService); err != nil {
		return err
	}
	verb := "installed"
	if s.dry {
		verb = "would install"
	}
	fmt.Fprintf(s.out, "fleet service: %s: fleet serve runs as %s, state folder %s, doors 127.0.0.1:7420 and unix:%s (held by systemd across restarts)\n",
		verb, s.plan.exe, s.plan.stateHm, s.plan.socket)
	return nil
}

func (s *serviceRun) launchdTarget() string { return "gui/" + strconv.Itoa(s.plan.uid) }

func (s *serviceRun) launchdLoaded() bool {
	_, err := s.ask("launchctl", "print", s.launchdTarget()+"/"+launchdLabel)
	return err == nil
}

func (s *serviceRun) installLaunchd() error {
	wrote, err := s.writeFiles()
	if err != nil {
		return err
	}
	loaded := s.launchdLoaded()
	if wrote == 0 && loaded {
		fmt.Fprintf(s.out, "fleet service: already installed and loaded (%s); nothing changed\n", s.plan.exe)
		return nil
	}
	if loaded {
		if err := s.do("launchctl", "bootout", s.launchdTarget()+"/"+launchdLabel); err != nil {
			return err
		}
	}
	if err := s.do("launchctl", "bootstrap", s.launchdTarget(), s.plan.files[0].path); err != nil {
		return err
	}
	verb := "installed"
	if s.dry {
		verb = "would install"
	}
	fmt.Fprintf(s.out, "fleet service: %s: fleet serve runs as %s, state folder %s, doors 127.0.0.1:7420 and unix:%s\n",
		verb, s.plan.exe, s.plan.stateHm, s.plan.socket)
	return nil
}

func (s *serviceRun) uninstall() error {
	present := 0
	for _, f := range s.plan.files {
		if _, err := os.Lstat(f.path); err == nil {
			present++
		}
	}
	if serviceOS == "darwin" {
		loaded := s.launchdLoaded()
		if present == 0 && !loaded {
			fmt.Fprintln(s.out, "fleet service: not installed; nothing changed")
			return nil
		}
		if loaded {
			if err := s.do("launchctl", "bootout", s.launchdTarget()+"/"+launchdLabel); err != nil {
				return err
			}
		}
	} else {
		units := []string{systemdService, systemdTCPSocket, systemdUnixSocket}
		active, enabled, err := s.bothStates(units...)
		if err != nil {
			return err
		}
		known := false
		for i := range units {
			if active[i] == "active" || active[i] == "activating" || enabled[i] == "enabled" {
				known = true
			}
		}
		if present == 0 && !known {
			fmt.Fprintln(s.out, "fleet service: not installed; nothing changed")
			return nil
		}
		if known {
			if err := s.do("systemctl", append([]string{"--user", "disable", "--now"}, units...)...); err != nil {
				return err
			}
		}
	}
	for _, f := range s.plan.files {
		if _, err := os.Lstat(f.path); errors.Is(err, fs.ErrNotExist) {
			continue
		}
		s.changed = true
		if s.dry {
			fmt.Fprintf(s.out, "would remove: %s\n", f.path)
			continue
		}
		if err := os.Remove(f.path); err != nil {
			return err
		}
		fmt.Fprintf(s.out, "removed: %s\n", f.path)
	}
	if serviceOS != "darwin" && present > 0 {
		if err := s.do("systemctl", "--user", "daemon-reload"); err != nil {
			return err
		}
	}
	verb := "uninstalled"
	if s.dry {
		verb = "would uninstall"
	}
	fmt.Fprintf(s.out, "fleet service: %s; the state folder %s is kept (fleet.token, consoles.json, paired devices)\n", verb, s.plan.stateHm)
	return nil
}

// status says whether fleet runs as a service and on which doors. Exit status: 0 running, 3 not
// (as systemctl status), 1 on an error.
func (s *serviceRun) status(stderr io.Writer) int {
	running := false
	if serviceOS == "darwin" {
		out, err := s.ask("launchctl", "print", s.launchdTarget()+"/"+launchdLabel)
		switch {
		case err != nil:
			fmt.Fprintf(s.out, "fleet service: not loaded (launchd has no %s)\n", launchdLabel)
		case strings.Contains(out, "state = running"):
			running = true
			fmt.Fprintf(s.out, "fleet service: running (launchd %s)\n", launchdLabel)
		default:
			fmt.Fprintf(s.out, "fleet service: loaded, not running (launchd %s)\n", launchdLabel)
		}
	} else {
		units := []string{systemdService, systemdTCPSocket, systemdUnixSocket}
		active, enabled, err := s.bothStates(units...)
		if err != nil {
			fmt.Fprintf(stderr, "fleet service status: %v\n", err)
			return 1
		}
		running = active[0] == "active"
		word := "not running"
		if running {
			word = "running"
		}
		fmt.Fprintf(s.out, "fleet service: %s (%s %s, %s; %s %s, %s; %s %s, %s)\n", word,
			units[0], active[0], enabled[0], units[1], active[1], enabled[1], units[2], active[2], enabled[2])
	}
	fleetDir := state.FleetDir(s.plan.stateHm)
	var doors []string
	if b, err := os.ReadFile(filepath.Join(fleetDir, state.AddrFile)); err == nil && running {
		doors = append(doors, "http://"+strings.TrimSpace(string(b)))
	}
	if st, err := os.Lstat(s.plan.socket); err == nil && st.Mode().Type() == fs.ModeSocket {
		doors = append(doors, "unix:"+s.plan.socket)
	}
	if pid := servePID(fleetDir); pid != 0 && running {
		fmt.Fprintf(s.out, "serving process: pid %d (serve.pid)\n", pid)
	}
	if len(doors) > 0 {
		fmt.Fprintf(s.out, "doors: %s\n", strings.Join(doors, ", "))
	} else {
		fmt.Fprintln(s.out, "doors: none")
	}
	fmt.Fprintf(s.out, "state folder: %s\n", s.plan.stateHm)
	if !running {
		return 3
	}
	return 0
}
