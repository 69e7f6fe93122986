//go:build unix

package peercred

import (
	"encoding/binary"
	"errors"
	"io"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/phase-console/fleet/internal/otheruser"
)

// The samples below are what Linux prints on a little-endian machine (amd64, arm64): the
// supervisor at 127.0.0.1:7420 (port 1CFC, uid 1001), tailscaled's client socket at
// 127.0.0.1:53924 (port D2A4, uid 997).
const (
	procNetHeader4 = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode                                                     \n"
	procNetHeader6 = "  sl  local_address                         remote_address                        st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n"

	// Listener, the peer (997), the supervisor's accepted end (1001).
	procNetSampleV4 = procNetHeader4 +
		"   0: 0100007F:1CFC 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1001        0 20114 1 0000000000000000 100 0 0 10 0                     \n" +
		"   1: 0100007F:D2A4 0100007F:1CFC 01 00000000:00000000 00:00000000 00000000   997        0 20871 1 0000000000000000 20 4 30 10 -1                    \n" +
		"   2: 0100007F:1CFC 0100007F:D2A4 01 00000000:00000000 00:00000000 00000000  1001        0 20872 1 0000000000000000 20 4 29 10 -1                    \n"

	// The same connection over ::1.
	procNetSampleV6 = procNetHeader6 +
		"   0: 00000000000000000000000001000000:1CFC 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000  1001        0 30114 1 0000000000000000 100 0 0 10 0\n" +
		"   1: 00000000000000000000000001000000:D2A4 00000000000000000000000001000000:1CFC 01 00000000:00000000 00:00000000 00000000   997        0 30871 1 0000000000000000 20 4 30 10 -1\n" +
		"   2: 00000000000000000000000001000000:1CFC 00000000000000000000000001000000:D2A4 01 00000000:00000000 00:00000000 00000000  1001        0 30872 1 0000000000000000 20 4 29 10 -1\n"

	// A dual-stack supervisor ([::]:7420) accepted a v4 client: its end is in tcp6 as
	// ::ffff:127.0.0.1, the client's in tcp as 127.0.0.1.
	procNetSampleMappedServer6 = procNetHeader6 +
		"   0: 00000000000000000000000000000000:1CFC 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000  1001        0 40114 1 0000000000000000 100 0 0 10 0\n" +
		"   1: 0000000000000000FFFF00000100007F:1CFC 0000000000000000FFFF00000100007F:D2A4 01 00000000:00000000 00:00000000 00000000  1001        0 40872 1 0000000000000000 20 4 29 10 -1\n"
	procNetSampleMappedClient4 = procNetHeader4 +
		"   0: 0100007F:D2A4 0100007F:1CFC 01 00000000:00000000 00:00000000 00000000   997        0 40871 1 0000000000000000 20 4 30 10 -1\n"

	// A dual-stack client socket (tcp6, mapped) talking to a v4-only supervisor.
	procNetSampleMappedClient6 = procNetHeader6 +
		"   0: 0000000000000000FFFF00000100007F:D2A4 0000000000000000FFFF00000100007F:1CFC 01 00000000:00000000 00:00000000 00000000   997        0 50871 1 0000000000000000 20 4 30 10 -1\n"
)

var (
	procNetServer4 = netip.MustParseAddrPort("127.0.0.1:7420")
	procNetClient4 = netip.MustParseAddrPort("127.0.0.1:53924")
	procNetServer6 = netip.MustParseAddrPort("[::1]:7420")
	procNetClient6 = netip.MustParseAddrPort("[::1]:53924")
	procNetMappedS = netip.MustParseAddrPort("[::ffff:127.0.0.1]:7420")
	procNetMappedC = netip.MustParseAddrPort("[::ffff:127.0.0.1]:53924")
)

// procNetPeerLine4 is the peer's line of procNetSampleV4 with state st, uid and inode replaced.
func procNetPeerLine4(st, uid, inode string) string {
	return "   1: 0100007F:D2A4 0100007F:1CFC " + st + " 00000000:00000000 00:00000000 00000000 " + uid + " 0 " + inode + " 1 0000000000000000 20 4 30 10 -1\n"
}

