package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// callerIP and callerLogin are the tailnet caller that benchd's fake LocalAPI knows.
const (
	callerIP    = "100.64.0.7"
	callerLogin = "alice@example.com"
)

// A tree is this tree's binaries, built into a private folder, and that folder.
type tree struct {
	dir          string
	fleet, bench string
	localAPI     *exec.Cmd
	socket       string
}

// buildTree builds fleet and benchd and starts benchd's fake tailscaled LocalAPI.
func buildTree() (*tree, error) {
	dir, err := os.MkdirTemp("", "fleet-scale.")
	if err != nil {
		return nil, err
	}
	t := &tree{dir: dir, fleet: filepath.Join(dir, "fleet"), bench: filepath.Join(dir, "benchd"), socket: filepath.Join(dir, "tailscaled.sock")}
	for bin, pkg := range map[string]string{t.fleet: "./cmd/fleet", t.bench: "./bench/benchd"} {
		if out, err := exec.Command("go", "build", "-o", bin, pkg).CombinedOutput(); err != nil {
			return nil, fmt.Errorf("go build %s: %v\n%s", pkg, err, out)
		}
	}
	t.localAPI = exec.Command(t.bench, "localapi", "-socket", t.socket, "-caller", callerIP, "-login", callerLogin)
	if err := t.localAPI.Start(); err != nil {
		return nil, err
	}
	for range 100 {
		if _, err := os.Stat(t.socket); err == nil {
			return t, nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return nil, fmt.Errorf("benchd localapi did not listen on %s", t.socket)
}

func (t *tree) close() {
	if t.localAPI != nil && t.localAPI.Process != nil {
		t.localAPI.Process.Signal(syscall.SIGTERM)
		t.localAPI.Wait()
	}
	os.RemoveAll(t.dir)
}

// A fleet is one `fleet serve` of this tree, with its own state folder.
type fleet struct {
	cmd    *exec.Cmd
	addr   string // its loopback door
	token  string
	client *http.Client // one kept connection: requests are sent one at a time
}

// startFleet starts `fleet serve` on a free port with a state folder of its own.
func (t *tree) startFleet(name string) (*fleet, error) {
	home := filepath.Join(t.dir, name)
	if err := os.MkdirAll(home, 0o700); err != nil {
		return nil, err
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	log, err := os.Create(filepath.Join(t.dir, name+".log"))
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(t.fleet, "serve", "--state-dir", home, "--port", strconv.Itoa(port),
		"--tailscale-socket", t.socket, "--tailscaled-uid", strconv.Itoa(os.Getuid()), "--log-format", "json")
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	f := &fleet{cmd: cmd, addr: fmt.Sprintf("127.0.0.1:%d", port), client: oneConnClient()}
	tokenPath := filepath.Join(home, "fleet", "fleet.token")
	for range 200 {
		if tok, err := os.ReadFile(tokenPath); err == nil && len(bytes.TrimSpace(tok)) > 0 {
			if c, err := net.Dial("tcp", f.addr); err == nil {
				c.Close()
				f.token = string(bytes.TrimSpace(tok))
				return f, nil
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	cmd.Process.Kill()
	return nil, fmt.Errorf("fleet serve (%s) did not listen on %s; see %s", name, f.addr, log.Name())
}

func (f *fleet) stop() {
	f.cmd.Process.Signal(syscall.SIGTERM)
	f.cmd.Wait()
}

// rss is the process's resident set size in bytes (VmRSS).
func (f *fleet) rss() int64 { return vmRSS(f.cmd.Process.Pid) }

func vmRSS(pid int) int64 {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb << 10
		}
	}
	return 0
}

func oneConnClient() *http.Client {
	return &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{Proxy: nil, MaxIdleConnsPerHost: 1, DisableCompression: true}}
}

// serveGet is a GET as Tailscale Serve sends it for the verified caller.
func (f *fleet) serveGet(path, accept string) (time.Duration, error) {
	req, _ := http.NewRequest(http.MethodGet, "http://"+f.addr+path, nil)
	req.Header.Set("X-Forwarded-For", callerIP)
	req.Header.Set("Tailscale-User-Login", callerLogin)
	if accept != "" {
		req.Header.Set("Accept", accept)
	}
	return f.do(req, http.StatusOK)
}

// api is a request to the registry API with the fleet bearer, from this machine.
func (f *fleet) api(method, path string, body any, want ...int) (time.Duration, []byte, error) {
	var r io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		r = bytes.NewReader(b)
	}
	req, _ := http.NewRequest(method, "http://"+f.addr+path, r)
	req.Header.Set("Authorization", "Bearer "+f.token)
	req.Header.Set("Content-Type", "application/json")
	start := time.Now()
	res, err := f.client.Do(req)
	if err != nil {
		return 0, nil, err
	}
	data, err := io.ReadAll(res.Body)
	res.Body.Close()
	took := time.Since(start)
	if err != nil {
		return 0, nil, err
	}
	for _, w := range want {
		if res.StatusCode == w {
			return took, data, nil
		}
	}
	return 0, nil, fmt.Errorf("%s %s: %s (%s)", method, path, res.Status, res.Header.Get("X-Fleet-Reason"))
}

func (f *fleet) do(req *http.Request, want int) (time.Duration, error) {
	start := time.Now()
	res, err := f.client.Do(req)
	if err != nil {
		return 0, err
	}
	_, err = io.Copy(io.Discard, res.Body)
	res.Body.Close()
	took := time.Since(start)
	if err != nil {
		return 0, err
	}
	if res.StatusCode != want {
		return 0, fmt.Errorf("%s %s: %s (%s)", req.Method, req.URL.Path, res.Status, res.Header.Get("X-Fleet-Reason"))
	}
	return took, nil
}

// register registers a console as a console does; it reports how long the API took.
func (f *fleet) register(id, addr string) (time.Duration, error) {
	took, _, err := f.api(http.MethodPost, "/fleet/v1/consoles", map[string]string{"id": id, "addr": addr}, http.StatusCreated, http.StatusOK)
	return took, err
}

// health is what `fleet consoles` shows of each console, by id.
func (f *fleet) health() (map[string]string, error) {
	_, data, err := f.api(http.MethodGet, "/fleet/v1/consoles", nil, http.StatusOK)
	if err != nil {
		return nil, err
	}
	var list struct {
		Consoles []struct {
			ID     string `json:"id"`
			Health string `json:"health"`
		} `json:"consoles"`
	}
	if err := json.Unmarshal(data, &list); err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, c := range list.Consoles {
		out[c.ID] = c.Health
	}
	return out, nil
}

func freePort() (int, error) {
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// samples are durations measured one way.
type samples []time.Duration

func (s samples) pct(p float64) time.Duration {
	if len(s) == 0 {
		return 0
	}
	c := append(samples(nil), s...)
	sort.Slice(c, func(i, j int) bool { return c[i] < c[j] })
	return c[min(len(c)-1, int(p*float64(len(c))))]
}

// ms formats d in milliseconds, or microseconds below one.
func ms(d time.Duration) string {
	if d < 10*time.Microsecond {
		return fmt.Sprintf("%d ns", d.Nanoseconds())
	}
	if d < time.Millisecond {
		return fmt.Sprintf("%d µs", d.Microseconds())
	}
	return fmt.Sprintf("%.1f ms", float64(d)/float64(time.Millisecond))
}

func kib(b float64) string { return fmt.Sprintf("%.1f KiB", b/1024) }

func ratio(a, b float64) string {
	if b == 0 {
		return "–"
	}
	return fmt.Sprintf("%.2f×", a/b)
}

// row writes one row of the table.
func row(w io.Writer, cost, expected, measured, r string) {
	fmt.Fprintf(w, "| %s | %s | %s | %s |\n", cost, expected, measured, r)
}

// readUntil reads from br until the text seen so far contains want.
func readUntil(br *bufio.Reader, want string) error {
	var seen []byte
	buf := make([]byte, 512)
	for !bytes.Contains(seen, []byte(want)) {
		n, err := br.Read(buf)
		seen = append(seen, buf[:n]...)
		if err != nil {
			return fmt.Errorf("%v after %q", err, seen)
		}
	}
	return nil
}
