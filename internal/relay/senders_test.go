package relay

import (
	"math/rand/v2"
	"testing"
	"time"
)

// seqModel is the sequence accounting of one sender spelled out with sets,
// against which TestSenderWindowModel checks the bit masks.
type seqModel struct {
	w                    uint64
	high, first          uint64
	got, waited, settled map[uint64]bool
	gaps, restarts       uint64
	known, final         bool
}

func (m *seqModel) reset(seq uint64) {
	m.high, m.first, m.known = seq, seq, true
	m.got, m.waited, m.settled = map[uint64]bool{seq: true}, map[uint64]bool{}, map[uint64]bool{}
}

// open reports whether q is missing and not counted yet.
func (m *seqModel) open(q uint64) bool { return q >= m.first && !m.got[q] && !m.settled[q] }

// lo is the window's lowest sequence.
func (m *seqModel) lo() uint64 { return max(m.high, m.w-1) - (m.w - 1) }

func (m *seqModel) countOpen() {
	for q := m.lo(); q <= m.high; q++ {
		if m.open(q) {
			m.gaps++
		}
	}
}

func (m *seqModel) observe(seq uint64, final bool) {
	switch {
	case !m.known:
		m.reset(seq)
	case seq > m.high:
		newLo := max(seq, m.w-1) - (m.w - 1)
		for q := m.lo(); q < newLo && q <= m.high; q++ {
			if m.open(q) {
				m.gaps++
			}
		}
		for q := m.high + 1; q < newLo; q++ { // never in the window
			m.gaps++
		}
		m.high = seq
		m.got[seq] = true
		for _, s := range []map[uint64]bool{m.got, m.waited, m.settled} {
			for q := range s {
				if q < newLo {
					delete(s, q)
				}
			}
		}
	case m.high-seq >= m.w, seq >= m.first && m.got[seq]:
		m.countOpen()
		m.restarts++
		m.reset(seq)
	case seq < m.first:
	default:
		m.got[seq] = true
	}
	m.final = m.final || final
}

func (m *seqModel) harvest() {
	if !m.known {
		return
	}
	for q := m.lo(); q <= m.high; q++ {
		open := m.open(q)
		late := open && m.waited[q]
		if late {
			m.gaps++
			m.settled[q] = true
		}
		m.waited[q] = open && !late
	}
	if m.final {
		m.countOpen()
		m.known, m.final = false, false
	}
}

// TestSenderWindowModel: over random streams of one sender (lost,
// reordered, duplicated and restarting sequences, jumps, final datagrams,
// harvests) and windows of one to four words, the masks count exactly the
// gaps and restarts of the set model, step by step.
func TestSenderWindowModel(t *testing.T) {
	for words := 1; words <= 4; words++ {
		rng := rand.New(rand.NewPCG(uint64(words), 7))
		for stream := range 200 {
			s := senders{words: words}
			m := seqModel{w: uint64(words) * 64}
			next := uint64(1 + rng.IntN(5))
			var pending []uint64
			for step := range 2000 {
				switch r := rng.IntN(1000); {
				case r < 5:
					s.harvest(0)
					m.harvest()
				case r < 8:
					next = 1 + uint64(rng.IntN(3)) // a restart
				case r < 10:
					next += uint64(rng.IntN(int(m.w) * 2)) // a jump
				case r < 12 && len(pending) > 0: // a duplicate
					q := pending[rng.IntN(len(pending))]
					pending = append(pending, q)
				}
				if rng.IntN(10) > 0 { // a tenth are lost
					pending = append(pending, next)
				}
				next++
				// Merge one of the pending, reordering within a window's
				// span or more.
				for len(pending) > 0 && (len(pending) > rng.IntN(int(m.w)+8) || rng.IntN(3) == 0) {
					i := rng.IntN(len(pending))
					q := pending[i]
					pending = append(pending[:i], pending[i+1:]...)
					final := rng.IntN(500) == 0
					s.observe(1, q, final, 1)
					m.observe(q, final)
					if s.gaps != m.gaps || s.restarts != m.restarts {
						t.Fatalf("words %d stream %d step %d seq %d: masks count %d gaps %d restarts, model %d %d",
							words, stream, step, q, s.gaps, s.restarts, m.gaps, m.restarts)
					}
				}
			}
		}
	}
}

// TestFullSenderTableSweepsRarely: new senders beyond MaxSenders evict one
// sender each, and the full table is walked for idle ones at most once a
// second, not once per new sender.
func TestFullSenderTableSweepsRarely(t *testing.T) {
	s := senders{words: 1}
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