func procNetSkipBigEndian(t testing.TB) {
	if binary.NativeEndian.Uint16([]byte{1, 0}) != 1 {
		t.Skip("the literal samples are little-endian")
	}
}

func TestParseProcNetTCP(t *testing.T) {
	procNetSkipBigEndian(t)
	tests := []struct {
		name          string
		text          string
		local, remote netip.AddrPort
		wantUID       uint32
		wantFound     bool
		wantAmbiguous bool
	}{
		{name: "v4 peer's line", text: procNetSampleV4, local: procNetServer4, remote: procNetClient4, wantUID: 997, wantFound: true},
		{name: "v4 mirrored query finds the server's own end", text: procNetSampleV4, local: procNetClient4, remote: procNetServer4, wantUID: 1001, wantFound: true},
		{name: "v4 other client port", text: procNetSampleV4, local: procNetServer4, remote: netip.MustParseAddrPort("127.0.0.1:53925")},
		{name: "v4 other client address 127.0.0.2", text: procNetSampleV4, local: procNetServer4, remote: netip.MustParseAddrPort("127.0.0.2:53924")},
		{name: "v4 other server port", text: procNetSampleV4, local: netip.MustParseAddrPort("127.0.0.1:7421"), remote: procNetClient4},
		{name: "v4 the listener is no peer", text: procNetSampleV4, local: netip.MustParseAddrPort("0.0.0.0:0"), remote: procNetServer4},
		{name: "v4 sample does not answer for ::1", text: procNetSampleV4, local: procNetServer6, remote: procNetClient6},
		{name: "v6 peer's line", text: procNetSampleV6, local: procNetServer6, remote: procNetClient6, wantUID: 997, wantFound: true},
		{name: "v6 sample does not answer for 127.0.0.1", text: procNetSampleV6, local: procNetServer4, remote: procNetClient4},
		{name: "mapped server end, v4 peer in tcp", text: procNetSampleMappedClient4, local: procNetMappedS, remote: procNetMappedC, wantUID: 997, wantFound: true},
		{name: "mapped server tcp6 holds no peer", text: procNetSampleMappedServer6, local: procNetMappedS, remote: procNetMappedC},
		{name: "mapped peer in tcp6, plain v4 query", text: procNetSampleMappedClient6, local: procNetServer4, remote: procNetClient4, wantUID: 997, wantFound: true},
		{name: "mapped peer in tcp6, mapped query", text: procNetSampleMappedClient6, local: procNetMappedS, remote: procNetMappedC, wantUID: 997, wantFound: true},
		{name: "zone ignored", text: procNetSampleV6, local: netip.MustParseAddrPort("[::1%lo]:7420"), remote: procNetClient6, wantUID: 997, wantFound: true},
		{name: "lower-case hex", text: strings.ToLower(procNetSampleMappedClient6), local: procNetServer4, remote: procNetClient4, wantUID: 997, wantFound: true},
		{name: "no trailing newline", text: strings.TrimSuffix(procNetSampleV4, "\n"), local: procNetClient4, remote: procNetServer4, wantUID: 1001, wantFound: true},
		{name: "CRLF", text: strings.ReplaceAll(procNetSampleV4, "\n", "\r\n"), local: procNetServer4, remote: procNetClient4, wantUID: 997, wantFound: true},
		{name: "empty", text: "", local: procNetServer4, remote: procNetClient4},
		{name: "header only", text: procNetHeader4, local: procNetServer4, remote: procNetClient4},

		// States: only a live socket is a peer.
		{name: "state CLOSE_WAIT counts", text: procNetHeader4 + procNetPeerLine4("08", "997", "20871"), local: procNetServer4, remote: procNetClient4, wantUID: 997, wantFound: true},
		{name: "state FIN_WAIT1 counts", text: procNetHeader4 + procNetPeerLine4("04", "997", "20871"), local: procNetServer4, remote: procNetClient4, wantUID: 997, wantFound: true},
		{name: "state 0b lower-case CLOSING counts", text: procNetHeader4 + procNetPeerLine4("0b", "997", "20871"), local: procNetServer4, remote: procNetClient4, wantUID: 997, wantFound: true},
		{name: "state SYN_SENT is no peer", text: procNetHeader4 + procNetPeerLine4("02", "997", "20871"), local: procNetServer4, remote: procNetClient4},
		{name: "state SYN_RECV is no peer", text: procNetHeader4 + procNetPeerLine4("03", "997", "20871"), local: procNetServer4, remote: procNetClient4},
		{name: "state LISTEN is no peer", text: procNetHeader4 + procNetPeerLine4("0A", "997", "20871"), local: procNetServer4, remote: procNetClient4},
		{name: "state 1 (one digit) is malformed", text: procNetHeader4 + procNetPeerLine4("1", "997", "20871"), local: procNetServer4, remote: procNetClient4},
		// Timewait entries print uid 0 and inode 0: never trust them as root.
		{name: "TIME_WAIT uid 0 is not root", text: procNetHeader4 + "   1: 0100007F:D2A4 0100007F:1CFC 06 00000000:00000000 03:00001770 00000000     0        0 0 3 0000000000000000\n", local: procNetServer4, remote: procNetClient4},
		{name: "FIN_WAIT2 timewait uid 0 is not root", text: procNetHeader4 + "   1: 0100007F:D2A4 0100007F:1CFC 05 00000000:00000000 03:00001770 00000000     0        0 0 3 0000000000000000\n", local: procNetServer4, remote: procNetClient4},
		{name: "orphaned FIN_WAIT1 inode 0", text: procNetHeader4 + "   1: 0100007F:D2A4 0100007F:1CFC 04 00000001:00000000 01:00000014 00000000     0        0 0 2 0000000000000000 20 0 0 10 -1\n", local: procNetServer4, remote: procNetClient4},

		// Duplicates: one uid is an answer, two are not.
		{name: "duplicate line, same uid", text: procNetSampleV4 + procNetPeerLine4("01", "997", "20871"), local: procNetServer4, remote: procNetClient4, wantUID: 997, wantFound: true},
		{name: "ambiguous: two uids", text: procNetSampleV4 + procNetPeerLine4("01", "0", "20999"), local: procNetServer4, remote: procNetClient4, wantAmbiguous: true},
		{name: "same uid in v4 and mapped v6 lines", text: procNetSampleV4 + procNetSampleMappedClient6[len(procNetHeader6):], local: procNetServer4, remote: procNetClient4, wantUID: 997, wantFound: true},
		{name: "ambiguous: second uid after a dead one", text: procNetSampleV4 + procNetPeerLine4("06", "0", "0") + procNetPeerLine4("01", "998", "1"), local: procNetServer4, remote: procNetClient4, wantAmbiguous: true},

		// Malformed lines are skipped, even when they would name a uid for the right addresses.
		{name: "malformed lines skipped", text: procNetHeader4 +
			"   1: 0100007F:D2A4 0100007F:1CFC 01 00000000:00000000 00:00000000 00000000 0\n" + // too few fields
			procNetPeerLine4("01", "-1", "20871") + // negative uid
			procNetPeerLine4("01", "+0", "20871") + // signed uid
			procNetPeerLine4("01", "4294967295", "20871") + // (uid_t)-1
			procNetPeerLine4("01", "4294967296", "20871") + // over 32 bits
			procNetPeerLine4("01", "0x0", "20871") + // hex uid
			procNetPeerLine4("01", "0", "-1") + // bad inode
			procNetPeerLine4("01", "0", "x") + // bad inode
			strings.Replace(procNetPeerLine4("01", "0", "1"), "   1:", "   1", 1) + // no "sl:"
			strings.Replace(procNetPeerLine4("01", "0", "1"), "   1:", "   x:", 1) + // bad sl
			strings.Replace(procNetPeerLine4("01", "0", "1"), "0100007F:D2A4", "0100007F:0D2A4", 1) + // 5-digit port
			strings.Replace(procNetPeerLine4("01", "0", "1"), "0100007F:D2A4", "0100007F:D2A", 1) + // 3-digit port
			strings.Replace(procNetPeerLine4("01", "0", "1"), "0100007F:D2A4", "100007F:D2A4", 1) + // 7-digit address
			strings.Replace(procNetPeerLine4("01", "0", "1"), "0100007F:D2A4", "0x00007F:D2A4", 1) + // prefix
			strings.Replace(procNetPeerLine4("01", "0", "1"), "0100007F:D2A4", "+100007F:D2A4", 1) + // sign
			strings.Replace(procNetPeerLine4("01", "0", "1"), "0100007F:D2A4", "0100007F:D2A4:", 1) + // extra colon
			strings.Replace(procNetPeerLine4("01", "0", "1"), "0100007F:D2A4", "0100007FD2A4", 1) + // no colon
			strings.Replace(procNetPeerLine4("01", "0", "1"), "0100007F:D2A4", "0000000000000000FFFF00000100007F:D2A4", 1) + // mixed families
			"\x00\xff\xfe garbage\n" +
			"   1: " + strings.Repeat("A", 10000) + " 0100007F:D2A4 0100007F:1CFC 01\n", // over-long line
			local: procNetServer4, remote: procNetClient4},
		{name: "valid line after an over-long one", text: procNetHeader4 + "   9: " + strings.Repeat("0100007F:D2A4 ", 1000) + "\n" + procNetPeerLine4("01", "997", "20871"), local: procNetServer4, remote: procNetClient4, wantUID: 997, wantFound: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			uid, found, err := parseProcNetTCP(strings.NewReader(tt.text), tt.local, tt.remote)
			if tt.wantAmbiguous {
				if !errors.Is(err, ErrPeerUIDAmbiguous) || found {
					t.Fatalf("parseProcNetTCP = %d, %v, %v; want ErrPeerUIDAmbiguous", uid, found, err)
				}
				return
			}
			if err != nil || found != tt.wantFound || uid != tt.wantUID {
				t.Fatalf("parseProcNetTCP = %d, %v, %v; want %d, %v, nil", uid, found, err, tt.wantUID, tt.wantFound)
			}
		})
	}
}

