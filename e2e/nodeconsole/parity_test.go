package nodeconsole

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/phase-console/fleet/console"
	"github.com/phase-console/fleet/console/conformance"
	"github.com/phase-console/fleet/console/refconsole"
	"github.com/phase-console/fleet/internal/state"
)

// needNode returns the path of node, or skips (fails under CI=true) without it.
func needNode(t *testing.T) string {
	t.Helper()
	node, err := exec.LookPath("node")
	if err == nil {
		out, verr := exec.Command(node, "-e", "process.stdout.write(String(process.versions.node.split('.')[0] >= 20))").Output()
		if verr == nil && string(out) == "true" {
			return node
		}
		err = fmt.Errorf("node is older than 20 (%v)", verr)
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("CI=true but Node.js 20+ is missing (%v): .ci/run installs it", err)
	}
	t.Skipf("Node.js 20+ not found (%v); the Node console's parity with the Go one is not checked", err)
	return ""
}

// repoRoot is the module root, two folders up from this file.
func repoRoot(t *testing.T) string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}

// stateHome makes a private state folder with a fleet token.
func stateHome(t *testing.T) (home, token string) {
	t.Helper()
	home = t.TempDir()
	if err := os.Chmod(home, 0o700); err != nil {
		t.Fatal(err)
	}
	token, err := state.LoadOrCreateToken(state.FleetDir(home))
	if err != nil {
		t.Fatal(err)
	}
	return home, token
}

// goConsole serves the Go reference console on 127.0.0.1, as `fleet console` does.
func goConsole(t *testing.T, home string) string {
	t.Helper()
	log := slog.New(slog.NewJSONHandler(io.Discard, nil))
	v, err := console.New(console.Config{StateDir: home, Logger: log, TailscaleSocket: filepath.Join(home, "no-tailscaled.sock")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { v.Close() })
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{
		Handler:           refconsole.New(refconsole.Config{ID: "goref", Verifier: v, Logger: log}),
		ReadHeaderTimeout: 10 * time.Second,
		MaxHeaderBytes:    64 << 10,
		ConnContext:       v.ConnContext,
	}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return ln.Addr().String()
}

// nodeConsole starts node/examples/console.mjs and returns the address its first line names.
func nodeConsole(t *testing.T, node, home string) string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	script := filepath.Join(repoRoot(t), "node", "examples", "console.mjs")
	cmd := exec.CommandContext(ctx, node, script, "--id", "noderef", "--port", "0", "--state-dir", home,
		"--tailscale-socket", filepath.Join(home, "no-tailscaled.sock"))
	cmd.Stderr = io.Discard
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel(); cmd.Wait() })
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		t.Fatalf("node console: no first line: %v", err)
	}
	// "fleet console noderef listening on http://127.0.0.1:PORT/"
	_, url, ok := strings.Cut(strings.TrimSpace(line), "listening on http://")
	if !ok {
		t.Fatalf("node console's first line %q names no address", line)
	}
	go io.Copy(io.Discard, stdout)
	return strings.TrimSuffix(url, "/")
}

// decision is what a console decided about one request.
type decision struct {
	Status int
	Reason string
	Scope  string `json:",omitempty"`
	Login  string `json:",omitempty"`
}

func (d decision) String() string {
	s := fmt.Sprintf("%d %q", d.Status, d.Reason)
	if d.Scope != "" {
		s += fmt.Sprintf(" scope=%s login=%q", d.Scope, d.Login)
	}
	return s
}

// send writes req (placeholders filled for this console) on a fresh connection and reads the
// decision from the answer: status, X-Fleet-Reason, and a whoami body's scope and login.
func send(t *testing.T, addr, raw string) decision {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, raw); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return decision{Status: 0, Reason: "no answer: " + err.Error()}
	}
	defer resp.Body.Close()
	d := decision{Status: resp.StatusCode, Reason: resp.Header.Get("X-Fleet-Reason")}
	if resp.StatusCode == http.StatusSwitchingProtocols {
		return d
	}
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	var who struct {
		Scope *string `json:"scope"`
		Login *string `json:"login"`
	}
	if json.Unmarshal(body, &who) == nil && who.Scope != nil && who.Login != nil {
		d.Scope, d.Login = *who.Scope, *who.Login
	}
	return d
}

