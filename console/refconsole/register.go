package refconsole

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/phase-console/fleet/internal/peercred"
	"github.com/phase-console/fleet/internal/state"
)

// ErrNotLoopback says that a supervisor address is not a loopback literal: the fleet token is
// never sent to it.
var ErrNotLoopback = errors.New("not a loopback literal with a port (want 127.0.0.1:PORT or [::1]:PORT)")

// CheckSupervisorAddr accepts a loopback IP literal with a port: 127.0.0.0/8 or ::1 (no zone, not
// IPv4-mapped), port 1–65535. A name — even localhost — is refused: a name is resolved by
// something else, and the bearer goes wherever it points.
func CheckSupervisorAddr(addr string) error {
	ap, err := netip.ParseAddrPort(addr)
	if err != nil || !ap.Addr().IsLoopback() || ap.Addr().Zone() != "" || ap.Addr().Is4In6() || ap.Port() == 0 {
		return fmt.Errorf("supervisor address %q: %w", addr, ErrNotLoopback)
	}
	return nil
}

// A Registrar keeps one console registered with the supervisor (SPEC S8) for as long as Run runs:
//
//   - before every attempt it finds the supervisor: Supervisor if set, else the first line of
//     <FleetDir>/supervisor.addr (a private file, F1), and checks with CheckSupervisorAddr that
//     it is a loopback literal — else nothing is sent, the bearer least of all;
//   - it POSTs /fleet/v1/consoles with the fleet bearer and {"id","addr","name"} (201 new, 200
//     refreshed), at once, then every Refresh, so that a supervisor that restarted (or lost its
//     registry) has the console back within Refresh; a failure is retried with back-off from
//     MinBackoff doubling to MaxBackoff;
//   - when ctx is done it DELETEs /fleet/v1/consoles/<id> (best effort, two seconds) and returns.
//
// Log lines (JSON): console.registered when registration starts to succeed or the supervisor
// answers 201, console.register-failed when the failure changes, console.deregistered. The token
// is never logged; the client follows no redirect and uses no proxy.
type Registrar struct {
	ID, Name, Addr string // what to register; Addr is the console's own 127.0.0.1:PORT

	Supervisor string                 // --supervisor; "" means <FleetDir>/supervisor.addr
	FleetDir   string                 // <stateHome>/fleet
	Token      func() (string, error) // the fleet bearer, e.g. console.Verifier.Bearer

	Client     *http.Client  // nil: no proxy, no redirects, 5 s timeout
	Refresh    time.Duration // 0: 5 s
	MinBackoff time.Duration // 0: 250 ms
	MaxBackoff time.Duration // 0: 5 s
	Logger     *slog.Logger  // nil: JSON on stderr

	attempted func(err error) // tests: told of every attempt's outcome
}

func (g *Registrar) defaults() {
	if g.Client == nil {
		// The bearer goes only to a supervisor run by this same user, never to a process of
		// someone else that took its port while it was down.
		g.Client = peercred.OwnClient(5*time.Second, true)
	}
	if g.Refresh <= 0 {
		g.Refresh = 5 * time.Second
	}
	if g.MinBackoff <= 0 {
		g.MinBackoff = 250 * time.Millisecond
	}
	if g.MaxBackoff < g.MinBackoff {
		g.MaxBackoff = max(5*time.Second, g.MinBackoff)
	}
	if g.Logger == nil {
		g.Logger = slog.New(slog.NewJSONHandler(os.Stderr, nil))
	}
}

// Run registers and keeps registering until ctx is done, then deregisters and returns.
func (g *Registrar) Run(ctx context.Context) {
	g.defaults()
	backoff := g.MinBackoff
	registeredAt, lastErr := "", ""
	for {
		addr, status, err := g.register(ctx)
		if g.attempted != nil {
			g.attempted(err)
		}
		wait := g.Refresh
		switch {
		case ctx.Err() != nil:
		case err != nil:
			if err.Error() != lastErr {
				g.Logger.Warn("console.register-failed", "console", g.ID, "error", err.Error(), "retry", "with back-off")
				lastErr = err.Error()
			}
			wait, backoff = backoff, min(2*backoff, g.MaxBackoff)
		default:
			if status == http.StatusCreated || lastErr != "" || addr != registeredAt {
				g.Logger.Info("console.registered", "console", g.ID, "addr", g.Addr, "supervisor", addr, "status", status)
			}
			registeredAt, lastErr, backoff = addr, "", g.MinBackoff
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			g.deregister(registeredAt)
			return
		case <-t.C:
		}
	}
}

