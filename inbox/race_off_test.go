//go:build !race

// This file sets raceEnabled for builds without the race detector.

package inbox

// raceEnabled lets stress tests shrink their item counts under -race.
const raceEnabled = false
