//go:build !race

// This file sets raceOn for builds without the race detector.

package otelstats

// raceOn: the race detector is on (sync.Pool then drops items at random).
const raceOn = false
