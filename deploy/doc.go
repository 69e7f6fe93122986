// Package deploy holds what an operator needs to run fleet as a service and publish it with
// Tailscale Serve (SPEC S2, S5e): a systemd user unit (systemd/fleet.service) and a macOS
// LaunchAgent (launchd/dev.fleet.supervisor.plist), both serving the unix-socket door in a folder
// only the user can reach, and the exact `tailscale serve` commands (tailscale-serve.md). See
// README.md in this folder.
//
// The package has no code; its test checks the files: the unit with `systemd-analyze verify --user`
// where that works, the plist with encoding/xml, that neither ever widens the listener (S1), and
// that both lead with the unix-socket door, never below /tmp (S5e).
package deploy
