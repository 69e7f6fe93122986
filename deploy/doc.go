// Package deploy holds what an operator needs to run fleet as a service and publish it with
// Tailscale Serve (SPEC S2): a systemd user unit (systemd/fleet.service), a macOS LaunchAgent
// (launchd/dev.fleet.supervisor.plist) and the exact `tailscale serve` commands
// (tailscale-serve.md). See README.md in this folder.
//
// The package has no code; its test checks the files: the unit with `systemd-analyze verify --user`
// where that works, the plist with encoding/xml, and that neither ever widens the listener (S1).
package deploy
