//go:build !linux

package fulldisk

import "testing"

// Mount skips the test: tmpfs is mounted this way on Linux only.
func Mount(t testing.TB, size int) string {
	t.Helper()
	t.Skip("full-disk test skipped: it mounts a small tmpfs, which needs Linux")
	return ""
}

// Fill is not reached: Mount has skipped the test.
func Fill(t testing.TB, dir string, leave int) string {
	t.Helper()
	t.Skip("full-disk test skipped: needs Linux")
	return ""
}
