package peercred

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
	"testing"
	"testing/iotest"
)

// FuzzParseProcNetTCP checks that parseProcNetTCP never panics, answers the same however the
// text is chunked, and never makes up a uid: a found uid is the uid column of a line whose
// local_address and rem_address are remote and local, written out independently here; an
// ambiguity needs two such lines with different uids.
func FuzzParseProcNetTCP(f *testing.F) {
	f.Add("  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n"+
		"   1: 0100007F:D2A4 0100007F:1CFC 01 00000000:00000000 00:00000000 00000000   997        0 20871 1 0000000000000000 20 4 30 10 -1\n",
		"127.0.0.1:7420", "127.0.0.1:53924")
	f.Fuzz(func(t *testing.T, text, localStr, remoteStr string) {
		local, _ := netip.ParseAddrPort(localStr)
		remote, _ := netip.ParseAddrPort(remoteStr)

		uid, found, err := parseProcNetTCP(strings.NewReader(text), local, remote)
		uid2, found2, err2 := parseProcNetTCP(iotest.OneByteReader(strings.NewReader(text)), local, remote)
		if uid != uid2 || found != found2 || !errors.Is(err2, err) {
			t.Fatalf("chunking changed the answer: %d, %v, %v vs %d, %v, %v", uid, found, err, uid2, found2, err2)
		}
		if err != nil && !errors.Is(err, ErrPeerUIDAmbiguous) {
			t.Fatalf("unexpected error from a string: %v", err)
		}
		if err != nil && (found || uid != 0) {
			t.Fatalf("error with an answer: %d, %v, %v", uid, found, err)
		}
		if !found && uid != 0 {
			t.Fatalf("uid %d without found", uid)
		}

		uids := procNetOracleUIDs(text, local, remote)
		if found {
			if uid == procNetInvalidUID || !uids[uid] {
				t.Fatalf("uid %d is not the uid of any line %v <- %v (candidates %v)", uid, remote, local, uids)
			}
		}
		if errors.Is(err, ErrPeerUIDAmbiguous) && len(uids) < 2 {
			t.Fatalf("ambiguous with candidate uids %v", uids)
		}

		// The listener search (DialOwn's /proc fallback) obeys the same rules.
		luid, lfound, lerr := parseProcNetListen(strings.NewReader(text), local)
		luid2, lfound2, lerr2 := parseProcNetListen(iotest.OneByteReader(strings.NewReader(text)), local)
		if luid != luid2 || lfound != lfound2 || !errors.Is(lerr2, lerr) {
			t.Fatalf("listener: chunking changed the answer: %d, %v, %v vs %d, %v, %v", luid, lfound, lerr, luid2, lfound2, lerr2)
		}
		if lerr != nil && !errors.Is(lerr, ErrPeerUIDAmbiguous) {
			t.Fatalf("listener: unexpected error from a string: %v", lerr)
		}
		if (lerr != nil || !lfound) && luid != 0 || lfound && luid == procNetInvalidUID {
			t.Fatalf("listener: %d, %v, %v", luid, lfound, lerr)
		}
	})
}

// procNetOracleUIDs returns the uid columns of the lines that name remote as local_address and
// local as rem_address, by formatting the addresses the way the kernel does (every form an
// address can take: v4, and v4 as mapped v6) and comparing text.
func procNetOracleUIDs(text string, local, remote netip.AddrPort) map[uint32]bool {
	uids := map[uint32]bool{}
	wantLocal, wantRemote := procNetOracleHex(remote), procNetOracleHex(local)
	for _, line := range strings.Split(text, "\n") {
		f := strings.Fields(line)
		if len(f) < 10 {
			continue
		}
		if !procNetOracleIn(f[1], wantLocal) || !procNetOracleIn(f[2], wantRemote) {
			continue
		}
		if u, err := strconv.ParseUint(f[7], 10, 32); err == nil {
			uids[uint32(u)] = true
		}
	}
	return uids
}

func procNetOracleIn(s string, forms []string) bool {
	for _, w := range forms {
		if strings.EqualFold(s, w) {
			return true
		}
	}
	return false
}

// procNetOracleHex writes ap as /proc/net/tcp{,6} would, in every form it may appear in.
func procNetOracleHex(ap netip.AddrPort) []string {
	if !ap.IsValid() {
		return nil
	}
	a := ap.Addr().Unmap()
	word := func(b []byte) string { return fmt.Sprintf("%08X", binary.NativeEndian.Uint32(b)) }
	v6 := func(b [16]byte) string {
		return word(b[0:4]) + word(b[4:8]) + word(b[8:12]) + word(b[12:16]) + fmt.Sprintf(":%04X", ap.Port())
	}
	if a.Is4() {
		b4 := a.As4()
		return []string{word(b4[:]) + fmt.Sprintf(":%04X", ap.Port()), v6(netip.AddrFrom16(a.As16()).As16())}
	}
	return []string{v6(a.As16())}
}
