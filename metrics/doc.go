// Package metrics keeps the supervisor's Prometheus metrics (SPEC G4): it is an audit.Recorder
// that counts what the doors answered, and the collector that turns those counts and the
// registry's state into the text a scraper reads at GET /fleet/v1/metrics.
//
// The families:
//
//	fleet_requests_total{door,console,code}     requests forwarded to a console, by the console's status
//	fleet_refusals_total{door,reason}           every refusal, identified caller or not, by reason word
//	fleet_request_duration_seconds{door}        how long a forwarded request took (not upgraded streams)
//	fleet_consoles{health}                      registered consoles by health, read at scrape time
//	fleet_devices                               paired devices, read at scrape time
//	fleet_pairing_attempts_total{result}        pairing attempts on the direct-reach door (O7), by result
//	fleet_access_log_dropped_total              access-log lines lost (G3), read at scrape time
//
// and the Go runtime's (go_*) and the process's (process_*) own: goroutines, memory and open file
// descriptors are what a reverse proxy holding thousands of streams runs out of first, and they
// say nothing about callers or consoles.
//
// Every label takes a bounded set of values, whatever callers send: door is loopback, reach or
// other; console is an id registered when the request was counted, or "" (no id can be empty,
// S8, so "" is never mistaken for a console, and a Prometheus selector {console=""} finds it);
// reason is one of the spec's reason words (ReasonWords), or "other"; code is the status as a
// number from 100 to 599, or "other"; result is one of audit.PairingResults, each made at zero
// when the metrics are, and an entry with any other is not counted in that family. A console's series go with it when it is deregistered (at
// the next scrape, or the next console counted for the first time, whichever is first), so the
// series count follows the registry, not every id a machine ever held.
//
// Record is on every request's path: it takes no lock and allocates nothing once a (door,
// console, status) has been seen (BenchmarkRecord); the first request of each takes a lock to
// make its series. It must not decide anything about a request, nor keep an Entry.
//
// The dependency is github.com/prometheus/client_golang, the standard Prometheus client, which
// writes every exposition format a scraper asks for; tailscale's tsweb/varz, already in the
// module graph, cannot export a labelled histogram. The metrics have a registry of their own,
// never the package-global default, so that nothing another package registers is served.
package metrics
