//go:build !unix && !windows

// Package cputime reads the CPU time the process has used, for the
// benchmarks that report CPU per span or per datagram.
package cputime

import (
	"runtime"
	"time"
)

// Process panics: this platform has no process CPU clock the benchmarks
// can read, and a figure without one would be made up.
func Process() time.Duration {
	panic("cputime: no process CPU clock on " + runtime.GOOS)
}
