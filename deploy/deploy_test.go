package deploy

import (
	"bytes"
	"context"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// unitLines returns the unit's settings as key → values, in order, without comments.
func unitLines(t *testing.T, path string) map[string][]string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	kv := map[string][]string{}
	for _, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || line[0] == '#' || line[0] == ';' || line[0] == '[' {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok {
			t.Fatalf("%s: not key=value: %q", path, line)
		}
		kv[k] = append(kv[k], v)
	}
	return kv
}

// TestSystemdUnit_S1 checks what the unit promises without systemd: it runs `fleet serve` on the
// loopback door only, with the unix-socket door in its private runtime folder, and sandboxes only
// with what needs no user namespace (no file-system sandboxing: see the unit's comment).
func TestSystemdUnit_S1(t *testing.T) {
	kv := unitLines(t, filepath.Join("systemd", "fleet.service"))
	start := kv["ExecStart"]
	if len(start) != 1 || !strings.HasPrefix(start[0], "%h/go/bin/fleet serve ") {
		t.Errorf("ExecStart = %q, want %%h/go/bin/fleet serve …", start)
	}
	if strings.Contains(strings.ToLower(start[0]), "host") {
		t.Errorf("ExecStart names a host (S1: never): %q", start[0])
	}
	want := map[string]string{
		"PrivateUsers":             "no", // root must keep its uid: S5a recognises tailscaled by it
		"NoNewPrivileges":          "yes",
		"RestrictAddressFamilies":  "AF_UNIX AF_INET AF_INET6 AF_NETLINK", // netlink: sock_diag peer lookups
		"RuntimeDirectory":         "fleet",
		"RestrictNamespaces":       "yes",
		"LockPersonality":          "yes",
		"MemoryDenyWriteExecute":   "yes",
		"SystemCallArchitectures":  "native",
		"UMask":                    "0077",
		"RuntimeDirectoryMode":     "0700",
		"RestartPreventExitStatus": "1 2",
	}
	for k, v := range want {
		if got := kv[k]; len(got) != 1 || got[0] != v {
			t.Errorf("%s = %q, want %q", k, got, v)
		}
	}
	if !strings.Contains(start[0], "--state-dir %h/.local/state/phase-console") {
		t.Errorf("ExecStart does not pin --state-dir: %q", start[0])
	}
	// S5e: the unix-socket door by default, in the user's runtime folder (/run/user/<uid>, 0700;
	// RuntimeDirectory makes %t/fleet 0700), never below /tmp.
	if !strings.HasSuffix(start[0], " --socket %t/fleet/serve.sock") {
		t.Errorf("ExecStart does not serve the unix-socket door at %%t/fleet/serve.sock: %q", start[0])
	}
	if strings.Contains(start[0], "/tmp") || strings.Contains(start[0], "%T") || strings.Contains(start[0], "%V") {
		t.Errorf("ExecStart puts something below a temporary folder: %q", start[0])
	}
	// Any mount-namespacing option would make newer systemd set up a user namespace, in which a
	// user manager maps root to 65534: fleet could then never recognise tailscaled.
	for _, k := range []string{"ProtectSystem", "ProtectHome", "ReadWritePaths", "PrivateTmp", "PrivateDevices",
		"ProtectKernelTunables", "ProtectKernelModules", "ProtectKernelLogs", "ProtectControlGroups", "ProtectHostname"} {
		if _, ok := kv[k]; ok {
			t.Errorf("%s needs a user namespace in a user unit, where root shows as 65534", k)
		}
	}
}

