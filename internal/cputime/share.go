// This file holds ShareWhileSleeping: the process's CPU share while the
// caller sleeps, for the Idle benchmarks.

package cputime

import "time"

// ShareWhileSleeping sleeps n stretches and returns the process's CPU
// (user+sys) over them in percent of one core: what the rest of the
// process costs while the caller is idle (the Idle benchmarks).
func ShareWhileSleeping(n int, stretch time.Duration) float64 {
	cpu0, t0 := Process(), time.Now()
	for range n {
		time.Sleep(stretch)
	}
	return 100 * (Process() - cpu0).Seconds() / time.Since(t0).Seconds()
}
