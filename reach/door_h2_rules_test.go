package reach

import (
	"crypto/tls"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/phase-console/fleet/internal/doorrules"
	"github.com/phase-console/fleet/internal/doortest"
)

// TestSharedRulesHTTP2_S3_S4_S7_S9_S12_R5: the table's HTTP/2 rows, over TLS with ALPN h2 on
// this door's listener, as a paired device: what Go's HTTP/2 server lets through to the door is
// judged as the HTTP/1.1 rows are, and nothing else reaches the console.
func TestSharedRulesHTTP2_S3_S4_S7_S9_S12_R5(t *testing.T) {
	d := startTestDoor(t)
	dev, cookie := d.pair("rules")
	doorrules.RunH2(t, h2RulesDoor{d: d, login: dev.Login(), cred: strings.TrimPrefix(cookie, "Cookie: ")})
}

type h2RulesDoor struct {
	d     *testDoor
	login string
	cred  string // the device cookie, "name=value"
}

func (r h2RulesDoor) DialH2(t *testing.T, serverName string) *tls.Conn {
	t.Helper()
	cfg := &tls.Config{RootCAs: r.d.pool, NextProtos: []string{"h2"}}
	if serverName != "" {
		// A name the leaf cannot verify: what is tested is the door's answer to it.
		cfg.ServerName, cfg.InsecureSkipVerify = serverName, true
	} else {
		cfg.ServerName = r.d.door.Addr().Addr().String() // an IP: verified, and sent as no SNI
	}
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: doortest.WaitLimit}, "tcp", r.d.Addr, cfg)
	if err != nil {
		t.Fatal(err)
	}
	conn.SetDeadline(time.Now().Add(doortest.WaitLimit))
	return conn
}

func (r h2RulesDoor) Authority() string { return r.d.Addr }

func (r h2RulesDoor) Credential() (string, string) { return "cookie", r.cred }

func (r h2RulesDoor) Login() string { return r.login }

// Before lets the limiter's window pass: the table's refusals are failures (R6), and no row may
// be held back by another's.
func (r h2RulesDoor) Before() { r.d.clock.Advance(Window) }

func (r h2RulesDoor) Received() (int, string, http.Header) { return r.d.Alpha.Received() }
