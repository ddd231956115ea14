package cputime

import (
	"testing"
	"time"
)

// TestProcessCountsWork: spinning for 50 ms of wall time on this goroutine
// adds at least 20 ms of CPU (a shared host may steal some), and no more
// than the wall time on every core.
func TestProcessCountsWork(t *testing.T) {
	c0, t0 := Process(), time.Now()
	x := 1
	for time.Since(t0) < 50*time.Millisecond {
		x = x*31 + 7
	}
	used, wall := Process()-c0, time.Since(t0)
	if used < 20*time.Millisecond || used > wall*time.Duration(8)+10*time.Millisecond {
		t.Fatalf("%s of CPU over %s spinning (x=%d)", used, wall, x)
	}
}
