//go:build unix

package peercred

import (
	"errors"
	"net/netip"
	"strings"
	"testing"
)

// procNetListenLine4 is a LISTEN line of /proc/net/tcp for addr (hex, as printed) with uid and inode.
func procNetListenLine4(addr, uid, inode string) string {
	return "   5: " + addr + " 00000000:0000 0A 00000000:00000000 00:00000000 00000000 " + uid + " 0 " + inode + " 1 0000000000000000 100 0 0 10 0\n"
}

func procNetListenLine6(addr, uid, inode string) string {
	return "   5: " + addr + " 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000 " + uid + " 0 " + inode + " 1 0000000000000000 100 0 0 10 0\n"
}

// DialOwn's /proc fallback finds the listener that takes connections to an address: bound to it
// or to a wildcard; owned (inode not 0); two owners are no answer.
func TestParseProcNetListen(t *testing.T) {
	procNetSkipBigEndian(t)
	const any6 = "00000000000000000000000000000000:1CFC"
	tests := []struct {
		name          string
		text          string
		addr          netip.AddrPort
		wantUID       uint32
		wantFound     bool
		wantAmbiguous bool
	}{
		{name: "127.0.0.1 listener", text: procNetSampleV4, addr: procNetServer4, wantUID: 1001, wantFound: true},
		{name: "mapped address asked", text: procNetSampleV4, addr: procNetMappedS, wantUID: 1001, wantFound: true},
		{name: "other port", text: procNetSampleV4, addr: netip.MustParseAddrPort("127.0.0.1:7421")},
		{name: "127.0.0.1 listener does not take 127.0.0.2", text: procNetSampleV4, addr: netip.MustParseAddrPort("127.0.0.2:7420")},
		{name: "0.0.0.0 takes 127.0.0.1", text: procNetHeader4 + procNetListenLine4("00000000:1CFC", "42", "9"), addr: procNetServer4, wantUID: 42, wantFound: true},
		{name: "0.0.0.0 does not take ::1", text: procNetHeader4 + procNetListenLine4("00000000:1CFC", "42", "9"), addr: procNetServer6},
		{name: ":: takes ::1", text: procNetHeader6 + procNetListenLine6(any6, "42", "9"), addr: procNetServer6, wantUID: 42, wantFound: true},
		{name: ":: may take 127.0.0.1 (dual-stack)", text: procNetHeader6 + procNetListenLine6(any6, "42", "9"), addr: procNetServer4, wantUID: 42, wantFound: true},
		{name: "::1 listener", text: procNetSampleV6, addr: procNetServer6, wantUID: 1001, wantFound: true},
		{name: "a connection is no listener", text: procNetHeader4 + procNetPeerLine4("01", "997", "5"), addr: netip.MustParseAddrPort("127.0.0.1:53924")},
		{name: "inode 0 is no owner", text: procNetHeader4 + procNetListenLine4("0100007F:1CFC", "0", "0"), addr: procNetServer4},
		{name: "invalid uid skipped", text: procNetHeader4 + procNetListenLine4("0100007F:1CFC", "4294967295", "9"), addr: procNetServer4},
		{name: "same uid on 127.0.0.1 and 0.0.0.0", text: procNetSampleV4 + procNetListenLine4("00000000:1CFC", "1001", "9"), addr: procNetServer4, wantUID: 1001, wantFound: true},
		{name: "ambiguous: another uid on the wildcard", text: procNetSampleV4 + procNetListenLine4("00000000:1CFC", "42", "9"), addr: procNetServer4, wantAmbiguous: true},
		{name: "lower-case", text: strings.ToLower(procNetHeader4 + procNetListenLine4("0100007F:1CFC", "42", "9")), addr: procNetServer4, wantUID: 42, wantFound: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			uid, found, err := parseProcNetListen(strings.NewReader(tt.text), tt.addr)
			if tt.wantAmbiguous {
				if !errors.Is(err, ErrPeerUIDAmbiguous) || found {
					t.Fatalf("parseProcNetListen = %d, %v, %v; want ErrPeerUIDAmbiguous", uid, found, err)
				}
				return
			}
			if err != nil || found != tt.wantFound || uid != tt.wantUID {
				t.Fatalf("parseProcNetListen = %d, %v, %v; want %d, %v, nil", uid, found, err, tt.wantUID, tt.wantFound)
			}
		})
	}
}
