// This file holds the sender table: sequence numbers per RuntimeID, from
// which gaps, restarts and late datagrams are counted.

package relay

import (
	"math"
	"slices"
	"time"

	"github.com/spanstats/spanstats/internal/dgram"
)

// Bounds of the sender table.
const (
	// SenderIdle is how long a sender is remembered after its last datagram
	// (or senderIdleIntervals intervals, if longer); an SDK sends at least
	// once per interval while it has spans.
	SenderIdle = 5 * time.Minute
	// MaxSenders bounds the sender table: beyond it an arbitrary sender is
	// forgotten (its next datagram starts it afresh, uncounted).
	MaxSenders = 1 << 16
)

// sender is what the relay remembers of one sender (a RuntimeID): the
// runs of sequences received. The decode workers merge a sender's
// datagrams in whatever order they finish decoding them, and a worker can
// be descheduled while the other merges hundreds of later ones, so a
// sequence missing now is not yet a gap: it is one once it was missing at
// two harvests in a row, an interval apart (a hole below the highest
// sequence of the previous harvest), or its sender is forgotten.
type sender struct {
	// runs holds the sequences received (or counted as gaps), as disjoint,
	// non-adjacent runs in ascending order; the first starts at the first
	// sequence seen: nothing below it counts.
	runs []seqRun
	mark uint64 // the highest sequence at the previous harvest
	seen int64  // unix ns of its last datagram
	// final: it said it is stopping; forgotten at the next harvest, so that
	// its datagrams merged after the final one still fill their holes, or,
	// with a hole left above its mark, or still fresh with sequences below
	// its lowest to come, at the one after (finalHeld): the datagram may be
	// merged just after that harvest, as any other.
	final, finalHeld bool
	// fresh: the harvests left (of freshHarvests) during which a lower
	// sequence extends its runs down instead of counting as late or as a
	// restart. Its first datagram merged need not be its lowest (another
	// worker may still hold sequence 1, and merge it just after a
	// harvest), so its lower sequences get a harvest's grace, as holes do.
	fresh uint8
	// again1: sequence 1 came again, while the next datagram says
	// whether it was a restart (one already received comes next: the SDK
	// counts from 1 again) or a duplicate (a new one comes next).
	again1 bool
}

// freshHarvests is how many harvests a new sender stays fresh: the one
// just after it is first seen may come between the merges of its first
// datagrams; a harvest later, they have all been merged.
const freshHarvests = 2

// seqRun is the sequences lo..hi.
type seqRun struct{ lo, hi uint64 }

// senderIdleIntervals is, in intervals, the least a sender is remembered:
// at an interval longer than SenderIdle an SDK's reports come further
// apart than that, and forgetting it between two would count no loss.
const senderIdleIntervals = 3

// maxRuns bounds a sender's runs: past it, its lowest hole is counted as
// gaps and closed. Reordering opens a hole or two per decode worker; more
// are losses at the default -procs (one worker) up to about eight. With
// more workers reordering alone can open that many (and the datagram then
// merged counts as late): the bound keeps a hostile sender's runs, and the
// sender table, to a few tens of MiB.
const maxRuns = 16

// senders tracks sequence numbers per RuntimeID, keyed by its seeded hash:
// a sender table of MaxSenders entries then takes a few MiB whatever the
// RuntimeIDs' lengths (up to a datagram's), about 40 MiB when every sender
// has maxRuns runs (hostile or very lossy senders), and a collision, which a
// sender cannot aim for without the seed, would only blur two senders'
// gap counts. Guarded by Relay.mu.
type senders struct {
	m                map[uint64]*sender
	gaps, restarts   uint64
	late             uint64 // sequences already received or counted (a 1 again: once the next datagram says it was no restart)
	droppedPayloads  uint64
	droppedSpans     uint64
	unsequenced      uint64
	forgottenSenders uint64
	fullSweep        int64 // unix ns of the last sweep of a full table
	sweeps           uint64
	// idle is how long a silent sender is kept (ns; 0: SenderIdle).
	idle int64
	// inFlight is the most datagrams the receive path holds between
	// reading and merging (0: defaultInFlight): the workers cannot merge
	// a sender's datagram after one sent further past it than that.
	inFlight uint64
}

// defaultInFlight is senders.inFlight unset: the Server's default queue
// and batches with eight decode workers.
const defaultInFlight = uint64(DefaultQueue+8+int(NumTransports)) * dgram.DefaultBatchSize

