package fastloop

import (
	"bufio"
	"bytes"
	"net/http"
	"testing"
)

// TestWriteHeaderLinesAsHeaderWrite: a header line the fast exchange writes is the line net/http's
// Header.Write writes for the same name and value — trimmed, CR and LF made spaces — whatever the
// value (the common one that needs nothing done to it included).
func TestWriteHeaderLinesAsHeaderWrite(t *testing.T) {
	for _, v := range []string{"", "plain", "a b", " lead", "trail ", "\tboth\t", "a\r\nb", "a\nb", "a\rb",
		"\r\nX-Injected: 1", " \r\n ", "ends\r", "\n", "caf\xc3\xa9"} {
		h := http.Header{"X-Value": {v}}
		var want, got bytes.Buffer
		h.Write(&want)
		w := bufio.NewWriter(&got)
		writeHeaderLines(w, h)
		w.Flush()
		if got.String() != want.String() {
			t.Errorf("value %q: wrote %q, Header.Write %q", v, got.String(), want.String())
		}
	}
}
