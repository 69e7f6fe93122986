package supervisor

import (
	"github.com/phase-console/fleet/audit"
	"github.com/phase-console/fleet/audit/accesslog"
)

// This file is what both doors tell of each request they answer (SPEC G3, G4): one
// audit.Recorder, built here and nowhere else, that hands every entry to each consumer in turn.

// openAudit opens the access log (<stateHome>/fleet/access.log, package accesslog) and builds the
// doors' recorder. An access log that F1 refuses (too open, someone else's) stops the start, with
// the chmod that fixes it.
func (s *Server) openAudit() error {
	log, err := accesslog.Open(s.fleetDir)
	if err != nil {
		return err
	}
	s.accessLog = log
	s.audit = s.recorders(log)
	return nil
}

// recorders is the one list of what keeps the doors' entries: the index's recent activity, the
// metrics (G4) and the access log (G3); each Record returns at once.
func (s *Server) recorders(accessLog audit.Recorder) audit.Recorders {
	var rs audit.Recorders
	if s.recent != nil {
		rs = append(rs, s.recent)
	}
	if s.metrics.counts != nil {
		rs = append(rs, s.metrics.counts)
	}
	if accessLog != nil {
		rs = append(rs, accessLog)
	}
	return rs
}

// AccessLogDropped is how many access-log lines were lost since the supervisor started (the
// queue was full, or the file could not be written): fleet doctor WARNs when it is not 0.
func (s *Server) AccessLogDropped() uint64 {
	if s.accessLog == nil {
		return 0
	}
	return s.accessLog.Dropped()
}

// closeAudit writes what is queued and closes the access log, once the doors are closed.
func (s *Server) closeAudit() {
	if s.accessLog != nil {
		s.accessLog.Close()
	}
}

// auditRecorder is the doors' Audit: nil when nothing keeps entries, so that a door records at no
// cost.
func (s *Server) auditRecorder() audit.Recorder {
	if len(s.audit) == 0 {
		return nil
	}
	return s.audit
}
