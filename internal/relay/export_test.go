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
