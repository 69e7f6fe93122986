package pairing

import (
	"io/fs"
	"syscall"
)

// fillSys adds to s what only the system's stat has: the inode, the link count, the change time.
func fillSys(s *stamp, st fs.FileInfo) {
	if sys, ok := st.Sys().(*syscall.Stat_t); ok {
		s.ino, s.nlink, s.ctime = sys.Ino, uint64(sys.Nlink), sys.Ctim.Nano()
	}
}
