package main

import (
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// fakeRunner records the commands fleet service runs and answers systemctl's and launchctl's
// questions from its fields.
type fakeRunner struct {
	calls    []string
	active   string // what "systemctl --user is-active …" prints
	enabled  string // what "systemctl --user is-enabled …" prints
	launchd  bool   // "launchctl print" finds the agent
	launchSt string // and says this of it
}

func (f *fakeRunner) Run(name string, args ...string) (string, error) {
	line := strings.Join(append([]string{name}, args...), " ")
	f.calls = append(f.calls, line)
	switch {
	case strings.HasPrefix(line, "systemctl --user is-active"):
		return f.active, nil
	case strings.HasPrefix(line, "systemctl --user is-enabled"):
		return f.enabled, nil
	case strings.HasPrefix(line, "launchctl print"):
		if !f.launchd {
			return "Could not find service", &exec.ExitError{}
		}
		return f.launchSt, nil
	}
	return "", nil
}

// changes is the commands that change something (not the questions).
func (f *fakeRunner) changes() []string {
	var out []string
	for _, c := range f.calls {
		if !strings.Contains(c, " is-active ") && !strings.Contains(c, " is-enabled ") && !strings.HasPrefix(c, "launchctl print") {
			out = append(out, c)
		}
	}
	return out
}

// serviceEnv gives fleet service a temporary HOME, a fake runner, a binary path and a doctor
// that only says it ran; it returns the HOME and the runner.
func serviceEnv(t *testing.T, goos, exe string) (string, *fakeRunner) {
	t.Helper()
	home := t.TempDir()
	t.Setenv("HOME", home)
	t.Setenv("XDG_CONFIG_HOME", "")
	t.Setenv("XDG_STATE_HOME", "")
	t.Setenv("PHASE_CONSOLE_STATE_HOME", "")
	t.Setenv("XDG_RUNTIME_DIR", "/run/user/1000")
	r := &fakeRunner{active: "inactive\ninactive\ninactive\n", enabled: "disabled\ndisabled\ndisabled\n"}
	oldR, oldOS, oldExe, oldDoc := serviceRunner, serviceOS, serviceExecutable, serviceDoctor
	serviceRunner, serviceOS = r, goos
	serviceExecutable = func() (string, error) { return exe, nil }
	serviceDoctor = func(stdout, stderr io.Writer, socket string) int {
		io.WriteString(stdout, "DOCTOR RAN for "+socket+"\n")
		return 0
	}
	t.Cleanup(func() { serviceRunner, serviceOS, serviceExecutable, serviceDoctor = oldR, oldOS, oldExe, oldDoc })
	return home, r
}

// tree lists every file under dir with its content and modification time.
func tree(t *testing.T, dir string) map[string]string {
	t.Helper()
	m := map[string]string{}
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == dir {
			return err
		}
		info, _ := d.Info()
		b, _ := os.ReadFile(p)
		m[p] = info.Mode().String() + " " + info.ModTime().String() + " " + string(b)
		return nil
	})
	return m
}

