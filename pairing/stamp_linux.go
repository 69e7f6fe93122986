package pairing

import "syscall"

// stampOfSys is the stamp of a stat as the system gives it.
func stampOfSys(st *syscall.Stat_t) stamp {
	return stamp{exists: true, mod: st.Mtim.Nano(), size: st.Size, ino: st.Ino, nlink: uint64(st.Nlink),
		ctime: st.Ctim.Nano(), mode: st.Mode}
}
