// Package fdlimit raises and reads this process's limit on open file descriptors (RLIMIT_NOFILE).
//
// fleet serve raises its soft limit to the hard one at start (Raise), and the direct-reach door
// holds at most half of the soft limit in connections (Soft), so that whatever the door holds,
// the loopback door and the registry API have descriptors left (SPEC R6c). The hard limit is the
// operator's: the shipped service units set it, and nothing here ever raises it.
//
// It must not lower either limit, and it touches no other resource.
package fdlimit
