//go:build race

// This file sets raceEnabled for builds with the race detector.

package inbox

// raceEnabled lets stress tests shrink their item counts under -race.
const raceEnabled = true