// reorderSpan is how far below a fresh sender's lowest sequence a
// datagram can still be one the workers reordered.
func (s *senders) reorderSpan() uint64 {
	if s.inFlight > 0 {
		return s.inFlight
	}
	return defaultInFlight
}

// observe records datagram seq of the sender whose RuntimeID hashes to id
// at now. A sender seen for the first time has no reference (it may
// predate the relay, or have been forgotten): until the harvest after
// next a lower sequence extends its runs down (the workers reordered them,
// maybe across a harvest), after it nothing below its lowest counts; one
// further below its lowest than the receive path holds datagrams
// (inFlight) cannot be reordered: 1 is a restart (the sender started over
// with its RuntimeID), another late. Sequence 1 again is a restart (the
// SDK counts from 1) if the next
// datagram is one received before too, or if it says the sender stops,
// else a duplicate, counted late (another 1 meanwhile too). A sender
// forgotten with that undecided counts no restart.
// Any other sequence received before, below the first or counted as a gap
// is late (delayed past two harvests) or duplicated: counted, and it
// changes nothing, as starting afresh at it would count the sequences
// between it and the latest as gaps.
func (s *senders) observe(id, seq uint64, final bool, now int64) {
	if s.m == nil {
		s.m = make(map[uint64]*sender)
	}
	sd := s.m[id]
	if sd == nil {
		// A full table is swept at most once a second: a flood of new
		// RuntimeIDs would otherwise cost a walk of the whole table each.
		// (Or at once after the wall clock stepped back.)
		if len(s.m) >= MaxSenders && (now-s.fullSweep >= int64(time.Second) || now < s.fullSweep) {
			s.fullSweep = now
			s.sweep(now)
		}
		if len(s.m) >= MaxSenders {
			for k, v := range s.m { // map order: an arbitrary victim, O(1)
				s.evict(k, v)
				break
			}
		}
		sd = &sender{fresh: freshHarvests}
		s.m[id] = sd
		sd.reset(seq)
	} else {
		s.add(sd, seq, final)
	}
	sd.seen = now
	sd.final = sd.final || final
}

// add records seq in sd's runs; final: its datagram says the sender stops.
func (s *senders) add(sd *sender, seq uint64, final bool) {
	if sd.again1 {
		switch {
		case seq == 1 && final: // a stopping sender's run of one datagram
			s.restart(sd, 1)
			return
		case seq == 1: // 1 yet again: still undecided, the extra one late
			s.late++
			return
		case sd.has(seq):
			s.restart(sd, 1)
		default:
			sd.again1 = false
			s.late++ // the 1 was a duplicate (TestSendersDuplicateOneIsNoRestart)
		}
	}
	r := sd.runs
	top := &r[len(r)-1]
	switch {
	case seq < r[0].lo && sd.fresh > 0 && r[0].lo-seq <= s.reorderSpan(): // merged after a later one: extend down
		if seq+1 == r[0].lo {
			r[0].lo = seq
		} else {
			sd.runs = slices.Insert(r, 0, seqRun{seq, seq})
		}
		// The holes opened now get a harvest's grace, like any other.
		sd.mark = seq
	case seq < r[0].lo: // older than anything counted, or sent before the relay met the sender
		if seq == 1 {
			s.restart(sd, seq)
		} else {
			s.late++
		}
		return
	case seq-1 == top.hi && seq != 0: // the common case, in order (0-1 would wrap to MaxUint64)
		top.hi = seq
		return
	case seq > top.hi:
		sd.runs = append(r, seqRun{seq, seq})
	default:
		// The run at or below seq (r[0].lo <= seq), and the next one.
		i, _ := slices.BinarySearchFunc(r, seq, func(x seqRun, q uint64) int {
			if x.lo > q {
				return 1
			}
			return -1
		})
		i--
		switch {
		case seq <= r[i].hi && seq == 1 && final: // nothing follows it: a restart
			s.restart(sd, seq)
		case seq <= r[i].hi && seq == 1:
			sd.again1 = true // a restart or a duplicate: the next one says
		case seq <= r[i].hi:
			s.late++
		case seq-1 == r[i].hi && seq+1 == r[i+1].lo:
			r[i].hi = r[i+1].hi
			sd.runs = slices.Delete(r, i+1, i+2)
		case seq-1 == r[i].hi:
			r[i].hi = seq
		case seq+1 == r[i+1].lo:
			r[i+1].lo = seq
		default:
			sd.runs = slices.Insert(r, i+1, seqRun{seq, seq})
		}
	}
	if len(sd.runs) > maxRuns {
		s.close(sd, 1)
	}
}