// TestSystemdUnitFileLimit_R6c: the unit sets the limit on open files explicitly — a soft limit
// below a hard one, which fleet serve raises itself at start, so that the direct-reach door's
// half of it is known — and its system call filter lets fleet raise it: setrlimit and prlimit64
// (Go's call for it on Linux) are allowed after every line that could deny them. Any group a
// deny line names is taken to hold both (which groups do differs between systemd versions).
func TestSystemdUnitFileLimit_R6c(t *testing.T) {
	kv := unitLines(t, filepath.Join("systemd", "fleet.service"))
	lim := kv["LimitNOFILE"]
	if len(lim) != 1 {
		t.Fatalf("LimitNOFILE = %q, want one soft:hard", lim)
	}
	softS, hardS, ok := strings.Cut(lim[0], ":")
	soft, errS := strconv.Atoi(softS)
	hard, errH := strconv.Atoi(hardS)
	if !ok || errS != nil || errH != nil || soft >= hard || hard < 2*2048 {
		t.Errorf("LimitNOFILE = %q, want soft:hard with soft below hard, and hard at least 4096 (the door's half: 2,048 at least)", lim[0])
	}
	filters := kv["SystemCallFilter"]
	if len(filters) == 0 || filters[0] != "@system-service" {
		t.Fatalf("SystemCallFilter = %q, want @system-service first (it holds setrlimit and prlimit64)", filters)
	}
	for _, call := range []string{"setrlimit", "prlimit64"} {
		allowed := false
		for _, f := range filters {
			deny := strings.HasPrefix(f, "~")
			for _, e := range strings.Fields(strings.TrimPrefix(f, "~")) {
				switch {
				case deny && (e == call || strings.HasPrefix(e, "@")):
					allowed = false
				case !deny && (e == call || e == "@system-service"):
					allowed = true
				}
			}
		}
		if !allowed {
			t.Errorf("SystemCallFilter %q may deny %s: fleet serve could not raise its limit on open files", filters, call)
		}
	}
}

// TestSystemdAnalyzeVerify runs `systemd-analyze verify --user` on the unit, in a made-up home
// whose ~/go/bin/fleet exists, and fails on anything it says.
func TestSystemdAnalyzeVerify(t *testing.T) {
	systemdVerify(t, "fleet.service")
}

// systemdVerify runs `systemd-analyze verify --user` on the units of deploy/systemd named, copied
// into a folder of their own, in a made-up home whose ~/go/bin/fleet exists, and fails on
// anything it says. It skips where systemd-analyze is missing or cannot run (no user manager).
func systemdVerify(t *testing.T, names ...string) {
	t.Helper()
	sa, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Skip("systemd-analyze is not installed: the units' syntax was not verified (the other tests still check their settings)")
	}
	home := t.TempDir()
	bin := filepath.Join(home, "go", "bin")
	if err := os.MkdirAll(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(bin, "fleet"), []byte("#!/bin/sh\nexit 0\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	runtime := filepath.Join(t.TempDir(), "run")
	if err := os.Mkdir(runtime, 0o700); err != nil {
		t.Fatal(err)
	}
	unitDir := t.TempDir()
	var units []string
	for _, name := range names {
		src, err := os.ReadFile(filepath.Join("systemd", name))
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(unitDir, name)
		if err := os.WriteFile(p, src, 0o644); err != nil {
			t.Fatal(err)
		}
		units = append(units, p)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, sa, append([]string{"verify", "--user"}, units...)...)
	cmd.Env = append(os.Environ(), "HOME="+home, "XDG_RUNTIME_DIR="+runtime, "SYSTEMD_LOG_COLOR=0", "SYSTEMD_PAGER=")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err = cmd.Run()
	text := strings.TrimSpace(out.String())
	if ctx.Err() != nil {
		t.Skipf("systemd-analyze verify --user did not finish in this environment: %s", text)
	}
	if strings.Contains(text, "Failed to initialize manager") || strings.Contains(text, "Failed to lookup RuntimeDirectory") {
		t.Skipf("systemd-analyze verify --user cannot run here (no user manager environment): %s", text)
	}
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatalf("systemd-analyze: %v", err)
	}
	if err != nil || text != "" {
		t.Fatalf("systemd-analyze verify --user %s: %v\n%s", strings.Join(names, " "), err, text)
	}
}

