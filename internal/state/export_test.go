package state

// SetTestHook sets the hook the kill -9 tests stop the process at (see hook); nil clears it.
func SetTestHook(f func(moment, path string)) { testHook = f }
