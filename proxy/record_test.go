package proxy

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/phase-console/fleet/audit"
)

// TestUpgradedStreamKeepsNoRequestWriter_P1: what a tunnel keeps to record its stream when it
// closes (G3) holds the entry and nothing of the request's writer, whose net/http buffers would
// otherwise live as long as the stream (P1: an idle stream costs little).
func TestUpgradedStreamKeepsNoRequestWriter_P1(t *testing.T) {
	var got []audit.Entry
	rec := recorderFunc(func(e *audit.Entry) { got = append(got, *e) })
	start := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	a := &recording{
		ResponseWriter: httptest.NewRecorder(),
		entry:          audit.Entry{Time: start, Console: "alpha", Path: "/ws"},
		rec:            rec,
		now:            func() time.Time { return start.Add(time.Minute) },
		status:         http.StatusSwitchingProtocols,
	}
	d := a.detached()
	if d.ResponseWriter != nil {
		t.Fatal("the detached recording holds the request's writer")
	}
	d.record(42)
	if len(got) != 1 || got[0].Status != 101 || got[0].Bytes != 42 || got[0].Duration != time.Minute || got[0].Console != "alpha" {
		t.Fatalf("recorded %+v", got)
	}
}

type recorderFunc func(*audit.Entry)

func (f recorderFunc) Record(e *audit.Entry) { f(e) }