// close counts the holes below sd's run n as gaps and joins runs 0..n.
func (s *senders) close(sd *sender, n int) {
	r := sd.runs
	for i := range n {
		gap := min(r[i+1].lo-r[i].hi-1, maxSeqGap)
		s.gaps = min(s.gaps+gap, math.MaxUint64-maxSeqGap) // saturates: a counter never goes back
	}
	r[0].hi = r[n].hi
	sd.runs = slices.Delete(r, 1, n+1)
}

// maxSeqGap bounds the gap one jump of a sender's sequence counts: no SDK
// loses four billion datagrams between two it delivered, and a hostile
// sequence (1, then 2^63) must not wrap statsrelay_sender_seq_gaps_total.
const maxSeqGap = 1 << 32

// has says whether sd received seq (or counted it as a gap).
func (sd *sender) has(seq uint64) bool {
	for _, r := range sd.runs {
		if r.lo <= seq && seq <= r.hi {
			return true
		}
	}
	return false
}

// reset starts sd afresh at seq. A final datagram before it was the
// previous run's: the sender is live again, not to be forgotten as
// stopping (the datagram at seq may say it stops; observe applies that).
func (sd *sender) reset(seq uint64) {
	sd.runs = append(sd.runs[:0], seqRun{seq, seq})
	sd.mark = seq
	sd.final, sd.finalHeld, sd.again1 = false, false, false
}

// restart counts a restart of sd at seq; what it missed is lost.
func (s *senders) restart(sd *sender, seq uint64) {
	s.close(sd, len(sd.runs)-1)
	s.restarts++
	sd.reset(seq)
}

// forget removes sender k, counting what it missed.
func (s *senders) forget(k uint64, sd *sender) {
	s.close(sd, len(sd.runs)-1)
	delete(s.m, k)
}

// evict removes sender k, live, from a full table, counting as gaps only
// the holes a harvest has seen (below its mark): a younger one may be a
// datagram another worker still decodes, not a loss.
func (s *senders) evict(k uint64, sd *sender) {
	s.close(sd, sd.markRun())
	delete(s.m, k)
	s.forgottenSenders++
}

// markRun is the index of the run holding sd's mark: the holes below it
// were missing at a harvest already.
func (sd *sender) markRun() int {
	n := 0
	for n+1 < len(sd.runs) && sd.runs[n+1].lo <= sd.mark {
		n++
	}
	return n
}

// closeAll counts every sender's holes as gaps: at stop, once every
// datagram read is merged, none can be filled any more.
func (s *senders) closeAll() {
	for _, sd := range s.m {
		if len(sd.runs) > 1 {
			s.close(sd, len(sd.runs)-1)
		}
	}
}

// sweep forgets the senders idle for s.idle. One last seen after now was
// seen before the wall clock stepped back: it is taken as seen now, or it
// would be kept for as long as the step besides s.idle.
func (s *senders) sweep(now int64) {
	s.sweeps++
	idle := s.idle
	if idle == 0 {
		idle = int64(SenderIdle)
	}
	for k, sd := range s.m {
		sd.seen = min(sd.seen, now)
		if now-sd.seen >= idle {
			s.forget(k, sd)
		}
	}
}

// harvest, once an interval, counts as gaps the holes below each sender's
// mark (missing since the previous harvest at least: a hole opens only
// above the highest sequence), forgets the senders that said they stop
// (one with a hole left waits a harvest more: forgetting it would count
// the hole as gaps at once; so does a fresh one not seen from 1: its
// lower sequences merged after the forget would start a new sender), and
// sweeps the idle ones.
func (s *senders) harvest(now int64) {
	for k, sd := range s.m {
		s.close(sd, sd.markRun())
		sd.mark = sd.runs[len(sd.runs)-1].hi
		sd.fresh -= min(sd.fresh, 1)
		// Still fresh and not from 1: its lower sequences may be merged
		// yet, as a hole's.
		whole := len(sd.runs) == 1 && (sd.fresh == 0 || sd.runs[0].lo <= 1)
		switch {
		case sd.final && (whole || sd.finalHeld):
			s.forget(k, sd)
		case sd.final:
			sd.finalHeld = true
		}
	}
	s.sweep(now)
}