// TestServiceInstallSystemd_O2: install writes the service and both socket units into
// ~/.config/systemd/user with this binary's absolute path and the default state folder, reloads
// systemd, enables and starts the sockets and then the service, and ends with the tailscale serve
// line and fleet doctor. Run again on what it installed, it changes nothing and says so.
func TestServiceInstallSystemd_O2(t *testing.T) {
	home, r := serviceEnv(t, "linux", "/opt/fleet/bin/fleet")
	st, out, errs := runFleet("service", "install")
	if st != 0 {
		t.Fatalf("install: %d %s %s", st, out, errs)
	}
	unitDir := filepath.Join(home, ".config", "systemd", "user")
	svc, err := os.ReadFile(filepath.Join(unitDir, "fleet.service"))
	if err != nil {
		t.Fatal(err)
	}
	stateHome := filepath.Join(home, ".local", "state", "phase-console")
	if want := "ExecStart=/opt/fleet/bin/fleet serve --port 7420 --state-dir " + stateHome + " --socket %t/fleet/serve.sock\n"; !strings.Contains(string(svc), want) {
		t.Errorf("fleet.service has no %q:\n%s", want, svc)
	}
	for _, name := range []string{"fleet.socket", "fleet-unix.socket"} {
		b, err := os.ReadFile(filepath.Join(unitDir, name))
		if err != nil || !strings.Contains(string(b), "FileDescriptorName=") {
			t.Errorf("%s: %v %q", name, err, b)
		}
	}
	want := []string{
		"systemctl --user daemon-reload",
		"systemctl --user enable --now fleet.socket fleet-unix.socket",
		"systemctl --user enable --now fleet.service",
	}
	if got := r.changes(); !slices.Equal(got, want) {
		t.Errorf("commands:\n%q\nwant\n%q", got, want)
	}
	for _, s := range []string{"sudo tailscale serve --bg unix:/run/user/1000/fleet/serve.sock", "DOCTOR RAN for /run/user/1000/fleet/serve.sock"} {
		if !strings.Contains(out, s) {
			t.Errorf("output has no %q:\n%s", s, out)
		}
	}
	if !strings.HasSuffix(strings.TrimSpace(out), "DOCTOR RAN for /run/user/1000/fleet/serve.sock") {
		t.Errorf("install does not end with fleet doctor:\n%s", out)
	}

	// Again, on what it installed (systemd now says every unit is enabled and active).
	before := tree(t, home)
	time.Sleep(10 * time.Millisecond)
	r.calls = nil
	r.active, r.enabled = "active\nactive\nactive\n", "enabled\nenabled\nenabled\n"
	st, out, errs = runFleet("service", "install")
	if st != 0 {
		t.Fatalf("install again: %d %s %s", st, out, errs)
	}
	if got := r.changes(); len(got) != 0 {
		t.Errorf("install again ran %q, want nothing that changes anything", got)
	}
	if !strings.Contains(out, "nothing changed") {
		t.Errorf("install again does not say nothing changed:\n%s", out)
	}
	if after := tree(t, home); !mapsEqual(before, after) {
		t.Errorf("install again touched files")
	}
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// TestServiceInstallReplacesRunningOldUnit_O2: a service already running from an older unit (one
// that opened its own sockets) is stopped before the socket units start, so that they can bind,
// and started again on them.
func TestServiceInstallReplacesRunningOldUnit_O2(t *testing.T) {
	_, r := serviceEnv(t, "linux", "/usr/bin/fleet")
	r.active, r.enabled = "inactive\ninactive\nactive\n", "disabled\ndisabled\nenabled\n"
	if st, out, errs := runFleet("service", "install"); st != 0 {
		t.Fatalf("install: %d %s %s", st, out, errs)
	}
	want := []string{
		"systemctl --user daemon-reload",
		"systemctl --user stop fleet.service",
		"systemctl --user enable --now fleet.socket fleet-unix.socket",
		"systemctl --user enable --now fleet.service",
	}
	if got := r.changes(); !slices.Equal(got, want) {
		t.Errorf("commands:\n%q\nwant\n%q", got, want)
	}
}

// TestServiceDryRun_O2: --dry-run prints every file and every command install or uninstall
// would write and run, and changes nothing: no file appears or changes, no command that changes
// anything runs, fleet doctor does not run.
func TestServiceDryRun_O2(t *testing.T) {
	home, r := serviceEnv(t, "linux", "/usr/bin/fleet")
	before := tree(t, home)
	st, out, errs := runFleet("service", "install", "--dry-run")
	if st != 0 {
		t.Fatalf("install --dry-run: %d %s %s", st, out, errs)
	}
	if after := tree(t, home); !mapsEqual(before, after) {
		t.Errorf("install --dry-run changed files: %v", after)
	}
	if got := r.changes(); len(got) != 0 {
		t.Errorf("install --dry-run ran %q", got)
	}
	for _, s := range []string{
		"would write " + filepath.Join(home, ".config/systemd/user/fleet.service"),
		"ExecStart=/usr/bin/fleet serve",
		"ListenStream=127.0.0.1:7420",
		"would run: systemctl --user daemon-reload",
		"would run: systemctl --user enable --now fleet.socket fleet-unix.socket",
		"would run: systemctl --user enable --now fleet.service",
		"sudo tailscale serve --bg unix:/run/user/1000/fleet/serve.sock",
	} {
		if !strings.Contains(out, s) {
			t.Errorf("install --dry-run does not print %q:\n%s", s, out)
		}
	}
	if strings.Contains(out, "DOCTOR RAN") {
		t.Errorf("install --dry-run ran fleet doctor")
	}

	// Installed for real, then uninstall --dry-run.
	if st, _, errs := runFleet("service", "install"); st != 0 {
		t.Fatalf("install: %s", errs)
	}
	r.calls = nil
	r.active, r.enabled = "active\nactive\nactive\n", "enabled\nenabled\nenabled\n"
	before = tree(t, home)
	st, out, errs = runFleet("service", "uninstall", "--dry-run")
	if st != 0 {
		t.Fatalf("uninstall --dry-run: %d %s %s", st, out, errs)
	}
	if after := tree(t, home); !mapsEqual(before, after) {
		t.Errorf("uninstall --dry-run changed files")
	}
	if got := r.changes(); len(got) != 0 {
		t.Errorf("uninstall --dry-run ran %q", got)
	}
	if !strings.Contains(out, "would run: systemctl --user disable --now fleet.service fleet.socket fleet-unix.socket") ||
		!strings.Contains(out, "would remove: "+filepath.Join(home, ".config/systemd/user/fleet.socket")) {
		t.Errorf("uninstall --dry-run output:\n%s", out)
	}
}

// TestServiceUninstall_O2: uninstall stops and disables the units, removes their files, reloads
// systemd, and keeps the state folder; run again, it changes nothing and says so.
func TestServiceUninstall_O2(t *testing.T) {
	home, r := serviceEnv(t, "linux", "/usr/bin/fleet")
	if st, _, errs := runFleet("service", "install"); st != 0 {
		t.Fatalf("install: %s", errs)
	}
	stateDir := filepath.Join(home, ".local", "state", "phase-console", "fleet")
	if err := os.MkdirAll(stateDir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(stateDir, "consoles.json"), []byte("{}"), 0o600); err != nil {
		t.Fatal(err)
	}
	r.calls = nil
	r.active, r.enabled = "active\nactive\nactive\n", "enabled\nenabled\nenabled\n"
	st, out, errs := runFleet("service", "uninstall")
	if st != 0 {
		t.Fatalf("uninstall: %d %s %s", st, out, errs)
	}
	want := []string{
		"systemctl --user disable --now fleet.service fleet.socket fleet-unix.socket",
		"systemctl --user daemon-reload",
	}
	if got := r.changes(); !slices.Equal(got, want) {
		t.Errorf("commands:\n%q\nwant\n%q", got, want)
	}
	for _, name := range []string{"fleet.service", "fleet.socket", "fleet-unix.socket"} {
		if _, err := os.Stat(filepath.Join(home, ".config/systemd/user", name)); err == nil {
			t.Errorf("%s is still there", name)
		}
	}
	if _, err := os.Stat(filepath.Join(stateDir, "consoles.json")); err != nil {
		t.Errorf("uninstall removed the state folder: %v", err)
	}
	r.calls = nil
	r.active, r.enabled = "inactive\ninactive\ninactive\n", "not-found\nnot-found\nnot-found\n"
	st, out, _ = runFleet("service", "uninstall")
	if st != 0 || !strings.Contains(out, "not installed; nothing changed") || len(r.changes()) != 0 {
		t.Errorf("uninstall again: %d %q, ran %q", st, out, r.changes())
	}
}

// TestServiceStatus_O2: status says whether fleet runs and on which doors (supervisor.addr's TCP
// door and the unix socket), 0 when it runs and 3 when it does not.
func TestServiceStatus_O2(t *testing.T) {
	home, r := serviceEnv(t, "linux", "/usr/bin/fleet")
	fleetDir := filepath.Join(home, ".local", "state", "phase-console", "fleet")
	if err := os.MkdirAll(fleetDir, 0o700); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(fleetDir, "supervisor.addr"), []byte("127.0.0.1:7420\n"), 0o600)
	os.WriteFile(filepath.Join(fleetDir, PIDFile), []byte(strconv.Itoa(os.Getpid())), 0o600)
	r.active, r.enabled = "active\nactive\nactive\n", "enabled\nenabled\nenabled\n"
	st, out, _ := runFleet("service", "status")
	if st != 0 || !strings.Contains(out, "fleet service: running") || !strings.Contains(out, "doors: http://127.0.0.1:7420") ||
		!strings.Contains(out, "pid "+strconv.Itoa(os.Getpid())) {
		t.Errorf("status of a running service: %d\n%s", st, out)
	}
	r.active = "inactive\nactive\nactive\n"
	st, out, _ = runFleet("service", "status")
	if st != 3 || !strings.Contains(out, "fleet service: not running") || !strings.Contains(out, "doors: none") {
		t.Errorf("status of a stopped service: %d\n%s", st, out)
	}
}