func TestParseProcNetTCPReadError(t *testing.T) {
	procNetSkipBigEndian(t)
	boom := errors.New("boom")
	r := io.MultiReader(strings.NewReader(procNetSampleV4), procNetErrReader{boom})
	if uid, found, err := parseProcNetTCP(r, procNetServer4, procNetClient4); !errors.Is(err, boom) || found {
		t.Fatalf("parseProcNetTCP = %d, %v, %v; want the read error, even after a match", uid, found, err)
	}
}

type procNetErrReader struct{ err error }

func (r procNetErrReader) Read([]byte) (int, error) { return 0, r.err }

func TestProcNetParseAddrPort(t *testing.T) {
	procNetSkipBigEndian(t)
	tests := []struct {
		in   string
		want string // "" for malformed
	}{
		{"0100007F:1CF4", "127.0.0.1:7412"},
		{"0100007F:0000", "127.0.0.1:0"},
		{"00000000:FFFF", "0.0.0.0:65535"},
		{"0101A8C0:01BB", "192.168.1.1:443"},
		{"00000000000000000000000001000000:1CF4", "[::1]:7412"},
		{"0000000000000000FFFF00000100007F:1CF4", "127.0.0.1:7412"}, // unmapped
		{"B80D0120000000000000000001000000:0050", "[2001:db8::1]:80"},
		{"000080FE00000000FF0000020100005E:0016", "[fe80::200:ff:5e00:1]:22"},
		{"0100007F:1CF", ""},
		{"0100007F:01CF4", ""},
		{"0100007F", ""},
		{"0100007F:", ""},
		{":1CF4", ""},
		{"0100007:1CF4", ""},
		{"0100007F0:1CF4", ""},
		{"0100007G:1CF4", ""},
		{"0100007F:1CFG", ""},
		{"-100007F:1CF4", ""},
		{"0000000000000000000000000100000:1CF4", ""},
		{"0100007F:1C:F4", ""},
	}
	for _, tt := range tests {
		got, ok := procNetParseAddrPort([]byte(tt.in))
		if tt.want == "" {
			if ok {
				t.Errorf("procNetParseAddrPort(%q) = %v; want malformed", tt.in, got)
			}
			continue
		}
		if !ok || got != netip.MustParseAddrPort(tt.want) {
			t.Errorf("procNetParseAddrPort(%q) = %v, %v; want %s", tt.in, got, ok, tt.want)
		}
	}
}

