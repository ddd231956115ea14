// This file tests the sender table: sequence runs against a model, gaps,
// restarts and late datagrams, and senders evicted or forgotten.

package relay

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/spanstats/spanstats/writer"
)

// seqModel is the sequence accounting of one sender spelled out with a
// set, against which TestSenderRunsModel checks the runs.
type seqModel struct {
	first, mark, high uint64
	got               map[uint64]bool // received, or counted as a gap
	gaps, restarts    uint64
	late              uint64
	known, final      bool
	finalHeld         bool  // final, with a hole, at a harvest
	fresh             uint8 // harvests left during which a lower sequence extends it
	again1            bool  // 1 came again: a restart if the next was received before
}

func (m *seqModel) reset(seq uint64) {
	m.first, m.mark, m.high, m.known = seq, seq, seq, true
	m.got = map[uint64]bool{seq: true}
	m.again1 = false
}

// settle counts the missing sequences below limit as gaps.
func (m *seqModel) settle(limit uint64) {
	for q := m.first; q < limit; q++ {
		if !m.got[q] {
			m.gaps++
			m.got[q] = true
		}
	}
}

// runs counts the runs of received sequences.
func (m *seqModel) runs() int {
	n := 0
	for q := m.first; q <= m.high; q++ {
		if m.got[q] && (q == m.first || !m.got[q-1]) {
			n++
		}
	}
	return n
}

func (m *seqModel) restart(seq uint64) {
	m.settle(m.high)
	m.restarts++
	m.reset(seq)
	m.final, m.finalHeld, m.again1 = false, false, false
}

func (m *seqModel) observe(seq uint64, final bool) {
	defer func() { m.final = m.final || final }()
	if m.known && m.again1 {
		switch {
		case seq == 1 && final:
			m.restart(1)
			return
		case seq == 1:
			m.late++
			return
		case seq >= m.first && m.got[seq]:
			m.restart(1)
		default:
			m.again1 = false
			m.late++
		}
	}
	switch {
	case !m.known:
		m.reset(seq)
		m.fresh = freshHarvests
	case seq < m.first && m.fresh > 0 && m.first-seq <= defaultInFlight: // reordered below the first merged
		m.first, m.mark = seq, seq
		m.got[seq] = true
		m.overflow()
	case (seq < m.first || m.got[seq]) && seq != 1:
		m.late++
	case seq < m.first, m.got[seq] && final:
		m.restart(seq)
	case m.got[seq]:
		m.again1 = true
	default:
		m.got[seq] = true
		m.high = max(m.high, seq)
		m.overflow()
	}
}

// overflow closes the lowest hole when there are more than maxRuns runs.
func (m *seqModel) overflow() {
	if m.runs() <= maxRuns {
		return
	}
	q := m.first
	for m.got[q] {
		q++
	}
	for ; !m.got[q]; q++ {
		m.gaps++
		m.got[q] = true
	}
}

func (m *seqModel) harvest() {
	if !m.known {
		return
	}
	m.settle(m.mark)
	m.mark = m.high
	m.fresh -= min(m.fresh, 1)
	if m.final && (m.runs() == 1 && (m.fresh == 0 || m.first <= 1) || m.finalHeld) {
		m.settle(m.high)
		m.known, m.final, m.finalHeld = false, false, false
	} else if m.final {
		m.finalHeld = true
	}
}

// TestSenderRunsModel: over random streams of one sender (lost, reordered
// far, duplicated and restarting sequences, jumps, final datagrams,
// harvests), the runs count exactly the gaps, restarts and late
// sequences of the set model, step by step.
func TestSenderRunsModel(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 7))
	for stream := range 300 {
		var s senders
		var m seqModel
		next := uint64(1 + rng.IntN(5))
		var pending []uint64
		check := func(step int, what string) {
			if s.gaps != m.gaps || s.restarts != m.restarts || s.late != m.late {
				t.Fatalf("stream %d step %d %s: runs count %d gaps %d restarts %d late, model %d %d %d",
					stream, step, what, s.gaps, s.restarts, s.late, m.gaps, m.restarts, m.late)
			}
		}
		for step := range 400 {
			switch r := rng.IntN(1000); {
			case r < 20:
				s.harvest(0)
				m.harvest()
				check(step, "harvest")
			case r < 25:
				next = 1 + uint64(rng.IntN(3)) // a restart
			case r < 35:
				next += uint64(rng.IntN(300)) // a jump
			case r < 50 && len(pending) > 0: // a duplicate
				pending = append(pending, pending[rng.IntN(len(pending))])
			}
			if rng.IntN(10) > 0 { // a tenth are lost
				pending = append(pending, next)
			}
			next++
			// Merge some of the pending in random order: reordered by up
			// to a few hundred.
			for len(pending) > 0 && (len(pending) > rng.IntN(300) || rng.IntN(3) == 0) {
				i := rng.IntN(len(pending))
				q := pending[i]
				pending = append(pending[:i], pending[i+1:]...)
				final := rng.IntN(300) == 0
				s.observe(1, q, final, 1)
				m.observe(q, final)
				check(step, "observe")
			}
		}
	}
}

