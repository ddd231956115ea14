//go:build race

// This file sets raceEnabled for builds with the race detector.

package bench

// raceEnabled skips the tests that time the harness: the race detector
// slows the SDK several times over, so the timing is not the measured one.
const raceEnabled = true
