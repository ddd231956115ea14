//go:build race

// This file sets raceEnabled for builds with the race detector.

package relay_test

// raceEnabled lets heavy tests shrink under -race, which slows them ~10×.
const raceEnabled = true