// TestFreshSenderRestartBeyondReordering: a sender first met at 500
// (it predates the relay) that starts over at 1 with its RuntimeID has
// restarted: no reordering in a receive path holding 176 datagrams brings
// its 1 in after its 500, so 2..499 are no gaps; within that span a lower
// sequence is still taken as reordered, its holes gaps.
func TestFreshSenderRestartBeyondReordering(t *testing.T) {
	s := senders{inFlight: 176}
	for _, q := range []uint64{500, 501, 1, 2, 3} {
		s.observe(7, q, false, 0)
	}
	s.observe(8, 100, false, 0)
	s.observe(8, 1, false, 0) // 99 below: within the span
	s.observe(9, 500, false, 0)
	s.observe(9, 3, false, 0) // far below, not 1: late
	for i := range 3 {
		s.harvest(int64(i) * int64(10*time.Second))
	}
	if s.gaps != 98 || s.restarts != 1 || s.late != 1 {
		t.Fatalf("gaps %d restarts %d late %d; want 98 (sender 8's 2..99), 1 (sender 7), 1 (sender 9's 3)", s.gaps, s.restarts, s.late)
	}
}

// TestFullSenderTableSweepsRarely: new senders beyond MaxSenders evict one
// sender each, and the full table is walked for idle ones at most once a
// second, not once per new sender.
func TestFullSenderTableSweepsRarely(t *testing.T) {
	var s senders
	now := int64(1e18)
	for id := range uint64(MaxSenders + 5000) {
		s.observe(id, 1, false, now)
	}
	if len(s.m) != MaxSenders || s.forgottenSenders != 5000 || s.sweeps != 1 {
		t.Fatalf("senders %d, forgotten %d, sweeps %d; want %d, 5000, 1", len(s.m), s.forgottenSenders, s.sweeps, MaxSenders)
	}
	s.observe(1<<40, 1, false, now+int64(time.Second))
	if s.sweeps != 2 {
		t.Fatalf("sweeps %d a second later, want 2", s.sweeps)
	}
}

// TestEvictionCountsOnlyHarvestedHoles: a live sender evicted from a full
// table counts as gaps the holes a harvest has seen, not one opened since
// (a datagram another worker may still be decoding).
func TestEvictionCountsOnlyHarvestedHoles(t *testing.T) {
	var s senders
	const x = uint64(1) << 60
	now := int64(1e18)
	for _, q := range []uint64{1, 2, 4, 5} { // 3 missing at the harvest below
		s.observe(x, q, false, now)
	}
	s.harvest(now)
	s.observe(x, 7, false, now) // 6: with another worker
	for id := range uint64(MaxSenders - 1) {
		s.observe(id, 1, false, now)
	}
	for next := uint64(1) << 40; s.m[x] != nil; next++ { // a flood of new ids until x is the victim
		s.observe(next, 1, false, now)
	}
	if s.gaps != 1 {
		t.Fatalf("seq gaps %d after the eviction, want 1: sequence 3 (a harvest old), not 6", s.gaps)
	}
}

// TestHostileSequenceCannotWrapGaps: a sender jumping by 2^63 and back to
// 1, again and again, and another going to MaxUint64: the gaps counter
// only grows, each jump counting at most maxSeqGap.
func TestHostileSequenceCannotWrapGaps(t *testing.T) {
	r := newTestRelay(Config{})
	var prev uint64
	for i, seq := range []uint64{1, math.MaxUint64 / 2, 1, math.MaxUint64 / 2, 1, math.MaxUint64} {
		mustAccept(t, r, datagram(seq, header("x"), bucket(w0, 10*sec, entry(key("r"), 1, 0))), 0, UDP)
		r.Harvest(t0.Add(time.Hour))
		r.Harvest(t0.Add(time.Hour))
		g := r.Stats().SeqGaps
		if g < prev || g > uint64(i+1)*maxSeqGap {
			t.Fatalf("after seq %d: seq gaps %d (before %d); want growing by at most %d a jump", seq, g, prev, uint64(maxSeqGap))
		}
		prev = g
	}
}

