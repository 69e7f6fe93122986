package pairing

import (
	"io/fs"
	"syscall"
)

func fillIno(s *stamp, st fs.FileInfo) {
	if sys, ok := st.Sys().(*syscall.Stat_t); ok {
		s.ino = sys.Ino
	}
}
