// This file owns AddBatch: adding a batch of spans with look-ahead, so that
// the cache misses of spans still to come overlap the work on this one.

package aggregate

import (
	"sync/atomic"
	"unsafe"
)

// AddBatch adds spans in order, like a call of Add for each. Under a
// cardinality attack (Attacked) every span brings strings never read before,
// in a slot last written on another core; so that those cache misses
// overlap instead of queueing one by one, AddBatch asks for each span's
// slot 2*prefetchAhead spans ahead and for its strings prefetchAhead spans
// ahead, with the CPU's prefetch instructions where it has them (amd64);
// elsewhere it reads the batch in three passes — the spans' string headers,
// then the strings' first bytes, then the aggregation. Off attack, on
// amd64, it defers the record of each recent-cache hit (see addHits) so
// that the miss on its sketch bin overlaps the next spans' lookups.
//
// It returns how many spans it added: all of them, unless the flag given
// to SetHalt was set, which stops it before the next span that is not a
// recent-cache hit (under attack, before the next span).
func (t *Table) AddBatch(spans []*Record) int {
	switch {
	case !t.Attacked() && havePrefetch:
		return t.addHits(spans)
	case !t.Attacked():
		return t.addPlain(spans)
	case havePrefetch:
		return t.addPrefetching(spans)
	default:
		return t.addTouching(spans)
	}
}

// SetHalt gives the table a flag that, once set, makes AddBatch return
// early. Only spans that miss the recent-span cache can be costly (a new
// key of long strings takes milliseconds), so off attack only they look at
// it: a hit pays nothing for it. Under attack, when most spans miss, every
// span looks.
func (t *Table) SetHalt(halt *atomic.Bool) { t.halt = halt }

// halted reports whether the SetHalt flag is set.
func (t *Table) halted() bool { return t.halt != nil && t.halt.Load() }

// recordLag is how many spans behind its lookup addHits records a span: the
// time its sketch bin has to arrive (see BenchmarkConsumer/SteadyState).
const recordLag = 8

// pendingHit is a span whose entry addHits found, waiting to be recorded.
type pendingHit struct {
	e    *Entry
	s    *Record
	bin  int
	zero bool
}

func (p *pendingHit) record() { p.e.recordBin(p.s.Duration, p.bin, p.zero, p.s.Error, p.s.TopLevel) }

// addHits is AddBatch off attack with prefetch instructions. A span the
// recent-span cache finds (most of them, in a steady state) is recorded
// recordLag spans later, once the bin of its sketch that it increments —
// a miss to L3 in a table of a few hundred sketches — was prefetched.
// Deferring the record changes no outcome: the cache finds only entries
// hit earlier in the interval, which nothing in Add recycles or resets
// (only an idle entry is recycled, and only Rotate and Clear reset), and
// records into an entry commute. Spans that miss the cache go through
// addKey at once. An attack hands the rest of the batch, pending records
// first, to AddBatch's look-ahead for attacks.
func (t *Table) addHits(spans []*Record) int {
	var q [recordLag]pendingHit
	var head, tail uint // q[head%recordLag : tail%recordLag] are pending
	for i, s := range spans {
		if t.budgets != nil && t.attacked {
			for ; head != tail; head++ {
				q[head%recordLag].record()
			}
			return i + t.AddBatch(spans[i:]) // with its look-ahead for attacks
		}
		e := t.recentEntry(s)
		if e == nil {
			// Strings the tracer built for this span: the next ones likely
			// are too, and the cache by contents reads their bytes, cold
			// (BenchmarkConsumer/ClientPeerTagsFreshStrings).
			if j := i + prefetchAhead; j < len(spans) {
				prefetchStrings(spans[j])
			}
			e = t.contentEntry(s)
		}
		if e == nil {
			if t.halted() {
				for ; head != tail; head++ {
					q[head%recordLag].record()
				}
				return i
			}
			t.addKey(s, t.keptPeers(s), t.budgets != nil)
			continue
		}
		if tail-head == recordLag {
			q[head%recordLag].record()
			head++
		}
		b, zero := bin(durationValue(s.Duration))
		if sk := e.sketch(s.Error); sk != nil && !zero {
			if c := sk.binAt(b); c != nil {
				prefetch(unsafe.Pointer(c))
			}
		}
		q[tail%recordLag] = pendingHit{e: e, s: s, bin: b, zero: zero}
		tail++
	}
	for ; head != tail; head++ {
		q[head%recordLag].record()
	}
	return len(spans)
}

// addPlain is AddBatch off attack without prefetch instructions: Add span
// by span. As in addHits, a halt stops it only at a span the recent-span
// cache misses.
func (t *Table) addPlain(spans []*Record) int {
	for i, s := range spans {
		if t.halted() && t.cachedEntry(s) == nil {
			return i
		}
		t.Add(s)
	}
	return len(spans)
}

// addPrefetching is AddBatch under attack with prefetch instructions.
func (t *Table) addPrefetching(spans []*Record) int {
	for i := range min(len(spans), 2*prefetchAhead) {
		prefetchRecord(spans[i])
	}
	for i := range min(len(spans), prefetchAhead) {
		prefetchStrings(spans[i])
	}
	for i, s := range spans {
		if j := i + 2*prefetchAhead; j < len(spans) {
			prefetchRecord(spans[j])
		}
		if j := i + prefetchAhead; j < len(spans) {
			prefetchStrings(spans[j])
		}
		if t.halted() {
			return i
		}
		t.Add(s)
	}
	return len(spans)
}

// addTouching is AddBatch under attack without prefetch instructions: loads
// of the batch's string headers, then of the strings' first and last bytes,
// in passes before the aggregation.
func (t *Table) addTouching(spans []*Record) int {
	var p uintptr
	for _, s := range spans {
		p ^= touchFields(s)
	}
	x := byte(p)
	for _, s := range spans {
		x ^= touch(s)
	}
	t.lookAhead ^= x
	for i, s := range spans {
		if t.halted() {
			return i
		}
		t.Add(s)
	}
	return len(spans)
}

// prefetchAhead is how many spans ahead AddBatch asks for a span's strings
// (and twice that for the span itself; see BenchmarkConsumer/Adversarial).
const prefetchAhead = 8

// touchFields loads the addresses of the span's most variable strings and
// folds them together; touch loads their bytes. See Table.AddBatch.
func touchFields(s *Record) uintptr {
	return uintptr(unsafe.Pointer(unsafe.StringData(s.Resource))) ^
		uintptr(unsafe.Pointer(unsafe.StringData(s.Service))) ^
		uintptr(unsafe.Pointer(unsafe.StringData(s.Name))) ^
		uintptr(unsafe.Pointer(unsafe.StringData(s.PeerTags[0]))) ^
		uintptr(unsafe.Pointer(unsafe.StringData(s.PeerTags[2])))
}

// touch: see touchFields.
func touch(s *Record) byte {
	x := edge(s.Resource) ^ edge(s.Service) ^ edge(s.Name) ^ edge(s.HTTPEndpoint)
	for i := range min(int(s.NumPeerTags), len(s.PeerTags)) {
		x ^= edge(s.PeerTags[i])
	}
	return x
}

// edge is the first and last byte of v folded together (0 if empty).
func edge(v string) byte {
	if n := len(v); n > 0 {
		return v[0] ^ v[n-1]
	}
	return 0
}