// TestSequenceZeroAfterMaxIsLate: sequence 0 (no SDK sends it) after a
// run ending at MaxUint64 is not the next in order: 0-1 wraps to that run's
// top, which then ended below its start and broke every count after it.
// Both 0s are late: far below the sender's first, neither can be one the
// workers reordered (TestFreshSenderRestartBeyondReordering).
func TestSequenceZeroAfterMaxIsLate(t *testing.T) {
	var s senders
	for _, seq := range []uint64{math.MaxUint64, 0, 0} {
		s.observe(1, seq, false, 1)
	}
	sd := s.m[1]
	for i, r := range sd.runs {
		if r.lo > r.hi || i > 0 && sd.runs[i-1].hi >= r.lo {
			t.Fatalf("runs %v: not disjoint ascending runs", sd.runs)
		}
	}
	if s.late != 2 {
		t.Fatalf("late %d, want 2 (both 0s)", s.late)
	}
}

// TestFinalMergedBeforeEarlierAcrossHarvest: a stopping sender's final
// datagram is merged, a harvest comes, then its previous datagram (another
// decode worker's): a hole at one harvest only, as for any sender, so no
// gap, and the sender is forgotten at the next harvest, not left behind as
// a new one.
func TestFinalMergedBeforeEarlierAcrossHarvest(t *testing.T) {
	var s senders
	s.observe(1, 1, false, 0)
	s.observe(1, 2, false, 0)
	s.observe(1, 4, true, 0)
	s.harvest(0)
	s.observe(1, 3, false, 0)
	s.harvest(0)
	if s.gaps != 0 || s.late != 0 || len(s.m) != 0 {
		t.Fatalf("gaps %d, late %d, senders %d; want 0 0 0", s.gaps, s.late, len(s.m))
	}
	// Still lost at the second harvest: a gap, and forgotten.
	s.observe(2, 1, false, 0)
	s.observe(2, 3, true, 0)
	s.harvest(0)
	s.harvest(0)
	if s.gaps != 1 || len(s.m) != 0 {
		t.Fatalf("gaps %d, senders %d; want 1 0", s.gaps, len(s.m))
	}
}

// TestForgottenSendersInStats: a sender the full table evicts while live
// loses its gap count until it is seen afresh; Stats (and /metrics, as
// statsrelay_senders_forgotten_total) say how many were.
func TestForgottenSendersInStats(t *testing.T) {
	r := newTestRelay(Config{})
	b := bucket(uint64(t0.UnixNano()), uint64(10*time.Second), entry(key("/a"), 1, 0))
	for i := range MaxSenders + 3 {
		mustAccept(t, r, datagram(1, header(fmt.Sprintf("rid-%d", i)), b), 0, Unix)
	}
	if st := r.Stats(); st.Senders != MaxSenders || st.SendersForgotten != 3 {
		t.Fatalf("senders %d, forgotten %d; want %d and 3", st.Senders, st.SendersForgotten, MaxSenders)
	}
}

// TestRestartAfterFinalIsLive: a sender that said it stops and then starts
// over at sequence 1 (a new Aggregator of the same RuntimeID) is live: it
// is not forgotten at the next harvest as a stopping one, so a datagram it
// loses just after counts as a gap.
func TestRestartAfterFinalIsLive(t *testing.T) {
	var s senders
	s.observe(1, 1, false, 0)
	s.observe(1, 2, true, 0)  // stops
	s.observe(1, 1, false, 0) // and starts over before the harvest
	s.observe(1, 2, false, 0)
	s.harvest(0)
	if len(s.m) != 1 || s.restarts != 1 {
		t.Fatalf("after the harvest: senders %d, restarts %d; want 1 1 (the restarted sender is live)", len(s.m), s.restarts)
	}
	s.observe(1, 4, false, 0) // 3 lost
	s.harvest(0)
	s.harvest(0)
	if s.gaps != 1 {
		t.Fatalf("gaps %d, want 1: the restarted sender's lost 3", s.gaps)
	}
}

