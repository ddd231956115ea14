//go:build unix

// Package cputime reads the CPU time the process has used, for the
// benchmarks that report CPU per span or per datagram.
package cputime

import (
	"syscall"
	"time"
)

// Process returns the user+system CPU time of the whole process so far:
// every goroutine and the runtime.
func Process() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		panic("BUG: cputime: getrusage: " + err.Error())
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
