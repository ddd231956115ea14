// Package cputime reads the CPU time the process has used, for the
// benchmarks that report CPU per span or per datagram.
package cputime

import (
	"syscall"
	"time"
)

// Process returns the user+kernel CPU time of the whole process so far:
// every goroutine and the runtime.
func Process() time.Duration {
	h, err := syscall.GetCurrentProcess()
	if err != nil {
		panic("BUG: cputime: GetCurrentProcess: " + err.Error())
	}
	var creation, exit, kernel, user syscall.Filetime
	if err := syscall.GetProcessTimes(h, &creation, &exit, &kernel, &user); err != nil {
		panic("BUG: cputime: GetProcessTimes: " + err.Error())
	}
	return time.Duration(ticks(kernel)+ticks(user)) * 100 // 100 ns ticks
}

// ticks is a FILETIME read as a duration (not as a date, which Nanoseconds
// would take it for).
func ticks(f syscall.Filetime) int64 { return int64(f.HighDateTime)<<32 | int64(f.LowDateTime) }
