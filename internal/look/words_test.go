package look_test

import (
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/phase-console/fleet/internal/look"
	"github.com/phase-console/fleet/metrics"
)

// TestEveryReasonWordHasWords_U5: every reason word fleet refuses with (metrics.ReasonWords, the
// bounded list the metrics count) has a refusal page of its own words — what happened and what
// to do next — not the fallback of a word look does not know.
func TestEveryReasonWordHasWords_U5(t *testing.T) {
	for _, reason := range metrics.ReasonWords {
		r := httptest.NewRequest("GET", "/", nil)
		r.Header.Set("Accept", "text/html")
		w := httptest.NewRecorder()
		look.WriteRefusal(w, r, 403, reason, "d")
		if strings.Contains(w.Body.String(), `<p class="lead">Forbidden</p>`) {
			t.Errorf("U5 %s has no words of its own on its refusal page", reason)
		}
	}
}