// startRun asks a console for a run (POST /runs, local) and returns its token.
func startRun(t *testing.T, addr string) (id, token string) {
	t.Helper()
	resp, err := http.Post("http://"+addr+"/runs", "application/json", strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var run struct{ ID, Token string }
	if err := json.NewDecoder(resp.Body).Decode(&run); err != nil || resp.StatusCode != http.StatusCreated {
		t.Fatalf("POST /runs on %s: %d %v", addr, resp.StatusCode, err)
	}
	return run.ID, run.Token
}

// TestNodeAndGoConsolesDecideAlike_C1_C7 sends each row to both reference consoles and wants
// the same decision. {host} is the console's own address, {token} the fleet token, {bad} the
// token with its last byte changed, {run} that console's run token and {runid} its id.
func TestNodeAndGoConsolesDecideAlike_C1_C7(t *testing.T) {
	node := needNode(t)
	home, tok := stateHome(t)
	goAddr := goConsole(t, home)
	nodeAddr := nodeConsole(t, node, home)
	goRunID, goRun := startRun(t, goAddr)
	nodeRunID, nodeRun := startRun(t, nodeAddr)
	bad := tok[:len(tok)-1] + map[bool]string{true: "B", false: "A"}[tok[len(tok)-1] == 'A']

	const (
		alice  = "alice@example.com"
		device = "device:phone#abc234"
		assert = "X-Phase-Console-Fleet: {token}\r\nX-Phase-Console-Fleet-Login: " + alice + "\r\n"
		badA   = "X-Phase-Console-Fleet: {bad}\r\nX-Phase-Console-Fleet-Login: " + alice + "\r\n"
		proxy  = "Tailscale-User-Login: " + alice + "\r\n"
		runTok = "Authorization: Bearer {run}\r\n"
		ws     = "Connection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
	)
	// Each row: name, then the request line and the header lines (Host is given in every row).
	rows := []struct{ name, req string }{
		{"C4 no assertion: local", "GET /whoami HTTP/1.1\r\nHost: {host}\r\n"},
		{"C1 right bearer: remote", "GET /whoami HTTP/1.1\r\nHost: {host}\r\n" + assert},
		{"C1 bad bearer", "GET /whoami HTTP/1.1\r\nHost: {host}\r\n" + badA},
		{"C1 one byte short", "GET /whoami HTTP/1.1\r\nHost: {host}\r\nX-Phase-Console-Fleet: {short}\r\nX-Phase-Console-Fleet-Login: a\r\n"},
		{"C1 empty bearer", "GET /whoami HTTP/1.1\r\nHost: {host}\r\nX-Phase-Console-Fleet: \r\nX-Phase-Console-Fleet-Login: a\r\n"},
		{"C1 empty login", "GET /whoami HTTP/1.1\r\nHost: {host}\r\nX-Phase-Console-Fleet: {token}\r\nX-Phase-Console-Fleet-Login: \r\n"},
		{"C1 bearer alone", "GET /whoami HTTP/1.1\r\nHost: {host}\r\nX-Phase-Console-Fleet: {token}\r\n"},
		{"C1 login alone, spelled x_phase_console_fleet_login", "GET /whoami HTTP/1.1\r\nHost: {host}\r\nx_phase_console_fleet_login: " + alice + "\r\n"},
		{"C1 two bearer lines", "GET /whoami HTTP/1.1\r\nHost: {host}\r\n" + assert + "X_Phase_Console_Fleet: {token}\r\n"},
		{"C1 two login lines", "GET /whoami HTTP/1.1\r\nHost: {host}\r\n" + assert + "X-Phase-Console-Fleet-Login: bob\r\n"},
		{"C1 right bearer spelled X.PHASE.CONSOLE.FLEET", "GET /whoami HTTP/1.1\r\nHost: {host}\r\nX.PHASE.CONSOLE.FLEET: {token}\r\nX-Phase-Console-Fleet-Login: " + alice + "\r\n"},
		{"C1 assertion declared as a trailer", "POST /whoami HTTP/1.1\r\nHost: {host}\r\n" + assert + "Transfer-Encoding: chunked\r\nTrailer: X-Phase-Console-Fleet-Login\r\n\r\n0\r\n"},
		{"C2 Host evil.example", "GET /whoami HTTP/1.1\r\nHost: evil.example\r\n" + assert},
		{"C2 Host 127.0.0.1.evil.example", "GET /whoami HTTP/1.1\r\nHost: 127.0.0.1.evil.example\r\n" + assert},
		{"C2 Host 127.0.0.2", "GET /whoami HTTP/1.1\r\nHost: 127.0.0.2\r\n" + assert},
		{"C2 Host localhost.", "GET /whoami HTTP/1.1\r\nHost: localhost.\r\n" + assert},
		{"C2 Host [::ffff:127.0.0.1]", "GET /whoami HTTP/1.1\r\nHost: [::ffff:127.0.0.1]\r\n" + assert},
		{"C2 Host 127.0.0.1:0", "GET /whoami HTTP/1.1\r\nHost: 127.0.0.1:0\r\n" + assert},
		{"C2 absolute-form target of evil.example", "GET http://evil.example/whoami HTTP/1.1\r\nHost: {host}\r\n" + assert},
		{"C2 absolute-form target of localhost", "GET http://localhost/whoami HTTP/1.1\r\nHost: evil.example\r\n" + assert},
		{"C2 Host LOCALHOST believed", "GET /whoami HTTP/1.1\r\nHost: LOCALHOST\r\n" + assert},
		{"C2 Host [::1]:1 believed", "GET /whoami HTTP/1.1\r\nHost: [::1]:1\r\n" + assert},
		{"C3 proxy header", "GET /whoami HTTP/1.1\r\nHost: {host}\r\n" + assert + proxy},
		{"C3 proxy header spelled TAILSCALE_USER_LOGIN", "GET /whoami HTTP/1.1\r\nHost: {host}\r\n" + assert + "TAILSCALE_USER_LOGIN: x\r\n"},
		{"C3 order: proxy + foreign Host + bad bearer", "GET /whoami HTTP/1.1\r\nHost: evil.example\r\n" + badA + proxy},
		{"C2 order: foreign Host + bad bearer", "GET /whoami HTTP/1.1\r\nHost: evil.example\r\n" + badA},
		{"C4 assertion with X-Forwarded-For", "GET /whoami HTTP/1.1\r\nHost: {host}\r\n" + assert + "X-Forwarded-For: 127.0.0.1\r\n"},
		{"host: no assertion, foreign Host", "GET /whoami HTTP/1.1\r\nHost: evil.example\r\n"},
		{"host: no assertion, Host localhost.evil.example with its Origin", "POST /presence HTTP/1.1\r\nHost: localhost.evil.example\r\nOrigin: http://localhost.evil.example\r\nContent-Length: 2\r\n\r\n{}"},
		{"no-assertion: proxy header alone", "GET /whoami HTTP/1.1\r\nHost: {host}\r\n" + proxy},
		{"no-assertion: X-Forwarded-Host", "GET /whoami HTTP/1.1\r\nHost: {host}\r\nX-Forwarded-Host: a\r\n"},
		{"no-assertion: x_real_ip", "GET /whoami HTTP/1.1\r\nHost: {host}\r\nx_real_ip: 1.2.3.4\r\n"},
		{"no-assertion: Forwarded", "GET /whoami HTTP/1.1\r\nHost: {host}\r\nForwarded: for=1.2.3.4\r\n"},
		{"no-assertion: Tailscale-Funnel-Request", "GET /whoami HTTP/1.1\r\nHost: {host}\r\nTailscale-Funnel-Request: ?1\r\n"},
		{"cross-origin: another site", "GET /whoami HTTP/1.1\r\nHost: {host}\r\nOrigin: http://evil.example\r\n"},
		{"cross-origin: null", "GET /whoami HTTP/1.1\r\nHost: {host}\r\nOrigin: null\r\n"},
		{"cross-origin: own origin with a path", "GET /whoami HTTP/1.1\r\nHost: {host}\r\nOrigin: http://{host}/\r\n"},
		{"cross-origin: https of the same host", "GET /whoami HTTP/1.1\r\nHost: {host}\r\nOrigin: https://{host}\r\n"},
		{"cross-origin: own origin is local", "GET /whoami HTTP/1.1\r\nHost: {host}\r\nOrigin: http://{host}\r\n"},
		{"cross-origin: own origin, default port", "GET /whoami HTTP/1.1\r\nHost: localhost\r\nOrigin: http://LOCALHOST:80\r\n"},
		{"C5 presence, local", "POST /presence HTTP/1.1\r\nHost: {host}\r\nContent-Length: 2\r\n\r\n{}"},
		{"C5 presence, remote", "POST /presence HTTP/1.1\r\nHost: {host}\r\n" + assert + "Content-Length: 2\r\n\r\n{}"},
		{"C5 runs, remote", "POST /runs HTTP/1.1\r\nHost: {host}\r\n" + assert + "Content-Length: 2\r\n\r\n{}"},
		{"C5 end a run, remote", "DELETE /runs/{runid} HTTP/1.1\r\nHost: {host}\r\n" + assert},
		{"C6 run token", "POST /hooks/permission-request HTTP/1.1\r\nHost: {host}\r\n" + runTok + "Content-Length: 2\r\n\r\n{}"},
		{"C6 no bearer", "POST /hooks/permission-request HTTP/1.1\r\nHost: {host}\r\nContent-Length: 2\r\n\r\n{}"},
		{"C6 fleet token as the run bearer", "POST /hooks/permission-request HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {token}\r\nContent-Length: 2\r\n\r\n{}"},
		{"C6 Basic scheme", "POST /hooks/permission-request HTTP/1.1\r\nHost: {host}\r\nAuthorization: Basic {run}\r\nContent-Length: 2\r\n\r\n{}"},
		{"C6 two Authorization lines", "POST /hooks/permission-request HTTP/1.1\r\nHost: {host}\r\n" + runTok + runTok + "Content-Length: 2\r\n\r\n{}"},
		{"C6 run token + X-Forwarded-For", "POST /hooks/permission-request HTTP/1.1\r\nHost: {host}\r\n" + runTok + "X-Forwarded-For: 127.0.0.1\r\nContent-Length: 2\r\n\r\n{}"},
		{"C6 run token + X_Forwarded_Proto", "POST /hooks/permission-request HTTP/1.1\r\nHost: {host}\r\n" + runTok + "X_Forwarded_Proto: http\r\nContent-Length: 2\r\n\r\n{}"},
		{"C6 run token + proxy header", "POST /hooks/permission-request HTTP/1.1\r\nHost: {host}\r\n" + runTok + proxy + "Content-Length: 2\r\n\r\n{}"},
		{"C6 run token + the right assertion", "POST /hooks/permission-request HTTP/1.1\r\nHost: {host}\r\n" + runTok + assert + "Content-Length: 2\r\n\r\n{}"},
		{"C6 order: bad assertion + foreign Host + proxy", "POST /hooks/permission-request HTTP/1.1\r\nHost: evil.example\r\n" + runTok + badA + proxy + "Content-Length: 2\r\n\r\n{}"},
		{"C6 run token, foreign Host, no assertion", "POST /hooks/permission-request HTTP/1.1\r\nHost: evil.example\r\n" + runTok + "Content-Length: 2\r\n\r\n{}"},
		{"C6 run token, cross-origin", "POST /hooks/permission-request HTTP/1.1\r\nHost: {host}\r\nOrigin: http://evil.example\r\n" + runTok + "Content-Length: 2\r\n\r\n{}"},
		{"C6 %68ooks with X-Forwarded-For", "POST /%68ooks/permission-request HTTP/1.1\r\nHost: {host}\r\n" + runTok + "X-Forwarded-For: 127.0.0.1\r\nContent-Length: 2\r\n\r\n{}"},
		{"C6 /HOOKS/other with an assertion", "GET /HOOKS/other HTTP/1.1\r\nHost: {host}\r\n" + assert},
		{"C6 GET of the hook, local", "GET /hooks/permission-request HTTP/1.1\r\nHost: {host}\r\n" + runTok},
		{"C7 device POST", "POST /settings/reach HTTP/1.1\r\nHost: {host}\r\nX-Phase-Console-Fleet: {token}\r\nX-Phase-Console-Fleet-Login: " + device + "\r\nContent-Length: 14\r\n\r\n{\"mode\":\"off\"}"},
		{"C7 Device: POST", "POST /settings/reach HTTP/1.1\r\nHost: {host}\r\nX-Phase-Console-Fleet: {token}\r\nX-Phase-Console-Fleet-Login: Device:x\r\nContent-Length: 14\r\n\r\n{\"mode\":\"off\"}"},
		{"C7 device GET", "GET /settings/reach HTTP/1.1\r\nHost: {host}\r\nX-Phase-Console-Fleet: {token}\r\nX-Phase-Console-Fleet-Login: " + device + "\r\n"},
		{"C7 tailnet login POST", "POST /settings/reach HTTP/1.1\r\nHost: {host}\r\n" + assert + "Content-Length: 14\r\n\r\n{\"mode\":\"off\"}"},
		{"C7 local POST", "POST /settings/reach HTTP/1.1\r\nHost: {host}\r\nContent-Length: 17\r\n\r\n{\"mode\":\"direct\"}"},
		{"C7 local POST of a bad mode", "POST /settings/reach HTTP/1.1\r\nHost: {host}\r\nContent-Length: 15\r\n\r\n{\"mode\":\"wide\"}"},
		{"WebSocket handshake, remote", "GET /ws HTTP/1.1\r\nHost: {host}\r\n" + assert + ws},
		{"WebSocket handshake, bad bearer", "GET /ws HTTP/1.1\r\nHost: {host}\r\n" + badA + ws},
		{"WebSocket handshake, foreign Host", "GET /ws HTTP/1.1\r\nHost: evil.example\r\n" + ws},
		{"WebSocket handshake, cross-origin", "GET /ws HTTP/1.1\r\nHost: {host}\r\nOrigin: http://evil.example\r\n" + ws},
		{"WebSocket handshake, version 8", "GET /ws HTTP/1.1\r\nHost: {host}\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 8\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"},
		{"an upgrade to whoami is an ordinary request", "GET /whoami HTTP/1.1\r\nHost: {host}\r\n" + assert + ws},
		{"page, remote", "GET / HTTP/1.1\r\nHost: {host}\r\n" + assert},
		{"HEAD whoami, local", "HEAD /whoami HTTP/1.1\r\nHost: {host}\r\n"},
		{"unknown path, local", "GET /nothing HTTP/1.1\r\nHost: {host}\r\n"},
		{"unknown path, bad bearer", "GET /nothing HTTP/1.1\r\nHost: {host}\r\n" + badA},
		{"wrong method, local", "PUT /whoami HTTP/1.1\r\nHost: {host}\r\nContent-Length: 0\r\n"},
		{"path not clean, local", "GET //whoami HTTP/1.1\r\nHost: {host}\r\n"},
		{"path with a dot segment, remote", "GET /a/../whoami HTTP/1.1\r\nHost: {host}\r\n" + assert},
		{"end an unknown run, local", "DELETE /runs/0000000000000000 HTTP/1.1\r\nHost: {host}\r\n"},
		{"C6 the run, ended, then its token", "DELETE /runs/{runid} HTTP/1.1\r\nHost: {host}\r\n"},
		{"C6 the run's token after it ended", "POST /hooks/permission-request HTTP/1.1\r\nHost: {host}\r\n" + runTok + "Content-Length: 2\r\n\r\n{}"},
	}
	fill := func(s, addr, run, runID string) string {
		return strings.NewReplacer("{host}", addr, "{token}", tok, "{bad}", bad, "{short}", tok[:len(tok)-1],
			"{run}", run, "{runid}", runID).Replace(s)
	}
	for _, row := range rows {
		req := row.req
		if !strings.Contains(req, "\r\n\r\n") {
			req += "\r\n"
		}
		req = strings.Replace(req, "\r\n", "\r\nConnection: close\r\n", 1)
		gd := send(t, goAddr, fill(req, goAddr, goRun, goRunID))
		nd := send(t, nodeAddr, fill(req, nodeAddr, nodeRun, nodeRunID))
		if gd != nd {
			t.Errorf("%s: Go console %v, Node console %v", row.name, gd, nd)
		} else {
			t.Logf("%s: both %v", row.name, gd)
		}
	}
}

// TestNodeConsolePassesTheConformanceChecker_C1_C7 is `fleet check-console` against the Node
// reference console: every probe must pass.
func TestNodeConsolePassesTheConformanceChecker_C1_C7(t *testing.T) {
	node := needNode(t)
	home, tok := stateHome(t)
	addr := nodeConsole(t, node, home)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := conformance.Preflight(ctx, "http://"+addr); err != nil {
		t.Fatal(err)
	}
	results := conformance.Check(ctx, "http://"+addr, tok)
	if len(results) == 0 {
		t.Fatal("no probe ran")
	}
	for _, r := range results {
		if !r.OK {
			t.Error(r)
		}
	}
}
