// This file exports to the package's external tests what they need of the
// Server's internals.

package relay

import (
	"sync"
	"time"
)

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

// HoldReaders takes every read batch, so that each reader waits for one
// and the kernel keeps what senders send; the returned func gives them
// back (once, however often called). A reader waiting on its socket holds a batch: wake must send it a
// datagram, which hands that batch on and back (or, if the reader had not
// taken one yet, stays queued).
func (s *Server) HoldReaders(wake func()) (release func()) {
	n := cap(s.free.avail)
	for range n - 1 {
		<-s.free.avail
	}
	wake()
	<-s.free.avail
	return sync.OnceFunc(func() {
		for range n {
			s.free.avail <- struct{}{}
		}
	})
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
