// Package fulldisk gives tests a disk that can be filled: a small tmpfs mounted on a temporary
// folder, and a filler that takes its space, so that a test can show what a write does when the
// disk fills up under it (SPEC F2: the old file intact, an error returned, never a half-written or
// empty file). It is for tests only; no product code imports it.
//
// Mounting needs Linux and the right to mount (root, or CAP_SYS_ADMIN); where either is missing
// Mount skips the test and says why.
package fulldisk
