//go:build race

package stats

// raceEnabled lets heavy tests shrink under -race, which slows them ~10×.
const raceEnabled = true
