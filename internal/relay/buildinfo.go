// This file says which build of the relay is running, for its start log
// line and its statsrelay_build_info metric: an operator comparing relays
// across hosts reads the version without shell access to each.

package relay

import (
	"runtime/debug"
	"sync"
)

// Build is the running binary's module version ("(devel)" for a build
// from a checkout, "" without build information, as in some test
// binaries) and the VCS revision it was built from ("" when the build
// recorded none), with "-dirty" when the tree had uncommitted changes.
var Build = sync.OnceValues(func() (version, revision string) {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "", ""
	}
	modified := false
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			revision = s.Value
		case "vcs.modified":
			modified = s.Value == "true"
		}
	}
	if revision != "" && modified {
		revision += "-dirty"
	}
	return bi.Main.Version, revision
})