// TestServiceLaunchd_O2: on macOS install writes the LaunchAgent with this binary's path (quoted
// for the shell, escaped for XML) and the default state folder, and bootstraps it into the
// user's GUI domain; run again on a loaded agent, it changes nothing.
func TestServiceLaunchd_O2(t *testing.T) {
	home, r := serviceEnv(t, "darwin", "/Applications/My Tools/fleet")
	st, out, errs := runFleet("service", "install")
	if st != 0 {
		t.Fatalf("install: %d %s %s", st, out, errs)
	}
	plistPath := filepath.Join(home, "Library", "LaunchAgents", "dev.fleet.supervisor.plist")
	b, err := os.ReadFile(plistPath)
	if err != nil {
		t.Fatal(err)
	}
	stateHome := filepath.Join(home, ".local", "state", "phase-console")
	if want := "exec '/Applications/My Tools/fleet' serve --state-dir '" + stateHome + "' --port 7420"; !strings.Contains(string(b), want) {
		t.Errorf("the plist has no %q:\n%s", want, b)
	}
	uid := strconv.Itoa(os.Getuid())
	if got, want := r.changes(), []string{"launchctl bootstrap gui/" + uid + " " + plistPath}; !slices.Equal(got, want) {
		t.Errorf("commands %q, want %q", got, want)
	}
	if !strings.Contains(out, "unix:"+filepath.Join(home, "Library", "Application Support", "fleet", "serve.sock")) {
		t.Errorf("no tailscale serve line for the Mac's socket:\n%s", out)
	}
	r.calls, r.launchd = nil, true
	st, out, _ = runFleet("service", "install")
	if st != 0 || !strings.Contains(out, "nothing changed") || len(r.changes()) != 0 {
		t.Errorf("install again: %d %q, ran %q", st, out, r.changes())
	}
}

