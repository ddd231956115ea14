//go:build race

package relay_test

// raceEnabled lets heavy tests shrink under -race, which slows them ~10×.
const raceEnabled = true
