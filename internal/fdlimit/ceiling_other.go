//go:build unix && !darwin

package fdlimit

// ceiling is the highest soft limit the system accepts under the hard limit max: the hard limit
// itself (Linux caps the hard limit at fs.nr_open already).
func ceiling(max uint64) uint64 { return max }
