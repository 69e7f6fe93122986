// Package deploy holds what an operator needs to run fleet as a service and publish it with
// Tailscale Serve (SPEC S2, S5e, O3): a systemd user unit (systemd/fleet.service) with its two
// socket units (systemd/fleet.socket, systemd/fleet-unix.socket: systemd holds the loopback
// door's sockets across restarts) and a macOS LaunchAgent (launchd/dev.fleet.supervisor.plist),
// all serving the unix-socket door in a folder only the user can reach, and the exact
// `tailscale serve` commands (tailscale-serve.md). See README.md in this folder.
//
// Its only code is Files, the units as `fleet service install` writes them (SPEC O2). Its tests
// check the files: the units with `systemd-analyze verify --user` where that works, the plist
// with encoding/xml, that none ever widens the listener (S1), and that all lead with the
// unix-socket door, never below /tmp (S5e).
package deploy

import "embed"

// Files holds the units: systemd/fleet.service, systemd/fleet.socket, systemd/fleet-unix.socket
// and launchd/dev.fleet.supervisor.plist.
//
//go:embed systemd/fleet.service systemd/fleet.socket systemd/fleet-unix.socket launchd/dev.fleet.supervisor.plist
var Files embed.FS
