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
// highest sequence seen and a window of the sequences up to it. The
// decode workers merge a sender's datagrams in whatever order they finish
// decoding them, so a sequence missing from the window is not yet a gap:
// it is one once it has been missing at two harvests in a row (an interval
// apart), or leaves the window, or its sender is forgotten.
type sender struct {
	high, first uint64 // highest sequence seen; the first (nothing below it counts)
	// masks is three bit sets of the window, words words each: received,
	// missing at the last harvest, missing and counted as gaps. Bit i
	// (word i/64, bit i%64) is sequence high-i.
	masks []uint64
	seen  int64 // unix ns of its last datagram
	final bool  // it said it is stopping: forgotten at the next harvest
}

// DefaultSeqWindow is Config.SeqWindow's default: what the default read
// batches of a Server hold in flight, rounded up.
const DefaultSeqWindow = 256

// senders tracks sequence numbers per RuntimeID, keyed by its seeded hash:
// a sender table of MaxSenders entries then takes a few MiB whatever the
// RuntimeIDs' lengths (up to a datagram's), and a collision, which a
// sender cannot aim for without the seed, would only blur two senders'
// gap counts. Guarded by Relay.mu.
type senders struct {
	words            int // of each mask: Config.SeqWindow / 64
	m                map[uint64]*sender
	gaps, restarts   uint64
	droppedPayloads  uint64
	droppedSpans     uint64
	unsequenced      uint64
	forgottenSenders uint64
	fullSweep        int64 // unix ns of the last sweep of a full table
	sweeps           uint64
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
	w := uint64(s.words) * 64
	switch {
	case sd == nil:
		// A full table is swept at most once a second: a flood of new
		// RuntimeIDs would otherwise cost a walk of the whole table each.
		if len(s.m) >= MaxSenders && now-s.fullSweep >= int64(time.Second) {
			s.fullSweep = now
			s.sweep(now)
		}
		if len(s.m) >= MaxSenders {
			for k, v := range s.m { // map order: an arbitrary victim, O(1)
				s.forget(k, v)
				s.forgottenSenders++
				break
			}
		}
		sd = &sender{masks: make([]uint64, 3*s.words)}
		s.m[id] = sd
		s.reset(sd, seq)
	case seq > sd.high:
		if d := seq - sd.high; d >= w { // spelled out: high+d may wrap
			s.gaps += s.open(sd, 0) + (d - w)
			clear(sd.masks)
		} else {
			s.gaps += s.open(sd, int(w-d)) // the sequences leaving the window
			for m := range 3 {
				shift(sd.masks[m*s.words:(m+1)*s.words], int(d))
			}
		}
		sd.masks[0] |= 1
		sd.high = seq
	case sd.high-seq >= w:
		s.restart(sd, seq)
	case seq < sd.first: // late, and older than anything counted
	default:
		i := sd.high - seq
		got := &sd.masks[i/64]
		if *got&(1<<(i%64)) != 0 {
			s.restart(sd, seq)
			break
		}
		*got |= 1 << (i % 64) // late: its place in the window is filled
	}
	sd.seen = now
	sd.final = sd.final || final
}

// reset starts sd's window at seq: the positions below it count as
// received.
func (s *senders) reset(sd *sender, seq uint64) {
	clear(sd.masks)
	for i := range s.words {
		sd.masks[i] = ^uint64(0)
	}
	sd.high, sd.first = seq, seq
}

// open counts sd's missing sequences not counted yet at window positions
// from on.
func (s *senders) open(sd *sender, from int) uint64 {
	got, settled := sd.masks[:s.words], sd.masks[2*s.words:]
	var n int
	for j := range s.words {
		o := ^got[j] &^ settled[j]
		if lo := j * 64; lo < from {
			if from-lo >= 64 {
				continue
			}
			o &= ^uint64(0) << (from - lo)
		}
		n += bits.OnesCount64(o)
	}
	return uint64(n)
}

// shift moves every bit of m d positions up (0 < d < 64·len(m)); the top
// d bits fall out, the bottom d are zero.
func shift(m []uint64, d int) {
	words, r := d/64, uint(d%64)
	for j := len(m) - 1; j >= 0; j-- {
		var v uint64
		if src := j - words; src >= 0 {
			v = m[src] << r
			if r > 0 && src > 0 {
				v |= m[src-1] >> (64 - r)
			}
		}
		m[j] = v
	}
}

// restart counts a restart of sd at seq; what its window missed is lost.
func (s *senders) restart(sd *sender, seq uint64) {
	s.gaps += s.open(sd, 0)
	s.restarts++
	s.reset(sd, seq)
}

// forget removes sender k, counting what its window missed.
func (s *senders) forget(k uint64, sd *sender) {
	s.gaps += s.open(sd, 0)
	delete(s.m, k)
}

// sweep forgets the senders idle for SenderIdle.
func (s *senders) sweep(now int64) {
	s.sweeps++
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
		got, waited, settled := sd.masks[:s.words], sd.masks[s.words:2*s.words], sd.masks[2*s.words:]
		for j := range s.words {
			open := ^got[j] &^ settled[j]
			late := open & waited[j]
			s.gaps += uint64(bits.OnesCount64(late))
			settled[j] |= late
			waited[j] = open &^ late
		}
		if sd.final {
			s.forget(k, sd)
		}
	}
	s.sweep(now)
}