// TestNewSenderReorderedAcrossHarvest: a new sender's first datagrams,
// merged by two decode workers on either side of a harvest (its 2, the
// harvest, then its 1), are reordered, not a restart: no restart, and
// its 2, which was received, never counts as a gap.
func TestNewSenderReorderedAcrossHarvest(t *testing.T) {
	var s senders
	s.observe(1, 2, false, 0)
	s.harvest(0)
	s.observe(1, 1, false, 0) // the other worker's, merged just after
	s.observe(1, 3, false, 0)
	s.harvest(0)
	s.harvest(0)
	if s.restarts != 0 || s.gaps != 0 || s.late != 0 {
		t.Fatalf("restarts %d, gaps %d, late %d; want 0 0 0", s.restarts, s.gaps, s.late)
	}
	// A harvest later, a lower sequence is from before the sender was
	// seen (late), and 1 a restart, as for any sender.
	s.observe(2, 5, false, 0)
	s.harvest(0)
	s.harvest(0)
	s.observe(2, 4, false, 0)
	s.observe(2, 1, false, 0)
	if s.late != 1 || s.restarts != 1 {
		t.Fatalf("late %d, restarts %d after two harvests; want 1 1", s.late, s.restarts)
	}
}

// TestIdleSenderForgottenAfterClockStepBack: a sender last seen before
// the wall clock stepped back an hour (an NTP correction, a restored VM)
// and silent since is forgotten SenderIdle after the step, not an hour
// later: until then it stayed in statsrelay_senders and in the table.
func TestIdleSenderForgottenAfterClockStepBack(t *testing.T) {
	var s senders
	now := int64(1e18)
	s.observe(1, 1, false, now)
	now -= int64(time.Hour) // the step
	const every = 10 * time.Second
	for range 2 * SenderIdle / every { // a harvest an interval, 10 minutes
		now += int64(every)
		s.harvest(now)
	}
	if len(s.m) != 0 {
		t.Fatalf("%d senders 10 minutes after the step, want 0: idle since", len(s.m))
	}
	// A live sender is not forgotten by the step.
	s.observe(2, 1, false, now)
	now -= int64(time.Hour)
	for q := uint64(2); q < 60; q++ {
		now += int64(every)
		s.observe(2, q, false, now)
		s.harvest(now)
	}
	if len(s.m) != 1 || s.gaps != 0 {
		t.Fatalf("senders %d, gaps %d; want the live one kept, no gap", len(s.m), s.gaps)
	}
}

// TestFullTableSweptAfterClockStepBack: the once-a-second sweep of a full
// table does not wait for the wall clock to come back to the last sweep's
// time after it stepped back: the table's idle senders make room for new
// ones, not live ones, meanwhile.
func TestFullTableSweptAfterClockStepBack(t *testing.T) {
	var s senders
	now := int64(1e18)
	for id := range uint64(MaxSenders + 1) {
		s.observe(id, 1, false, now)
	}
	if s.sweeps != 1 {
		t.Fatalf("sweeps %d, want 1", s.sweeps)
	}
	now -= int64(time.Hour)
	s.observe(1<<40, 1, false, now)
	if s.sweeps != 2 {
		t.Fatalf("sweeps %d after the clock stepped back, want 2", s.sweeps)
	}
	s.observe(1<<41, 1, false, now+int64(time.Second/2))
	if s.sweeps != 2 {
		t.Fatalf("sweeps %d half a second later, want still 2", s.sweeps)
	}
}

// TestNewStoppingSenderWaitsForItsFirst: a short-lived sender's only
// datagrams, the last flagged final, merged out of order on either side of
// a harvest (its 2 and final 3, the harvest, then its 1): the sender is
// forgotten a harvest later, its 1 merged into it, rather than at once,
// which made the 1 start a new sender that lingered in the table and in
// statsrelay_senders for SenderIdle.
func TestNewStoppingSenderWaitsForItsFirst(t *testing.T) {
	var s senders
	s.observe(1, 2, false, 0)
	s.observe(1, 3, true, 0)
	s.harvest(0)
	s.observe(1, 1, false, 0) // the other worker's, merged just after
	s.harvest(0)
	if len(s.m) != 0 || s.gaps != 0 || s.restarts != 0 || s.late != 0 {
		t.Fatalf("senders %d, gaps %d, restarts %d, late %d; want 0 0 0 0", len(s.m), s.gaps, s.restarts, s.late)
	}
	// One that started at 1 has nothing below to wait for: forgotten at
	// the next harvest.
	s.observe(2, 1, false, 0)
	s.observe(2, 2, true, 0)
	s.harvest(0)
	if len(s.m) != 0 {
		t.Fatalf("senders %d after a sender's complete 1, 2 (final); want 0", len(s.m))
	}
}