// procNetUseFiles points PeerUID at files with the given contents ("" : the file is missing),
// and refuses it netlink so that it reads them.
func procNetUseFiles(t *testing.T, contents ...string) {
	t.Helper()
	refuseNetlink(t)
	dir := t.TempDir()
	var names []string
	for i, c := range contents {
		name := filepath.Join(dir, "tcp"+string(rune('a'+i)))
		if c != "" {
			if err := os.WriteFile(name, []byte(c), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		names = append(names, name)
	}
	old := procNetFiles
	procNetFiles = names
	t.Cleanup(func() { procNetFiles = old })
}

var errProcNetAny = errors.New("any error")

func TestPeerUIDProcNetFiles(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("PeerUID reads /proc only on Linux")
	}
	procNetSkipBigEndian(t)
	tests := []struct {
		name          string
		files         []string
		local, remote netip.AddrPort
		wantUID       uint32
		wantErr       error // nil: want wantUID; errProcNetAny: any error
	}{
		{name: "v4 in tcp", files: []string{procNetSampleV4, procNetHeader6}, local: procNetServer4, remote: procNetClient4, wantUID: 997},
		{name: "v6 in tcp6", files: []string{procNetHeader4, procNetSampleV6}, local: procNetServer6, remote: procNetClient6, wantUID: 997},
		{name: "mapped server end, peer in tcp", files: []string{procNetSampleMappedClient4, procNetSampleMappedServer6}, local: procNetMappedS, remote: procNetMappedC, wantUID: 997},
		{name: "tcp6 missing (IPv6 disabled)", files: []string{procNetSampleV4, ""}, local: procNetServer4, remote: procNetClient4, wantUID: 997},
		{name: "same uid in both tables", files: []string{procNetSampleV4, procNetSampleMappedClient6}, local: procNetServer4, remote: procNetClient4, wantUID: 997},
		{name: "different uids across tables", files: []string{procNetSampleV4, strings.Replace(procNetSampleMappedClient6, " 997 ", " 0 ", 1)}, local: procNetServer4, remote: procNetClient4, wantErr: ErrPeerUIDAmbiguous},
		{name: "not found", files: []string{procNetSampleV4, procNetSampleV6}, local: procNetServer4, remote: netip.MustParseAddrPort("127.0.0.1:1"), wantErr: ErrPeerUIDNotFound},
		{name: "all tables missing", files: []string{"", ""}, local: procNetServer4, remote: procNetClient4, wantErr: errProcNetAny},
		{name: "local not loopback", files: []string{strings.ReplaceAll(procNetSampleV4, "0100007F", "0101A8C0"), ""}, local: netip.MustParseAddrPort("192.168.1.1:7420"), remote: netip.MustParseAddrPort("192.168.1.1:53924"), wantErr: errProcNetAny},
		{name: "zero value", files: []string{procNetSampleV4, ""}, wantErr: errProcNetAny},
		{name: "port 0", files: []string{procNetSampleV4, ""}, local: procNetServer4, remote: netip.MustParseAddrPort("127.0.0.1:0"), wantErr: errProcNetAny},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			procNetUseFiles(t, tt.files...)
			uid, err := PeerUID(tt.local, tt.remote)
			switch {
			case tt.wantErr == nil:
				if err != nil || uid != tt.wantUID {
					t.Fatalf("PeerUID = %d, %v; want %d", uid, err, tt.wantUID)
				}
			case tt.wantErr == errProcNetAny:
				if err == nil || uid != 0 {
					t.Fatalf("PeerUID = %d, %v; want an error", uid, err)
				}
			default:
				if !errors.Is(err, tt.wantErr) || uid != 0 {
					t.Fatalf("PeerUID = %d, %v; want %v", uid, err, tt.wantErr)
				}
			}
		})
	}

	t.Run("unreadable table", func(t *testing.T) {
		refuseNetlink(t)
		old := procNetFiles
		procNetFiles = []string{t.TempDir()} // a directory: opens, does not read
		t.Cleanup(func() { procNetFiles = old })
		if uid, err := PeerUID(procNetServer4, procNetClient4); err == nil {
			t.Fatalf("PeerUID = %d, nil; want an error", uid)
		}
	})
}

