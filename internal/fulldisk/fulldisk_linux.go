package fulldisk

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
)

// Mount mounts a tmpfs of size bytes (rounded up to whole pages by the kernel) on a fresh
// temporary folder and returns that folder, mode 0700, owned by this user. It is unmounted when
// the test ends. The test is skipped when the mount is not permitted here.
func Mount(t testing.TB, size int) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "tmpfs")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	opts := "size=" + strconv.Itoa(size) + ",mode=0700,uid=" + strconv.Itoa(os.Geteuid()) + ",gid=" + strconv.Itoa(os.Getegid())
	if err := syscall.Mount("tmpfs", dir, "tmpfs", syscall.MS_NOSUID|syscall.MS_NODEV, opts); err != nil {
		// EPERM without the right; a sandbox may say EINVAL or ENOSYS. Either way this machine
		// cannot give the test its disk: that is no failure of the code under test.
		t.Skipf("full-disk test skipped: mounting a small tmpfs is not permitted here (%v); run as root, or with CAP_SYS_ADMIN, to run it", err)
	}
	// Registered after TempDir's own cleanup, so it runs first: the folder is unmounted before
	// it is removed. MNT_DETACH so that a file a failing test left open cannot keep it mounted.
	t.Cleanup(func() {
		if err := syscall.Unmount(dir, syscall.MNT_DETACH); err != nil {
			t.Errorf("unmount %s: %v", dir, err)
		}
	})
	return dir
}

// Fill takes the free space of the filesystem that holds dir with a file dir/filler, written until
// the filesystem says it is full (ENOSPC), then gives back leave bytes (rounded up to whole pages)
// so that a write of up to that much still fits and a larger one fails part-way. It returns the
// filler's path; removing it frees the space.
func Fill(t testing.TB, dir string, leave int) string {
	t.Helper()
	path := filepath.Join(dir, "filler")
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	page := os.Getpagesize()
	buf := make([]byte, page)
	size := 0
	for {
		n, err := f.Write(buf)
		size += n
		if errors.Is(err, syscall.ENOSPC) {
			break
		}
		if err != nil {
			t.Fatalf("fill %s: %v", path, err)
		}
		if size > 1<<30 {
			t.Fatalf("fill %s: wrote 1 GiB without filling it; is it the small tmpfs of Mount?", path)
		}
	}
	if leave > 0 {
		keep := size / page * page
		keep -= (leave + page - 1) / page * page
		if keep < 0 {
			t.Fatalf("fill %s: only %d bytes were free, cannot leave %d", path, size, leave)
		}
		if err := f.Truncate(int64(keep)); err != nil {
			t.Fatal(err)
		}
	}
	return path
}