// TestLongIntervalKeepsItsSenders: at an interval longer than SenderIdle
// (-interval 10m), an SDK sends once an interval. Its sender is kept from
// one report to the next, so a datagram lost between two counts as a gap;
// forgotten at each harvest, every report started it afresh and no loss
// was ever counted.
func TestLongIntervalKeepsItsSenders(t *testing.T) {
	const iv = 10 * time.Minute
	now := t0
	r := newTestRelay(Config{Interval: iv, Now: func() time.Time { return now }})
	boundary := writer.AlignStart(t0, iv)
	for seq := uint64(1); seq <= 4; seq++ {
		now = boundary.Add(iv / 10) // the SDK sends the window it just ended
		if seq != 2 {               // lost on its way
			start := uint64(boundary.Add(-iv).UnixNano())
			mustAccept(t, r, datagram(seq, header("rt"), bucket(start, uint64(iv), entry(key("a"), 1, 0))), 0, UDP)
		}
		boundary = boundary.Add(iv)
		now = boundary.Add(DefaultGrace)
		for _, b := range r.Harvest(boundary) {
			r.Forwarded(b.Hits)
		}
	}
	if st := checkAccounting(t, r); st.SeqGaps != 1 || st.Senders != 1 || st.SeqRestarts != 0 {
		t.Fatalf("gaps %d, senders %d, restarts %d; want the lost datagram as 1 gap of the one sender", st.SeqGaps, st.Senders, st.SeqRestarts)
	}
}

// TestSequences: a sequence missing at two harvests in a row is a gap, so
// datagrams the decode workers merge out of order count none; a sender
// first seen mid-stream counts nothing below its lowest sequence at the
// second harvest, its sequences merged below the first until then; a
// sequence received twice is a restart; a stopping sender is forgotten at
// the next harvest, after its late datagrams; an idle one after
// SenderIdle, counting what it missed.
func TestSequences(t *testing.T) {
	r := newTestRelay(Config{})
	now := t0
	r.now = func() time.Time { return now }
	send := func(id string, e writer.Envelope) {
		t.Helper()
		d := writer.AppendEnvelope(nil, e)
		h := header(id)
		mustAccept(t, r, writer.AppendPayload(d, &h, []writer.Bucket{bucket(w0, 10*sec, entry(key("r"), 1, 0))}), 0, Unix)
	}
	seqs := func(id string, flags uint8, seqs ...uint64) {
		t.Helper()
		for _, q := range seqs {
			send(id, writer.Envelope{Sequence: q, Flags: flags})
		}
	}
	late := uint64(0)
	expect := func(what string, gaps, restarts uint64, senders int) {
		t.Helper()
		s := checkAccounting(t, r)
		if s.SeqGaps != gaps || s.SeqRestarts != restarts || s.Senders != senders || s.SeqLate != late {
			t.Fatalf("%s: gaps %d restarts %d senders %d late %d, want %d %d %d %d", what,
				s.SeqGaps, s.SeqRestarts, s.Senders, s.SeqLate, gaps, restarts, senders, late)
		}
	}
	harvest := func() { now = now.Add(10 * time.Second); r.Harvest(now) }

	seqs("a", 0, 1, 2)
	send("a", writer.Envelope{Sequence: 5, DroppedPayloads: 2, DroppedSpans: 40}) // 3, 4 lost; 2 reported dropped
	seqs("b", 0, 9)                                                               // first seen mid-stream: no reference, no gap
	send("b", writer.Envelope{Sequence: 10, DroppedPayloads: 1, DroppedSpans: 2})
	seqs("b", 0, 13, 12, 11, 8) // out of order, and one merged after its first: not late
	expect("before a harvest", 0, 0, 2)
	harvest()
	expect("3 and 4 missing at one harvest", 0, 0, 2)
	seqs("b", 0, 7) // below its lowest after one harvest: merged late by a worker, not late
	expect("b's 7 extends it", 0, 0, 2)
	seqs("a", 0, 7, 6)
	harvest()
	expect("3 and 4 missing at two", 2, 0, 2)
	seqs("b", 0, 6) // below its lowest after two harvests: from before it was seen
	late++
	expect("b's 6 late", 2, 0, 2)
	if s := r.Stats(); s.SenderDroppedPayloads != 3 || s.SenderDroppedSpans != 42 {
		t.Fatalf("senders' own drops %d/%d, want 3/42", s.SenderDroppedPayloads, s.SenderDroppedSpans)
	}

	seqs("a", 0, 1)                // seen before: restarted
	seqs("a", writer.FlagFinal, 3) // and stops, its 2 still in flight
	seqs("a", 0, 2)                // merged after the final one
	expect("a restarted and stopping", 2, 1, 2)
	harvest()
	expect("a stopped", 2, 1, 1)

	const jump = 300
	seqs("c", 0, 1, jump) // 2..jump-1 missing
	expect("a jump", 2, 1, 2)
	harvest()
	expect("a jump's hole at one harvest", 2, 1, 2)
	harvest()
	expect("a jump's hole at two", 2+jump-2, 1, 2)

	seqs("d", 0, 1, 3)
	now = now.Add(SenderIdle)
	r.Harvest(now)
	expect("idle senders forgotten, their missing counted", 2+jump-2+1, 1, 0)

	// A datagram delayed past two harvests, after its sequence was counted
	// as a gap, and a duplicate: late, neither a restart nor a reason to
	// count the sequences since as gaps.
	gaps := uint64(2 + jump - 2 + 1)
	seqs("e", 0, 1, 2, 4, 5)
	harvest()
	harvest()
	expect("3 missing at two harvests", gaps+1, 1, 1)
	seqs("e", 0, 3, 6, 5, 7)
	late += 2
	expect("3 late, 5 twice", gaps+1, 1, 1)
	harvest()
	harvest()
	expect("nothing missing since", gaps+1, 1, 1)
	seqs("e", 0, 1) // the SDK counts from 1, or a duplicate: the next says
	expect("e's 1 again", gaps+1, 1, 1)
	seqs("e", 0, 2) // received before too: a restart
	expect("e restarted", gaps+1, 2, 1)
	seqs("f", 0, 3, 1, 2) // a new sender's 1 merged after its 3: no restart
	expect("f reordered from its start", gaps+1, 2, 2)
	harvest()
	harvest()
	expect("f complete", gaps+1, 2, 2)
}

