package proxy

import "testing"

// FuzzJudgeSegment_S7: judgeSegment (which builds nothing) refuses exactly what decodeSegment
// refuses, for the same reason.
func FuzzJudgeSegment_S7(f *testing.F) {
	for _, s := range []string{
		"", "a", ".", "..", "...", "%2e", "%2E%2e", ".%2e", "%2e%2e%2e", "a%2Fb", "%", "%4", "%zz", "%C3%A4",
		"%C3", "%C3A", "\xc3\xa4", "\xc3", "hoo%E2%84%AAs", "%EF%BF%BD", "%ED%A0%80", "%C0%AF", "%F4%90%80%80",
		"%00", "%7F", "%25", "x%3By", "\xe2\x84", "%E2%84", "%E2%84%AA%E2",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, seg string) {
		_, want := decodeSegment(seg)
		if got := judgeSegment(seg); got != want {
			t.Fatalf("judgeSegment(%q) = %q, decodeSegment says %q", seg, got, want)
		}
	})
}
