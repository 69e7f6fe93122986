package audit

import (
	"encoding/json"
	"net/netip"
	"strings"
	"testing"
	"time"
)

func TestLineRoundTrip_G3(t *testing.T) {
	e := &Entry{
		Time: time.Date(2026, 12, 1, 22, 1, 2, 345678901, time.FixedZone("x", 3600)),
		Door: DoorReach, Login: "device:pixel#a1b2c3", Console: "alpha", Method: "GET",
		Path: "/app", Status: 200, Bytes: 12, Duration: 1500 * time.Millisecond,
		Peer: netip.MustParseAddr("192.168.1.20"), Identified: true,
	}
	b, err := AppendLine(nil, e)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"time":"2026-12-01T21:01:02.345Z","door":"reach","login":"device:pixel#a1b2c3","console":"alpha","method":"GET","path":"/app","status":200,"bytes":12,"duration_ms":1500,"peer":"192.168.1.20"}` + "\n"
	if string(b) != want {
		t.Fatalf("line\n got %s\nwant %s", b, want)
	}
	l, at, err := ParseLine([]byte(strings.TrimSpace(string(b))))
	if err != nil {
		t.Fatal(err)
	}
	if l != LineOf(e) || !at.Equal(e.Time.Truncate(time.Millisecond)) {
		t.Fatalf("parsed %+v at %v", l, at)
	}
}

func TestParseLineRefusesWhatIsNotALine_G3(t *testing.T) {
	for _, s := range []string{
		``, `{`, `[]`, `{"door":"loopback"}`,
		`{"time":"2026-12-01T21:01:02.345Z","door":"sideways"}`,
		`{"time":"2026-12-01T21:01:02.345Z","door":"loopback","peer":"not-an-ip"}`,
	} {
		if _, _, err := ParseLine([]byte(s)); err == nil {
			t.Errorf("ParseLine(%q): no error", s)
		}
	}
}

func TestAuditedIsForwardedOrIdentified_G3(t *testing.T) {
	for _, c := range []struct {
		e    Entry
		want bool
	}{
		{Entry{}, true},
		{Entry{Reason: "not-granted", Identified: true}, true},
		{Entry{Reason: "hooks"}, false},
		{Entry{Reason: "unverified"}, false},
	} {
		if got := c.e.Audited(); got != c.want {
			t.Errorf("%+v Audited = %v", c.e, got)
		}
	}
}

func TestRecordersFanOut(t *testing.T) {
	var a, b count
	Recorders{&a, Discard, &b}.Record(&Entry{})
	Recorders(nil).Record(&Entry{})
	if a != 1 || b != 1 {
		t.Fatalf("a=%d b=%d", a, b)
	}
}

type count int

func (c *count) Record(*Entry) { *c++ }

// TestAppendLineIsJSONMarshal_G3: AppendLine writes what encoding/json writes of LineOf, for
// every kind of byte a path or a login may hold, and allocates nothing.
func TestAppendLineIsJSONMarshal_G3(t *testing.T) {
	var all strings.Builder
	for c := 0; c < 256; c++ {
		all.WriteByte(byte(c))
	}
	for _, s := range []string{"", "/plain", all.String(), "<a>&\"\\\u2028\u2029é☃\xff\xfe", "tab\there", "\x7f", "jürgen@example.com"} {
		e := &Entry{Time: time.Date(2026, 12, 1, 1, 2, 3, 4e6, time.UTC), Door: DoorLoopback, Login: s, Console: s,
			Method: s, Path: s, Status: 200, Bytes: -1, Duration: 2 * time.Second, Reason: s}
		for _, peer := range []netip.Addr{{}, netip.MustParseAddr("fd7a:115c:a1e0::b0b")} {
			e.Peer = peer
			got, _ := AppendLine(nil, e)
			want, err := json.Marshal(LineOf(e))
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != string(want)+"\n" {
				t.Errorf("%q\n got %s\nwant %s", s, got, want)
			}
		}
	}
	e := &Entry{Time: time.Now(), Door: DoorReach, Login: "device:pixel#a1b2c3", Path: "/x", Peer: netip.MustParseAddr("192.168.1.2")}
	buf := make([]byte, 0, 512)
	if n := testing.AllocsPerRun(100, func() { buf, _ = AppendLine(buf[:0], e) }); n != 0 {
		t.Errorf("AppendLine allocates %v times", n)
	}
}
