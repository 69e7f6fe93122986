//go:build !unix

package fdlimit

import "errors"

var errUnsupported = errors.New("fdlimit: no RLIMIT_NOFILE on this system")

// Raise does nothing where there is no RLIMIT_NOFILE.
func Raise() (soft, hard uint64, err error) { return 0, 0, errUnsupported }

// Soft is not known where there is no RLIMIT_NOFILE.
func Soft() (soft, hard uint64, err error) { return 0, 0, errUnsupported }