// TestServiceInstalledUnitsVerify_O2: the units as install writes them — a binary path with a
// space in it included — pass systemd-analyze verify.
func TestServiceInstalledUnitsVerify_O2(t *testing.T) {
	sa, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Skip("systemd-analyze is not installed")
	}
	exeDir := filepath.Join(t.TempDir(), "my tools")
	os.MkdirAll(exeDir, 0o755)
	exe := filepath.Join(exeDir, "fleet")
	os.WriteFile(exe, []byte("#!/bin/sh\n"), 0o755)
	home, _ := serviceEnv(t, "linux", exe)
	runtimeDir := filepath.Join(t.TempDir(), "run")
	os.Mkdir(runtimeDir, 0o700)
	t.Setenv("XDG_RUNTIME_DIR", runtimeDir)
	if st, _, errs := runFleet("service", "install"); st != 0 {
		t.Fatalf("install: %s", errs)
	}
	dir := filepath.Join(home, ".config", "systemd", "user")
	cmd := exec.Command(sa, "verify", "--user", filepath.Join(dir, "fleet.service"), filepath.Join(dir, "fleet.socket"), filepath.Join(dir, "fleet-unix.socket"))
	cmd.Env = append(os.Environ(), "SYSTEMD_LOG_COLOR=0", "SYSTEMD_PAGER=")
	out, err := cmd.CombinedOutput()
	if strings.Contains(string(out), "Failed to initialize manager") {
		t.Skipf("systemd-analyze cannot run here: %s", out)
	}
	if err != nil || strings.TrimSpace(string(out)) != "" {
		t.Errorf("systemd-analyze verify: %v\n%s", err, out)
	}
}

// TestServiceNoUserManager_O2: with no user manager to ask (systemctl cannot reach the bus),
// install writes nothing and says why, and status says it cannot tell (exit 1), not "stopped".
func TestServiceNoUserManager_O2(t *testing.T) {
	home, r := serviceEnv(t, "linux", "/usr/bin/fleet")
	r.active, r.enabled = "Failed to connect to bus: No medium found\n", "Failed to connect to bus: No medium found\n"
	before := tree(t, home)
	st, _, errs := runFleet("service", "install")
	if st != 1 || !strings.Contains(errs, "cannot ask systemd") || !strings.Contains(errs, "No medium found") {
		t.Errorf("install without a user manager: %d %q", st, errs)
	}
	if after := tree(t, home); !mapsEqual(before, after) || len(r.changes()) != 0 {
		t.Errorf("install without a user manager changed something: ran %q", r.changes())
	}
	if st, _, errs := runFleet("service", "status"); st != 1 || !strings.Contains(errs, "cannot ask systemd") {
		t.Errorf("status without a user manager: %d %q", st, errs)
	}
}
