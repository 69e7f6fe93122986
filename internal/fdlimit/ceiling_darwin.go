package fdlimit

import "syscall"

// ceiling is the highest soft limit the system accepts under the hard limit max: macOS refuses a
// soft limit above kern.maxfilesperproc (and an unlimited one), whatever the hard limit says.
func ceiling(max uint64) uint64 {
	if n, err := syscall.SysctlUint32("kern.maxfilesperproc"); err == nil && n > 0 && uint64(n) < max {
		return uint64(n)
	}
	return max
}
