// This file exports to the package's external tests what they need of the
// Server's internals.

package relay

import "time"

// CheckSocket runs the Unix socket check now, as its ticker would, once
// Run has started it: tests assert what one check does without waiting on
// SocketCheck.
func (s *Server) CheckSocket() {
	for deadline := time.Now().Add(10 * time.Second); !s.checkSocket(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			panic("relay: CheckSocket: the check did not start")
		}
	}
}

// RetiredConns is how many replaced sockets the Server still holds.
func (s *Server) RetiredConns() int { return len(s.retiredConns()) }

// HelpedFamilies lists the metric families withHelp has a text for.
func HelpedFamilies() []string {
	names := make([]string, 0, len(help))
	for name := range help {
		names = append(names, name)
	}
	return names
}
