//go:build !race

package inbox

// raceEnabled lets stress tests shrink their item counts under -race.
const raceEnabled = false