// TestSendersDuplicateOneIsNoRestart: sequence 1 again, then the
// sender's next new sequence: the 1 was a duplicate (a UDP datagram
// delivered twice, a replay), counted late; taken for a restart, it
// used to count every sequence since as a gap (99 here).
func TestSendersDuplicateOneIsNoRestart(t *testing.T) {
	var s senders
	for q := uint64(1); q <= 100; q++ {
		s.observe(7, q, false, 0)
	}
	s.harvest(0)
	s.harvest(0)
	s.observe(7, 1, false, 0)
	for q := uint64(101); q <= 110; q++ {
		s.observe(7, q, false, 0)
	}
	s.harvest(0)
	s.harvest(0)
	if s.gaps != 0 || s.restarts != 0 || s.late != 1 {
		t.Fatalf("gaps %d restarts %d late %d, want 0 0 1", s.gaps, s.restarts, s.late)
	}
	// A restart: 1, then 2, both received before.
	s.observe(7, 1, false, 0)
	s.observe(7, 2, false, 0)
	s.harvest(0)
	s.harvest(0)
	if s.gaps != 0 || s.restarts != 1 || s.late != 1 {
		t.Fatalf("after a restart: gaps %d restarts %d late %d, want 0 1 1", s.gaps, s.restarts, s.late)
	}
	// 1 twice more, then a new sequence: both duplicates.
	for q := uint64(3); q <= 50; q++ {
		s.observe(7, q, false, 0)
	}
	s.observe(7, 1, false, 0)
	s.observe(7, 1, false, 0)
	s.observe(7, 51, false, 0)
	s.harvest(0)
	s.harvest(0)
	if s.gaps != 0 || s.restarts != 1 || s.late != 3 {
		t.Fatalf("after 1 twice more: gaps %d restarts %d late %d, want 0 1 3", s.gaps, s.restarts, s.late)
	}
	// A final 1: a sender that restarted and stops after one datagram.
	s.observe(7, 1, true, 0)
	if s.restarts != 2 {
		t.Fatalf("a final 1: restarts %d, want 2", s.restarts)
	}
	s.harvest(0)
	if len(s.m) != 0 || s.gaps != 0 {
		t.Fatalf("after the final 1's harvest: %d senders, %d gaps; want it forgotten, no gap", len(s.m), s.gaps)
	}
}