// procNetAcceptPair listens on listenNet/listenAddr, dials the port on dialHost with dialNet,
// and returns the server's end of the connection.
func procNetAcceptPair(t *testing.T, listenNet, listenAddr, dialNet, dialHost string) net.Conn {
	t.Helper()
	ln, err := net.Listen(listenNet, listenAddr)
	if err != nil {
		t.Skipf("cannot listen on %s %s: %v", listenNet, listenAddr, err)
	}
	t.Cleanup(func() { ln.Close() })
	dialAddr := net.JoinHostPort(dialHost, strconv.Itoa(ln.Addr().(*net.TCPAddr).Port))
	client, err := net.Dial(dialNet, dialAddr)
	if err != nil {
		t.Skipf("cannot dial %s %s: %v", dialNet, dialAddr, err)
	}
	t.Cleanup(func() { client.Close() })
	server, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { server.Close() })
	return server
}

// procNetAddrs returns a connection's local and remote addresses as the supervisor sees them.
func procNetAddrs(c net.Conn) (local, remote netip.AddrPort) {
	return c.LocalAddr().(*net.TCPAddr).AddrPort(), c.RemoteAddr().(*net.TCPAddr).AddrPort()
}

func TestPeerUIDLoopback(t *testing.T) {
	tests := []struct {
		name                           string
		listenNet, listenAddr, dialNet string
		dialHost                       string
	}{
		{"127.0.0.1", "tcp4", "127.0.0.1:0", "tcp4", "127.0.0.1"},
		{"::1", "tcp6", "[::1]:0", "tcp6", "::1"},
		{"dual-stack listener, v4 client (mapped)", "tcp", "[::]:0", "tcp4", "127.0.0.1"},
		{"v4 listener, dual-stack client", "tcp4", "127.0.0.1:0", "tcp", "::ffff:127.0.0.1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			server := procNetAcceptPair(t, tt.listenNet, tt.listenAddr, tt.dialNet, tt.dialHost)
			local, remote := procNetAddrs(server)
			t.Logf("server sees %v <- %v", local, remote)
			uid, err := PeerUID(local, remote)
			if runtime.GOOS != "linux" {
				if !errors.Is(err, ErrPeerUIDUnsupported) {
					t.Fatalf("PeerUID = %d, %v; want ErrPeerUIDUnsupported", uid, err)
				}
				return
			}
			if err != nil || uid != uint32(os.Getuid()) {
				t.Fatalf("PeerUID(%v, %v) = %d, %v; want %d", local, remote, uid, err, os.Getuid())
			}
			// A port nobody uses is no peer (an ephemeral port ^ 1 is never 0).
			other := netip.AddrPortFrom(remote.Addr(), remote.Port()^1)
			if uid, err := PeerUID(local, other); !errors.Is(err, ErrPeerUIDNotFound) {
				t.Fatalf("PeerUID(%v, %v) = %d, %v; want ErrPeerUIDNotFound", local, other, uid, err)
			}
		})
	}
}

