package doctor

// The running supervisor: supervisor.addr, the fleet API behind it, the unix socket.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"strings"

	"github.com/phase-console/fleet/internal/peercred"
	"github.com/phase-console/fleet/internal/state"
)

func (r *run) checkSupervisor(ctx context.Context, port int, portSource string) {
	addrPath := r.fleetFile(state.AddrFile)
	b, err := state.ReadPrivateFile(addrPath)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		r.add(Fail, "supervisor", addrPath+" is missing: no supervisor has started with this state folder",
			"start it: fleet serve (as a service: systemctl --user enable --now fleet)")
		return
	case err != nil:
		r.add(Fail, "supervisor", errText(err), fixOf(err, ""))
		return
	}
	addr := strings.TrimSpace(string(b))
	ap, err := netip.ParseAddrPort(addr)
	if err != nil || !ap.Addr().Unmap().IsLoopback() {
		r.add(Fail, "supervisor", fmt.Sprintf("%s holds %q, not a loopback address; the bearer is never sent there", addrPath, addr),
			"restart fleet serve (it rewrites the file)")
		return
	}
	if portSource == "--port" && int(ap.Port()) != port {
		r.add(Fail, "supervisor", fmt.Sprintf("supervisor.addr says %s, but --port is %d", addr, port),
			fmt.Sprintf("pass --port %d, or restart fleet serve --port %d", ap.Port(), port))
		return
	}
	r.probe(ctx, "supervisor", "http://"+ap.String(), r.cfg.HTTPClient, "start it: fleet serve (as a service: systemctl --user start fleet)")
}

func (r *run) checkSocket(ctx context.Context) {
	sock := r.cfg.Socket
	if err := state.CheckDir(filepath.Dir(sock)); err != nil { // the folder fleet serve --socket made 0700
		r.add(Fail, "unix socket", errText(err), fixOf(err, "start fleet serve --socket "+sock))
		return
	}
	st, err := os.Lstat(sock)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		r.add(Fail, "unix socket", sock+" does not exist: no supervisor listens there", "start fleet serve --socket "+sock)
		return
	case err != nil:
		r.add(Fail, "unix socket", err.Error(), "")
		return
	case st.Mode().Type() != fs.ModeSocket:
		r.add(Fail, "unix socket", sock+" is not a socket", "move it away and start fleet serve --socket "+sock)
		return
	case st.Mode().Perm()&0o077 != 0:
		r.add(Fail, "unix socket", fmt.Sprintf("%s is group- or world-accessible (mode %04o)", sock, st.Mode().Perm()), "chmod 600 "+sock)
		return
	}
	c := peercred.OwnClient(r.cfg.Timeout, false)
	c.Transport.(*http.Transport).DialContext = func(ctx context.Context, _, _ string) (net.Conn, error) {
		return peercred.DialOwn(ctx, "unix", sock)
	}
	r.probe(ctx, "unix socket", "http://localhost", c, "start fleet serve --socket "+sock)
}

// probe asks the fleet API at base for the consoles, with this folder's bearer when it has one.
func (r *run) probe(ctx context.Context, name, base string, c *http.Client, startFix string) {
	where := strings.TrimPrefix(base, "http://")
	if name == "unix socket" {
		where = r.cfg.Socket
	}
	pctx, cancel := context.WithTimeout(ctx, r.cfg.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(pctx, http.MethodGet, base+"/fleet/v1/consoles", nil)
	if err != nil {
		r.add(Fail, name, err.Error(), "")
		return
	}
	if r.token != "" {
		req.Header.Set("Authorization", "Bearer "+r.token)
	}
	resp, err := c.Do(req)
	if err != nil {
		r.add(Fail, name, fmt.Sprintf("nothing answers at %s (%v)", where, shortErr(err)), startFix)
		return
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	reason := resp.Header.Get("X-Fleet-Reason")
	switch {
	case resp.StatusCode == http.StatusOK && r.token != "":
		var list struct {
			Consoles []struct {
				Up bool `json:"up"`
			} `json:"consoles"`
			AccessLogDropped uint64 `json:"access_log_dropped"` // G3: lines lost since start
		}
		if err := json.Unmarshal(body, &list); err != nil {
			r.add(Fail, name, fmt.Sprintf("%s answers, but not like fleet's API", where), "check what listens there")
			return
		}
		up := 0
		for _, c := range list.Consoles {
			if c.Up {
				up++
			}
		}
		r.add(OK, name, fmt.Sprintf("answering at %s: %d console(s), %d up", where, len(list.Consoles), up), "")
		if list.AccessLogDropped > 0 && name == "supervisor" {
			r.add(Warn, "access log", fmt.Sprintf("%d line(s) of %s were lost since fleet serve started: its disk was full or too slow, or the file could not be written (SPEC G3)",
				list.AccessLogDropped, r.fleetFile("access.log")),
				"free space on that disk and check the file (0600, yours); requests were served all along")
		}
	case reason == "":
		r.add(Fail, name, fmt.Sprintf("%s answers %d, but it is not fleet", where, resp.StatusCode), "stop what listens there, then start fleet serve")
	case r.token == "":
		r.add(Warn, name, fmt.Sprintf("fleet answers at %s, but without a readable token it cannot be asked more", where), "fix fleet.token (above)")
	case resp.StatusCode == http.StatusUnauthorized:
		r.add(Fail, name, fmt.Sprintf("the supervisor at %s does not take this state folder's token: it runs with another state folder", where),
			"pass that supervisor's --state-dir, or stop it and start fleet serve with this one")
	default:
		r.add(Fail, name, fmt.Sprintf("the supervisor at %s answered %d %s", where, resp.StatusCode, reason), "see the supervisor's log (fleet.rejected lines)")
	}
}

// shortErr drops the URL from a client error, keeping the cause.
func shortErr(err error) string {
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	var oe *net.OpError
	if errors.As(err, &oe) && oe.Err != nil {
		return oe.Err.Error()
	}
	return err.Error()
}
