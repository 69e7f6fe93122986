package state

import (
	"io/fs"
	"syscall"
)

func fillSys(s *fileStamp, st fs.FileInfo) {
	if sys, ok := st.Sys().(*syscall.Stat_t); ok {
		s.ino = sys.Ino
		s.owner = sys.Uid
	}
}
