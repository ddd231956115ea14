// This file owns the Table: its open-addressing index of entries, adding a
// span by its key, recycling at the cap, and the interval (Touched, Rotate,
// Clear). The key bytes, the recent-span caches, AddBatch and the collapsed
// path have files of their own.

package aggregate

import (
	"encoding/binary"
	"math/rand/v2"
	"sync/atomic"
)

// DefaultMaxEntries is the default table cap. It matches dd-trace-java's
// default aggregate table size; 2048 groups per 10 s interval cover the
// working set of a large service.
const DefaultMaxEntries = 2048

// Table aggregates spans into entries keyed by their label fields. It is owned
// by one goroutine (the consumer); it has no locks and is not safe for
// concurrent use.
type Table struct {
	maxEntries int

	entries []*Entry // every live entry, in creation order
	slots   []slot   // open addressing with linear probing over entries
	mask    uint64

	epoch  uint32 // current interval; an entry with epoch == t.epoch was hit in it
	cursor int    // next recycling candidate in entries
	noIdle bool   // a full cursor sweep found no idle entry this interval

	overflow *Entry // catch-all at the cap: lazily created, never indexed

	keyBuf []byte   // scratch: seed, then the key bytes of the span being added
	kept   []string // scratch: a span's kept peer tags, in the tracer's order
	peers  []string // scratch: a span's kept peer tags, sorted
	// quantized holds the peer tags whose IP addresses were quantized, so
	// that each is made once (quantizeTag); qbuf is its scratch.
	quantized map[string]string
	qbuf      []byte

	halt          *atomic.Bool        // see SetHalt; nil: never
	budgets       *budgets            // nil: no cardinality limits
	peerKeys      map[string]struct{} // nil: every peer-tag key is kept
	collapsedSpan Record              // scratch: a span with collapsed fields
	lastCollapsed collapsedMemo
	attacked      bool // the last span collapsed: admit before hashing
	lookAhead     byte // what AddBatch's look-ahead loads read: kept so they are not optimised away
	keepMemo      [MaxInlinePeerTags]struct {
		key  string
		keep bool
	}
	// tagMemo is keepPeers' last tag at each position and what became of
	// it: a tracer's constant tags skip the key filter and the IP scan
	// (see BenchmarkConsumer/HighCardinalityPeer).
	tagMemo [MaxInlinePeerTags]struct {
		tag, out string
		keep     bool
	}

	recycled   uint64
	overflowed uint64
	// collapsed counts values replaced, per field. Spans under attack
	// mostly repeat one set of over-budget fields, so admit counts a run of
	// spans with the same set (runMask, runLen), one increment a span, and
	// adds the run to the per-field counts when the set changes.
	collapsed      [NumFields]uint64
	runMask        uint16
	runLen         uint64
	collapsedSpans uint64

	// The recent-span caches, the bulk of a Table, after the small fields:
	// by the identity of a span's strings, and by their contents.
	recent spanCache
	seen   spanCache
}

type slot struct {
	hash uint64
	idx  int32 // position in entries + 1; 0 is an empty slot
}

// MaxEntriesLimit is the largest table cap: the slot index is allocated up
// front in proportion to the cap.
const MaxEntriesLimit = 1 << 20

// NewTable returns a table of at most maxEntries entries (DefaultMaxEntries
// when maxEntries <= 0, MaxEntriesLimit when above it), seeded with a random
// per-process hash seed.
func NewTable(maxEntries int) *Table {
	if maxEntries <= 0 {
		maxEntries = DefaultMaxEntries
	}
	maxEntries = min(maxEntries, MaxEntriesLimit)
	n := 16
	for n < 2*maxEntries { // load factor <= 1/2 keeps probe chains short
		n <<= 1
	}
	t := &Table{
		maxEntries: maxEntries,
		slots:      make([]slot, n),
		mask:       uint64(n - 1),
		epoch:      1,
		// Random per table (so per process): keys cannot be precomputed to collide.
		keyBuf: binary.LittleEndian.AppendUint64(make([]byte, 0, 512), rand.Uint64()),
		kept:   make([]string, 0, MaxInlinePeerTags),
		peers:  make([]string, 0, MaxInlinePeerTags),
	}
	return t
}