// supervisorAddr finds the supervisor and checks that it is a loopback literal.
func (g *Registrar) supervisorAddr() (string, error) {
	addr := g.Supervisor
	if addr == "" {
		path := filepath.Join(g.FleetDir, state.AddrFile)
		data, err := state.ReadPrivateFile(path)
		if err != nil {
			return "", fmt.Errorf("find the supervisor: %w (is `fleet serve` running?)", err)
		}
		addr, _, _ = strings.Cut(string(data), "\n")
		addr = strings.TrimSpace(addr)
	}
	if err := CheckSupervisorAddr(addr); err != nil {
		return "", fmt.Errorf("%w; the fleet token is not sent", err)
	}
	return addr, nil
}

// register sends one POST; it returns the supervisor's address and status.
func (g *Registrar) register(ctx context.Context) (addr string, status int, err error) {
	addr, err = g.supervisorAddr()
	if err != nil {
		return "", 0, err
	}
	body, _ := json.Marshal(map[string]string{"id": g.ID, "addr": g.Addr, "name": g.Name})
	status, why, err := g.send(ctx, http.MethodPost, "http://"+addr+"/fleet/v1/consoles", body)
	if err != nil {
		return addr, status, err
	}
	if status != http.StatusCreated && status != http.StatusOK {
		return addr, status, fmt.Errorf("supervisor %s answered %d to the registration%s", addr, status, why)
	}
	return addr, status, nil
}

// deregister DELETEs the registration where the supervisor is now (else where it was).
func (g *Registrar) deregister(registeredAt string) {
	addr, err := g.supervisorAddr()
	if err != nil {
		addr = registeredAt
	}
	if addr == "" {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	status, _, err := g.send(ctx, http.MethodDelete, "http://"+addr+"/fleet/v1/consoles/"+g.ID, nil)
	if err != nil {
		g.Logger.Warn("console.deregister-failed", "console", g.ID, "supervisor", addr, "error", err.Error())
		return
	}
	g.Logger.Info("console.deregistered", "console", g.ID, "supervisor", addr, "status", status)
}

// send makes one API call. For a refusal, why is ": <reason>: <detail>" from the supervisor's JSON
// answer (or its X-Fleet-Reason header), for the log line.
func (g *Registrar) send(ctx context.Context, method, url string, body []byte) (status int, why string, err error) {
	tok, err := g.Token()
	if err != nil {
		return 0, "", fmt.Errorf("no fleet token to register with: %w", err)
	}
	req, err := http.NewRequestWithContext(ctx, method, url, bytes.NewReader(body))
	if err != nil {
		return 0, "", err
	}
	req.Header.Set("Authorization", "Bearer "+tok)
	req.Header.Set("Accept", "application/json") // a refusal comes back as {"error","detail"}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := g.Client.Do(req)
	if err != nil {
		return 0, "", errors.New(strings.ReplaceAll(err.Error(), tok, "<fleet token>"))
	}
	answer, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	if resp.StatusCode == http.StatusUnauthorized {
		return resp.StatusCode, "", errors.New("supervisor answered 401 to the fleet token: do the console and `fleet serve` use the same --state-dir?")
	}
	if resp.StatusCode >= 400 {
		var e struct{ Error, Detail string }
		if json.Unmarshal(answer, &e) == nil && e.Error != "" {
			why = ": " + e.Error + ": " + strings.ReplaceAll(e.Detail, tok, "<fleet token>")
		} else if r := resp.Header.Get("X-Fleet-Reason"); r != "" {
			why = ": " + r
		}
	}
	return resp.StatusCode, why, nil
}
