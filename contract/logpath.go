package contract

import "net/http"

// maxLogPath bounds the path a log line carries.
const maxLogPath = 512

// LogPath is the request's path for a log line (SPEC S11): the raw path only, never the query,
// which may carry something secret, and at most 512 bytes of it (then "…").
func LogPath(r *http.Request) string {
	p := r.RequestURI
	for i := 0; i < len(p); i++ {
		if p[i] == '?' {
			p = p[:i]
			break
		}
	}
	if len(p) > maxLogPath {
		p = p[:maxLogPath] + "…"
	}
	return p
}