// MaxEntries is the table cap.
func (t *Table) MaxEntries() int { return t.maxEntries }

// Len is the number of entries (not counting the overflow entry).
func (t *Table) Len() int { return len(t.entries) }

// Recycled is the number of entries reused for a new key at the cap.
func (t *Table) Recycled() uint64 { return t.recycled }

// Overflowed is the number of spans folded into the overflow entry.
func (t *Table) Overflowed() uint64 { return t.overflowed }

// Add counts one span in the entry of its key, creating the entry for a new
// key. It never loses a span: at the cap the span goes to the overflow entry.
func (t *Table) Add(s *Record) {
	if t.budgets != nil && t.attacked {
		// The last span collapsed: under a cardinality attack most spans
		// do, and their fresh strings miss every cache, so decide the
		// budgets first. Deciding a key admitted earlier in the interval
		// changes nothing (its values are in the sets already).
		kept := t.keptPeers(s)
		if rejected := t.admit(s, kept); rejected != 0 {
			t.addCollapsed(s, rejected, kept)
			return
		}
		t.attacked = false
		if e := t.cachedEntry(s); e != nil {
			e.record(s.Duration, s.Error, s.TopLevel)
			return
		}
		t.addKey(s, kept, false)
		return
	}
	// Spans of a key repeat its strings, at the same addresses when the
	// tracer reuses them (constants, route templates), else at new ones:
	// the recent-span caches find their entry without encoding or hashing
	// the key.
	if e := t.cachedEntry(s); e != nil {
		e.record(s.Duration, s.Error, s.TopLevel)
		return
	}
	t.addKey(s, t.keptPeers(s), t.budgets != nil)
}

// addKey counts s in the entry of its raw key; kept are its kept peer tags
// in the tracer's order. With checkBudgets, a key not yet admitted in this
// interval goes through the budgets first.
func (t *Table) addKey(s *Record, kept []string, checkBudgets bool) {
	b := t.encodeKey(s, t.sortedPeers(kept))
	h := hash(b)
	e := t.lookup(h, b[seedLen:])
	// Budgets are checked once per key per interval: a hit on an entry
	// already admitted this interval costs nothing more.
	if checkBudgets && (e == nil || e.epoch != t.epoch) {
		if rejected := t.admit(s, kept); rejected != 0 {
			t.attacked = true
			t.addCollapsed(s, rejected, kept)
			return
		}
	}
	if e == nil {
		e = t.insert(h, b[seedLen:])
	}
	e.epoch = t.epoch
	e.record(s.Duration, s.Error, s.TopLevel)
	t.remember(s, e)
}

func (t *Table) lookup(h uint64, key []byte) *Entry {
	for i := h & t.mask; ; i = (i + 1) & t.mask {
		sl := t.slots[i]
		if sl.idx == 0 {
			return nil
		}
		if sl.hash == h {
			if e := t.entries[sl.idx-1]; e.matches(key) {
				return e
			}
		}
	}
}

// insert creates (or recycles) the entry for a new key, or returns the
// overflow entry when the table is at its cap and every entry is in use.
func (t *Table) insert(h uint64, key []byte) *Entry {
	var (
		e   *Entry
		idx int32
	)
	if len(t.entries) < t.maxEntries {
		e = newTableEntry()
		t.entries = append(t.entries, e)
		idx = int32(len(t.entries))
	} else if i := t.idleEntry(); i >= 0 {
		e = t.entries[i]
		idx = int32(i + 1)
		t.unlink(e.hash, idx)
		t.recycled++
	} else {
		t.overflowed++
		return t.overflowEntry()
	}
	e.hash = h
	e.setKey(key)
	e.gen++
	for i := h & t.mask; ; i = (i + 1) & t.mask {
		if t.slots[i].idx == 0 {
			t.slots[i] = slot{hash: h, idx: idx}
			return e
		}
	}
}