// plistValue decodes the one value element that starts at se: dict → map[string]any, array →
// []any, string/integer → string, true/false → bool.
func plistValue(d *xml.Decoder, se xml.StartElement) (any, error) {
	switch se.Name.Local {
	case "dict":
		m := map[string]any{}
		var key string
		haveKey := false
		for {
			tok, err := d.Token()
			if err != nil {
				return nil, err
			}
			switch tok := tok.(type) {
			case xml.StartElement:
				if tok.Name.Local == "key" {
					if haveKey {
						return nil, fmt.Errorf("key %q without a value", key)
					}
					var k string
					if err := d.DecodeElement(&k, &tok); err != nil {
						return nil, err
					}
					key, haveKey = k, true
					continue
				}
				if !haveKey {
					return nil, fmt.Errorf("<%s> without a key", tok.Name.Local)
				}
				v, err := plistValue(d, tok)
				if err != nil {
					return nil, err
				}
				if _, dup := m[key]; dup {
					return nil, fmt.Errorf("key %q twice", key)
				}
				m[key], haveKey = v, false
			case xml.EndElement:
				if haveKey {
					return nil, fmt.Errorf("key %q without a value", key)
				}
				return m, nil
			}
		}
	case "array":
		var a []any
		for {
			tok, err := d.Token()
			if err != nil {
				return nil, err
			}
			switch tok := tok.(type) {
			case xml.StartElement:
				v, err := plistValue(d, tok)
				if err != nil {
					return nil, err
				}
				a = append(a, v)
			case xml.EndElement:
				return a, nil
			}
		}
	case "string", "integer":
		var s string
		err := d.DecodeElement(&s, &se)
		return s, err
	case "true", "false":
		return se.Name.Local == "true", d.Skip()
	default:
		return nil, fmt.Errorf("unexpected <%s>", se.Name.Local)
	}
}

func parsePlist(t *testing.T, path string) map[string]any {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	d := xml.NewDecoder(f)
	d.Strict = true
	for {
		tok, err := d.Token()
		if err == io.EOF {
			t.Fatalf("%s: no <plist>", path)
		}
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		se, ok := tok.(xml.StartElement)
		if !ok {
			continue
		}
		if se.Name.Local != "plist" {
			t.Fatalf("%s: root <%s>, want <plist>", path, se.Name.Local)
		}
		for {
			tok, err := d.Token()
			if err != nil {
				t.Fatalf("%s: %v", path, err)
			}
			if se, ok := tok.(xml.StartElement); ok {
				v, err := plistValue(d, se)
				if err != nil {
					t.Fatalf("%s: %v", path, err)
				}
				m, ok := v.(map[string]any)
				if !ok {
					t.Fatalf("%s: the top value is not a dict", path)
				}
				// Nothing but whitespace and </plist> may follow.
				for {
					tok, err := d.Token()
					if err == io.EOF {
						return m
					}
					if err != nil {
						t.Fatalf("%s: %v", path, err)
					}
					switch tok := tok.(type) {
					case xml.CharData:
						if len(bytes.TrimSpace(tok)) != 0 {
							t.Fatalf("%s: text after the dict", path)
						}
					case xml.EndElement, xml.Comment:
					default:
						t.Fatalf("%s: unexpected %T after the dict", path, tok)
					}
				}
			}
		}
	}
}

