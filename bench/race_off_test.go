//go:build !race

// This file sets raceEnabled for builds without the race detector.

package bench

// raceEnabled: see race_on_test.go.
const raceEnabled = false
