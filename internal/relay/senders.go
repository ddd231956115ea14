package relay

import "time"

// Bounds of the sender table.
const (
	// SenderIdle is how long a sender is remembered after its last datagram;
	// an SDK sends at least once per interval while it has spans.
	SenderIdle = 5 * time.Minute
	// MaxSenders bounds the sender table: beyond it an arbitrary sender is
	// forgotten (its next datagram starts it afresh, uncounted).
	MaxSenders = 1 << 16
)

// sender is what the relay remembers of one sender (a RuntimeID).
type sender struct {
	last uint64 // last sequence seen
	seen int64  // unix ns of its last datagram
}

// senders tracks sequence numbers per RuntimeID, keyed by its seeded hash:
// a sender table of MaxSenders entries then takes a few MiB whatever the
// RuntimeIDs' lengths (up to a datagram's), and a collision, which a
// sender cannot aim for without the seed, would only blur two senders'
// gap counts. Guarded by Relay.mu.
type senders struct {
	m                map[uint64]*sender
	gaps, restarts   uint64
	droppedPayloads  uint64
	droppedSpans     uint64
	unsequenced      uint64
	forgottenSenders uint64
}

// observe records datagram seq of the sender whose RuntimeID hashes to id
// at now. A sender seen for
// the first time has no reference (it may predate the relay, or have been
// forgotten), so its first sequence counts no gap. A final datagram forgets
// the sender: it is stopping.
func (s *senders) observe(id, seq uint64, final bool, now int64) {
	if s.m == nil {
		s.m = make(map[uint64]*sender)
	}
	sd := s.m[id]
	switch {
	case sd == nil:
		if final {
			return
		}
		if len(s.m) >= MaxSenders {
			s.sweep(now)
		}
		if len(s.m) >= MaxSenders {
			for k := range s.m { // map order: an arbitrary victim, O(1)
				delete(s.m, k)
				s.forgottenSenders++
				break
			}
		}
		sd = &sender{}
		s.m[id] = sd
	case seq > sd.last && seq-sd.last > 1: // spelled out: last+1 may wrap
		s.gaps += seq - sd.last - 1
	case seq <= sd.last:
		s.restarts++
	}
	sd.last, sd.seen = seq, now
	if final {
		delete(s.m, id)
	}
}

// sweep forgets the senders idle for SenderIdle.
func (s *senders) sweep(now int64) {
	for k, sd := range s.m {
		if now-sd.seen >= int64(SenderIdle) {
			delete(s.m, k)
		}
	}
}
