// Package serveshare measures fleet's share of a request's time when it is published as the
// README publishes it, behind Tailscale Serve, on a real tailnet inside one `go test` process (no
// internet): a control server (tailscale.com/tstest/integration/testcontrol), a DERP relay and
// STUN on 127.0.0.1, and two tsnet nodes, set up as e2e/tailnet sets them up.
//
//	node "client" ─HTTP :80───▶ node "sup" (Tailscale Serve) ─▶ 127.0.0.1:<port> fleet ─▶ console
//	              ─HTTP :8080─▶ node "sup" (Tailscale Serve) ─────────────────────────▶ console
//
// The same Serve publishes the real supervisor (supervisor.New + Serve, verifying the client
// through sup's LocalAPI) on port 80, and the console itself on port 8080. BenchmarkServeShare
// sends the client's requests through both, alternating request by request, and reports the mean
// and percentile time of each path and their ratio (fleet + Serve ÷ Serve): the ratio is the
// figure, since every part of both paths (the client, both tsnet stacks, Serve, fleet, the
// console) shares one process and the machine's cores. Through tsnet, Serve reaches fleet on TCP
// (tsnet refuses unix: targets), so this is the TCP door behind Serve; bench/run measures the
// unix-socket door beside it on its own.
//
//	go test -run=NONE -bench=ServeShare -benchtime=2000x ./bench/serveshare
//
// The package holds only a benchmark: `go test ./...` builds it (tsnet and testcontrol take
// minutes to build cold on two cores) and runs nothing. bench/run runs it and writes its figures
// into bench/RESULTS.md. It is a measuring tool; nothing in the product imports it.
package serveshare
