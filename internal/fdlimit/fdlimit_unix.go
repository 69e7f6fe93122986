//go:build unix

package fdlimit

import "syscall"

// Raise sets the soft limit on open files to the hard one, or as near to it as the system lets a
// process go (on macOS, kern.maxfilesperproc when the hard limit is unlimited), and returns the
// limits in force afterwards. err is the reason the soft limit could not be raised; the limits
// returned are then the unchanged ones.
func Raise() (soft, hard uint64, err error) {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return 0, 0, err
	}
	want := ceiling(lim.Max)
	if lim.Cur >= want {
		return lim.Cur, lim.Max, nil
	}
	raised := lim
	raised.Cur = want
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &raised); err != nil {
		return lim.Cur, lim.Max, err
	}
	return Soft()
}

// Soft is the soft limit on open files now in force, and the hard limit.
func Soft() (soft, hard uint64, err error) {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return 0, 0, err
	}
	return lim.Cur, lim.Max, nil
}