func TestUnixPeerUID(t *testing.T) {
	dir, err := os.MkdirTemp("", "peeruid")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: filepath.Join(dir, "s"), Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	client, err := net.DialUnix("unix", nil, ln.Addr().(*net.UnixAddr))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close() })
	server, err := ln.AcceptUnix()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { server.Close() })
	for name, c := range map[string]*net.UnixConn{"server end": server, "client end": client} {
		uid, err := UnixPeerUID(c)
		if runtime.GOOS != "linux" && runtime.GOOS != "darwin" { // SO_PEERCRED, LOCAL_PEERCRED
			if !errors.Is(err, ErrPeerUIDUnsupported) {
				t.Fatalf("%s: UnixPeerUID = %d, %v; want ErrPeerUIDUnsupported", name, uid, err)
			}
			continue
		}
		if err != nil || uid != uint32(os.Getuid()) {
			t.Fatalf("%s: UnixPeerUID = %d, %v; want %d", name, uid, err, os.Getuid())
		}
	}
	if uid, err := UnixPeerUID(nil); err == nil {
		t.Fatalf("UnixPeerUID(nil) = %d, nil; want an error", uid)
	}
}

// TestPeerUIDOtherUser runs the client as another user (needs root): the answer must be the
// client's uid, not the supervisor's, over TCP and over a unix socket.
func TestPeerUIDOtherUser(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("PeerUID is implemented on Linux only")
	}
	if os.Getuid() != 0 {
		t.Skip("needs root to run a client as another user")
	}
	// The unix socket is in a folder that uid otheruser.UID may enter.
	dir, err := os.MkdirTemp("", "peeruid")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}

	tcpLn, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer tcpLn.Close()
	sock := filepath.Join(dir, "s")
	unixLn, err := net.ListenUnix("unix", &net.UnixAddr{Name: sock, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	defer unixLn.Close()
	if err := os.Chmod(sock, 0o777); err != nil {
		t.Fatal(err)
	}

	for _, tt := range []struct{ network, addr string }{{"tcp", tcpLn.Addr().String()}, {"unix", sock}} {
		t.Run(tt.network, func(t *testing.T) {
			h := otheruser.Start(t, "^TestPeerUIDHelperProcess$", "FLEET_PEERUID_HELPER", tt.network+" "+tt.addr, nil)
			defer func() {
				if err := h.Wait(t); err != nil { // closes its stdin: the helper exits
					t.Errorf("helper: %v", err)
				}
			}()

			var uid uint32
			if tt.network == "tcp" {
				tcpLn.(*net.TCPListener).SetDeadline(time.Now().Add(30 * time.Second))
				c, err := tcpLn.Accept()
				if err != nil {
					t.Fatal(err)
				}
				defer c.Close()
				local, remote := procNetAddrs(c)
				uid, err = PeerUID(local, remote)
				if err != nil {
					t.Fatal(err)
				}
			} else {
				unixLn.SetDeadline(time.Now().Add(30 * time.Second))
				c, err := unixLn.AcceptUnix()
				if err != nil {
					t.Fatal(err)
				}
				defer c.Close()
				uid, err = UnixPeerUID(c)
				if err != nil {
					t.Fatal(err)
				}
			}
			if uid != otheruser.UID {
				t.Fatalf("peer uid = %d; want the helper's %d", uid, otheruser.UID)
			}
		})
	}
}

// TestPeerUIDHelperProcess is the client of TestPeerUIDOtherUser; otherwise it does nothing.
// It connects, then holds the connection until its stdin closes.
func TestPeerUIDHelperProcess(t *testing.T) {
	network, addr, ok := strings.Cut(os.Getenv("FLEET_PEERUID_HELPER"), " ")
	if !ok {
		return
	}
	c, err := net.Dial(network, addr)
	if err != nil {
		os.Stderr.WriteString("helper: " + err.Error() + "\n")
		os.Exit(1)
	}
	io.Copy(io.Discard, os.Stdin)
	c.Close()
	os.Exit(0)
}

// TestAddrPortAsParsedString: AddrPort is what ParseAddrPort makes of the address's string, for
// every form a TCP address takes (IPv4 as 4 or 16 bytes, IPv6, a zone), and not ok for others.
func TestAddrPortAsParsedString(t *testing.T) {
	for _, a := range []net.Addr{
		&net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 7070},
		&net.TCPAddr{IP: net.IP{127, 0, 0, 1}, Port: 1},
		&net.TCPAddr{IP: net.ParseIP("::1"), Port: 65535},
		&net.TCPAddr{IP: net.ParseIP("::ffff:100.64.0.7"), Port: 443},
		&net.TCPAddr{IP: net.ParseIP("fe80::1"), Port: 80, Zone: "lo"},
	} {
		want, err := netip.ParseAddrPort(a.String())
		got, ok := AddrPort(a)
		if err != nil || !ok || got != want {
			t.Errorf("AddrPort(%v) = %v, %v; ParseAddrPort: %v, %v", a, got, ok, want, err)
		}
	}
	for _, a := range []net.Addr{&net.TCPAddr{Port: 80}, &net.UnixAddr{Name: "/x", Net: "unix"}, nil} {
		if got, ok := AddrPort(a); ok {
			t.Errorf("AddrPort(%v) = %v, ok", a, got)
		}
	}
}
