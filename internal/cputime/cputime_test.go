// This file tests that Process counts the CPU time this process spends,
// and no more than the wall time allows.

package cputime

import (
	"testing"
	"time"
)

// TestProcessCountsWork: spinning on this goroutine makes Process count
// at least 30 ms of CPU within 10 s of wall time (a loaded host only makes
// it take longer), and never more than the wall time on every core.
func TestProcessCountsWork(t *testing.T) {
	c0, t0 := Process(), time.Now()
	x := 1
	var used time.Duration
	for used < 30*time.Millisecond && time.Since(t0) < 10*time.Second {
		for range 100_000 {
			x = x*31 + 7
		}
		used = Process() - c0
	}
	wall := time.Since(t0)
	if used < 30*time.Millisecond || used > wall*time.Duration(8)+10*time.Millisecond {
		t.Fatalf("%s of CPU over %s spinning (x=%d)", used, wall, x)
	}
}
