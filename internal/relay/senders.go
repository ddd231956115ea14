package relay

import (
	"math/bits"
	"time"
)

// Bounds of the sender table.
const (
	// SenderIdle is how long a sender is remembered after its last datagram;
	// an SDK sends at least once per interval while it has spans.
	SenderIdle = 5 * time.Minute
	// MaxSenders bounds the sender table: beyond it an arbitrary sender is
	// forgotten (its next datagram starts it afresh, uncounted).
	MaxSenders = 1 << 16
)

// sender is what the relay remembers of one sender (a RuntimeID): the
// highest sequence seen and a window of the seqWindow sequences up to it.
// The decode workers merge a sender's datagrams in whatever order they
// finish decoding them, so a sequence missing from the window is not yet a
// gap: it is one once it has been missing at two harvests in a row (an
// interval apart), or leaves the window, or its sender is forgotten. Bit i
// of each mask is sequence high-i.
type sender struct {
	high, first uint64 // highest sequence seen; the first (nothing below it counts)
	got         uint64 // sequences received
	waited      uint64 // missing at the last harvest
	settled     uint64 // missing, and counted as gaps
	seen        int64  // unix ns of its last datagram
	final       bool   // it said it is stopping: forgotten at the next harvest
}

// seqWindow is how many sequences a sender's window holds: far more than
// the datagrams of one sender in flight between the reader and the merge.
const seqWindow = 64

// open returns the masks' missing sequences not yet counted.
func (sd *sender) open() uint64 { return ^sd.got &^ sd.settled }

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
// at now. A sender seen for the first time has no reference (it may
// predate the relay, or have been forgotten), so nothing below its first
// sequence counts. A sequence seen twice, or far below the window, is a
// restart: the sender counts from 1 again.
func (s *senders) observe(id, seq uint64, final bool, now int64) {
	if s.m == nil {
		s.m = make(map[uint64]*sender)
	}
	sd := s.m[id]
	switch {
	case sd == nil:
		if len(s.m) >= MaxSenders {
			s.sweep(now)
		}
		if len(s.m) >= MaxSenders {
			for k, v := range s.m { // map order: an arbitrary victim, O(1)
				s.forget(k, v)
				s.forgottenSenders++
				break
			}
		}
		sd = &sender{}
		s.m[id] = sd
		sd.reset(seq)
	case seq > sd.high:
		if d := seq - sd.high; d >= seqWindow { // spelled out: high+d may wrap
			s.gaps += uint64(bits.OnesCount64(sd.open())) + (d - seqWindow)
			sd.got, sd.waited, sd.settled = 1, 0, 0
		} else {
			out := ^uint64(0) << (seqWindow - d) // the bits shifted out
			s.gaps += uint64(bits.OnesCount64(sd.open() & out))
			sd.got, sd.waited, sd.settled = sd.got<<d|1, sd.waited<<d, sd.settled<<d
		}
		sd.high = seq
	case sd.high-seq >= seqWindow:
		s.restart(sd, seq)
	case seq < sd.first: // late, and older than anything counted
	case sd.got&(1<<(sd.high-seq)) != 0:
		s.restart(sd, seq)
	default: // late: its place in the window is filled
		sd.got |= 1 << (sd.high - seq)
	}
	sd.seen = now
	sd.final = sd.final || final
}

// reset starts sd's window at seq: the positions below it count as
// received.
func (sd *sender) reset(seq uint64) {
	*sd = sender{high: seq, first: seq, got: ^uint64(0)}
}

// restart counts a restart of sd at seq; what its window missed is lost.
func (s *senders) restart(sd *sender, seq uint64) {
	s.gaps += uint64(bits.OnesCount64(sd.open()))
	s.restarts++
	sd.reset(seq)
}

// forget removes sender k, counting what its window missed.
func (s *senders) forget(k uint64, sd *sender) {
	s.gaps += uint64(bits.OnesCount64(sd.open()))
	delete(s.m, k)
}

// sweep forgets the senders idle for SenderIdle.
func (s *senders) sweep(now int64) {
	for k, sd := range s.m {
		if now-sd.seen >= int64(SenderIdle) {
			s.forget(k, sd)
		}
	}
}

// harvest, once an interval, counts as gaps the sequences missing now that
// were missing at the previous harvest too (a late datagram arrives within
// microseconds, not an interval), forgets the senders that said they stop,
// and sweeps the idle ones.
func (s *senders) harvest(now int64) {
	for k, sd := range s.m {
		open := sd.open()
		late := open & sd.waited
		s.gaps += uint64(bits.OnesCount64(late))
		sd.settled |= late
		sd.waited = open &^ late
		if sd.final {
			s.forget(k, sd)
		}
	}
	s.sweep(now)
}