// idleEntry returns the index of an entry without a hit this interval, or -1.
// The cursor only moves forward and every entry it passes is in use until
// the interval ends, so one interval costs at most two sweeps.
func (t *Table) idleEntry() int {
	if t.noIdle {
		return -1
	}
	n := len(t.entries)
	for range n {
		i := t.cursor
		t.cursor++
		if t.cursor == n {
			t.cursor = 0
		}
		if t.entries[i].epoch != t.epoch {
			return i
		}
	}
	t.noIdle = true
	return -1
}

// unlink removes the slot pointing at idx, shifting later slots of the probe
// chain back so lookups never need tombstones.
func (t *Table) unlink(h uint64, idx int32) {
	i := h & t.mask
	for t.slots[i].idx != idx {
		if t.slots[i].idx == 0 {
			panic("BUG: aggregate: unlinking an entry that is not indexed")
		}
		i = (i + 1) & t.mask
	}
	for j := (i + 1) & t.mask; t.slots[j].idx != 0; j = (j + 1) & t.mask {
		home := t.slots[j].hash & t.mask
		// The slot at j stays if its home lies cyclically in (i, j].
		if i <= j {
			if i < home && home <= j {
				continue
			}
		} else if i < home || home <= j {
			continue
		}
		t.slots[i] = t.slots[j]
		i = j
	}
	t.slots[i] = slot{}
}

// tableEntry is a table's entry with its two sketches next to it: a hit
// reads the entry and then its sketch, and a sketch allocated apart is one
// more dependent cache miss per span when the consumer's caches are cold
// (BenchmarkPaced in bench/peer).
type tableEntry struct {
	Entry
	ok, err Sketch
}

// newTableEntry returns an entry whose Ok and Err are its own tableEntry's.
// A table never copies an entry, so they stay its own.
func newTableEntry() *Entry {
	te := new(tableEntry)
	te.Ok, te.Err = &te.ok, &te.err
	return &te.Entry
}

func (t *Table) overflowEntry() *Entry {
	if t.overflow == nil {
		t.overflow = newTableEntry()
		labels := t.overflow.labels()
		for f := range labels {
			labels[f] = BlockedValue
		}
	}
	return t.overflow
}

// Touched appends to dst every entry hit in the current interval, the
// overflow entry last, and returns the extended slice.
func (t *Table) Touched(dst []*Entry) []*Entry {
	for _, e := range t.entries {
		if e.epoch == t.epoch {
			dst = append(dst, e)
		}
	}
	if t.overflow != nil && t.overflow.Hits > 0 {
		dst = append(dst, t.overflow)
	}
	return dst
}

// Rotate ends the interval: every entry hit in it is reset in place (its
// memory is kept for the next interval) and a new interval begins.
func (t *Table) Rotate() {
	for _, e := range t.entries {
		if e.epoch == t.epoch {
			e.reset()
		}
	}
	if t.overflow != nil {
		t.overflow.reset()
	}
	// A slot hits only once its entry is hit again in the new interval
	// (its epoch): emptied now, the caches keep none of the last
	// interval's strings alive, nor count them against recentPinBytes
	// (keepPeers' per-position memos pin at most one tag each).
	// What it costs: a key whose spans come with two string identities
	// finds the second by contents, no longer by identity, once the first
	// has refreshed the entry.
	t.forgetRecent()
	t.nextEpoch()
}

// nextEpoch starts a new interval: entries and budget decisions of the
// last one no longer count as touched or decided.
func (t *Table) nextEpoch() {
	t.epoch++
	t.noIdle = false
	if t.budgets != nil {
		t.budgets.forget()
	}
}

// Clear discards every entry (the ClearSignal).
func (t *Table) Clear() {
	clear(t.entries)
	t.entries = t.entries[:0]
	clear(t.slots)
	t.forgetRecent()
	t.overflow = nil
	t.cursor = 0
	t.nextEpoch()
}
