package peercred

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"strconv"
	"syscall"
)

// SocketServerArgs returns the command line of the process that listens on the unix socket at
// path: the pid the kernel names for the other end of a connection to it (SO_PEERCRED: the
// listener's pid when it called listen), then that process's /proc/<pid>/cmdline. fleet reads
// tailscaled's this way, for the flags that no LocalAPI call shows (SPEC S5e). It fails
// closed: a socket it cannot reach, a pid it cannot see (another pid namespace shows as 0), or a
// command line it cannot read (hidepid) is an error, never an empty command line.
func SocketServerArgs(ctx context.Context, path string) ([]string, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "unix", path)
	if err != nil {
		return nil, fmt.Errorf("peercred: the server of %s: %w", path, err)
	}
	defer c.Close()
	rc, err := c.(*net.UnixConn).SyscallConn()
	if err != nil {
		return nil, fmt.Errorf("peercred: the server of %s: %w", path, err)
	}
	var cred *syscall.Ucred
	var credErr error
	if err := rc.Control(func(fd uintptr) {
		cred, credErr = syscall.GetsockoptUcred(int(fd), syscall.SOL_SOCKET, syscall.SO_PEERCRED)
	}); err != nil {
		return nil, fmt.Errorf("peercred: the server of %s: %w", path, err)
	}
	if credErr != nil {
		return nil, fmt.Errorf("peercred: the server of %s: SO_PEERCRED: %w", path, credErr)
	}
	if cred == nil || cred.Pid <= 0 {
		return nil, fmt.Errorf("peercred: the server of %s: no pid visible from here (another pid namespace?)", path)
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(int(cred.Pid)) + "/cmdline")
	if err != nil {
		return nil, fmt.Errorf("peercred: the command line of %s's server (pid %d): %w", path, cred.Pid, err)
	}
	if len(b) == 0 {
		return nil, fmt.Errorf("peercred: the command line of %s's server (pid %d) is empty", path, cred.Pid)
	}
	return splitCmdline(b), nil
}

// splitCmdline splits /proc/<pid>/cmdline: arguments ended by NUL (the last one may lack it).
func splitCmdline(b []byte) []string {
	b = bytes.TrimSuffix(b, []byte{0})
	parts := bytes.Split(b, []byte{0})
	args := make([]string, len(parts))
	for i, p := range parts {
		args[i] = string(p)
	}
	return args
}