// TestLaunchdPlist_S1: the LaunchAgent parses, is named after its file, runs `fleet serve` on
// the loopback door only, restarts on failure, and creates files private to the user.
func TestLaunchdPlist_S1(t *testing.T) {
	m := parsePlist(t, filepath.Join("launchd", "dev.fleet.supervisor.plist"))
	if m["Label"] != "dev.fleet.supervisor" {
		t.Errorf("Label = %v, want dev.fleet.supervisor (the file's name)", m["Label"])
	}
	args, _ := m["ProgramArguments"].([]any)
	if len(args) != 3 || args[0] != "/bin/sh" || args[1] != "-c" {
		t.Fatalf("ProgramArguments = %v, want /bin/sh -c 'exec … fleet serve …'", args)
	}
	script, _ := args[2].(string)
	if !strings.HasPrefix(script, "exec /usr/local/bin/fleet serve ") || !strings.Contains(script, `2>>"$HOME/Library/Logs/fleet.log"`) {
		t.Errorf("script = %q", script)
	}
	// S5e: the unix-socket door by default, in the user's own ~/Library (quoted: the folder's
	// name has a space), never below /tmp.
	if !strings.Contains(script, ` --socket "$HOME/Library/Application Support/fleet/serve.sock" `) {
		t.Errorf("script does not serve the unix-socket door in ~/Library: %q", script)
	}
	if strings.Contains(script, "/tmp") || strings.Contains(script, "TMPDIR") {
		t.Errorf("script puts something below a temporary folder: %q", script)
	}
	if strings.Contains(strings.ToLower(script), "host") || strings.Contains(script, ";") || strings.Contains(script, "&&") {
		t.Errorf("script does more than exec fleet serve on loopback: %q", script)
	}
	if m["RunAtLoad"] != true {
		t.Errorf("RunAtLoad = %v, want true", m["RunAtLoad"])
	}
	if ka, _ := m["KeepAlive"].(map[string]any); ka["SuccessfulExit"] != false {
		t.Errorf("KeepAlive = %v, want {SuccessfulExit: false}", m["KeepAlive"])
	}
	if m["Umask"] != "63" {
		t.Errorf("Umask = %v, want 63 (077)", m["Umask"])
	}
	for k := range m {
		switch k {
		case "Label", "ProgramArguments", "RunAtLoad", "KeepAlive", "ThrottleInterval", "ProcessType", "Umask",
			"SoftResourceLimits", "HardResourceLimits":
		default:
			t.Errorf("unexpected key %q", k)
		}
	}
}

// TestLaunchdPlistFileLimit_R6c: the LaunchAgent sets the limit on open files explicitly, a soft
// limit below a hard one (fleet serve raises the soft one itself at start), and nothing else.
func TestLaunchdPlistFileLimit_R6c(t *testing.T) {
	m := parsePlist(t, filepath.Join("launchd", "dev.fleet.supervisor.plist"))
	files := func(key string) int {
		d, _ := m[key].(map[string]any)
		if len(d) != 1 {
			t.Fatalf("%s = %v, want NumberOfFiles alone", key, m[key])
		}
		s, _ := d["NumberOfFiles"].(string)
		n, err := strconv.Atoi(s)
		if err != nil {
			t.Fatalf("%s NumberOfFiles = %v: %v", key, d["NumberOfFiles"], err)
		}
		return n
	}
	if soft, hard := files("SoftResourceLimits"), files("HardResourceLimits"); soft >= hard || hard < 2*2048 {
		t.Errorf("NumberOfFiles soft %d, hard %d: want soft below hard, and hard at least 4096", soft, hard)
	}
}

// TestServeDoc_S2: the Serve guide carries the exact commands, leads with the unix-socket door,
// says why the TCP door is refused beside SSH or a raw forward (S5e), and never suggests Funnel.
func TestServeDoc_S2(t *testing.T) {
	b, err := os.ReadFile("tailscale-serve.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	for _, want := range []string{
		"sudo tailscale serve --bg unix:/run/user/$(id -u)/fleet/serve.sock",
		"fleet serve --socket /run/user/$(id -u)/fleet/serve.sock",
		"tailscale serve --bg http://127.0.0.1:7420",
		"401 `tcp-forwardable`",
		"tailscale set --ssh=false",
		"tailscale serve status",
		"tailscale serve --https=443 off",
		"tailscale funnel --https=443 off",
		"fleet doctor",
	} {
		if !strings.Contains(doc, want) {
			t.Errorf("tailscale-serve.md lacks %q", want)
		}
	}
	if strings.Contains(doc, "refuses every request") {
		t.Errorf("tailscale-serve.md still says a raw TCP forward is refused outright: it is not (S5e)")
	}
	for _, line := range strings.Split(doc, "\n") {
		l := strings.TrimSpace(line)
		if strings.HasPrefix(l, "tailscale funnel") && !strings.HasSuffix(l, " off") && !strings.HasPrefix(l, "tailscale funnel status") {
			t.Errorf("the guide turns Funnel on: %q", l)
		}
	}
	for _, f := range []string{"tailscale-serve.md", "README.md"} {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if i, j := strings.Index(string(b), "tailscale serve --bg unix:"), strings.Index(string(b), "tailscale serve --bg http:"); i < 0 || (j >= 0 && j < i) {
			t.Errorf("%s does not lead with the unix-socket door", f)
		}
	}
}
