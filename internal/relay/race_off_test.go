//go:build !race

// This file sets raceEnabled for builds without the race detector.

package relay_test

// raceEnabled lets heavy tests shrink under -race, which slows them ~10×.
const raceEnabled = false
