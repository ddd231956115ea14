package aggregate

import (
	"encoding/binary"
	"math/rand/v2"
	"strings"
	"unsafe"

	"github.com/cespare/xxhash/v2"
)

// DefaultMaxEntries is the default table cap. It matches dd-trace-java's
// default aggregate table size; 2048 groups per 10 s interval cover the
// working set of a large service.
const DefaultMaxEntries = 2048

// seedLen is the length of the per-process seed that prefixes the hashed key
// bytes, so keys cannot be pre-computed to collide.
const seedLen = 8

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

	// The recent-span cache (~250 KiB), after the small fields.
	recent     [recentSpans]recentSlot
	recentTags [recentSpans]uint32 // 0: empty slot
	recentLRU  [recentSets]uint8   // per set: the way to replace next
}

type slot struct {
	hash uint64
	idx  int32 // position in entries + 1; 0 is an empty slot
}

// NewTable returns a table of at most maxEntries entries (DefaultMaxEntries
// when maxEntries <= 0), seeded with a random per-process hash seed.
func NewTable(maxEntries int) *Table {
	if maxEntries <= 0 {
		maxEntries = DefaultMaxEntries
	}
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
		if e := t.recentEntry(s); e != nil {
			e.record(s.Duration, s.Error, s.TopLevel)
			return
		}
		t.addKey(s, kept, false)
		return
	}
	// Spans whose strings are the tracer's constants or route templates
	// arrive with the same string data again and again: the recent-span
	// cache finds their entry without encoding or hashing the key.
	if e := t.recentEntry(s); e != nil {
		e.record(s.Duration, s.Error, s.TopLevel)
		return
	}
	t.addKey(s, t.keptPeers(s), t.budgets != nil)
}

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
func (t *Table) AddBatch(spans []*Record) {
	switch {
	case !t.Attacked() && havePrefetch:
		t.addHits(spans)
	case !t.Attacked():
		for _, s := range spans {
			t.Add(s)
		}
	case havePrefetch:
		t.addPrefetching(spans)
	default:
		t.addTouching(spans)
	}
}

// recordLag is how many spans behind its lookup addHits records a span: the
// time its sketch bin has to arrive.
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
func (t *Table) addHits(spans []*Record) {
	var q [recordLag]pendingHit
	var head, tail uint // q[head%recordLag : tail%recordLag] are pending
	for i, s := range spans {
		if t.budgets != nil && t.attacked {
			for ; head != tail; head++ {
				q[head%recordLag].record()
			}
			t.AddBatch(spans[i:]) // with its look-ahead for attacks
			return
		}
		e := t.recentEntry(s)
		if e == nil {
			t.addKey(s, t.keptPeers(s), t.budgets != nil)
			continue
		}
		if tail-head == recordLag {
			q[head%recordLag].record()
			head++
		}
		b, zero := bin(float64(s.Duration))
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
}

// addPrefetching is AddBatch under attack with prefetch instructions.
func (t *Table) addPrefetching(spans []*Record) {
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
		t.Add(s)
	}
}

// addTouching is AddBatch under attack without prefetch instructions: loads
// of the batch's string headers, then of the strings' first and last bytes,
// in passes before the aggregation.
func (t *Table) addTouching(spans []*Record) {
	var p uintptr
	for _, s := range spans {
		p ^= touchFields(s)
	}
	x := byte(p)
	for _, s := range spans {
		x ^= touch(s)
	}
	t.lookAhead ^= x
	for _, s := range spans {
		t.Add(s)
	}
}

// prefetchAhead is how many spans ahead AddBatch asks for a span's strings
// (and twice that for the span itself).
const prefetchAhead = 8

// Attacked reports whether the last span added had a value over its
// cardinality budget: under an attack most spans do.
func (t *Table) Attacked() bool { return t.attacked }

// recentEntry returns the entry the recent-span cache holds for s's key,
// or nil. The tags, 4 KiB that stay in the L1 cache, turn away most misses
// before a slot (a few cache lines) or its entry is read.
func (t *Table) recentEntry(s *Record) *Entry {
	i, tag := recentIndex(s)
	for w := range uint(recentWays) {
		if t.recentTags[i+w] != tag {
			continue
		}
		slot := &t.recent[i+w]
		if !slot.span.sameKey(s) {
			continue
		}
		if e := slot.e; e.epoch == t.epoch && e.gen == slot.gen {
			if lru := &t.recentLRU[i/recentWays]; *lru == uint8(w) {
				*lru = uint8(w ^ 1) // the other way is now the older
			}
			return e
		}
	}
	return nil
}

// cacheable reports whether s's key, counted in e, fits a recentKey (and
// is worth remembering: the overflow entry's key is not s's).
func (t *Table) cacheable(s *Record, e *Entry) bool {
	return e != t.overflow && s.NumPeerTags <= recentPeers && s.ExtraPeerTags == nil
}

// remember puts s's key, counted in e, in the recent-span cache.
func (t *Table) remember(s *Record, e *Entry) {
	if t.cacheable(s, e) {
		i, tag := recentIndex(s)
		lru := &t.recentLRU[i/recentWays]
		w := uint(*lru)
		*lru = uint8(w ^ 1)
		slot := &t.recent[i+w]
		slot.span.setKey(s)
		slot.e, slot.gen = e, e.gen
		t.recentTags[i+w] = tag
	}
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

// recentSpans is the size of the recent-span cache, in sets of recentWays
// slots, the least recently used of which a new key replaces. Each slot
// holds one span's label strings (~230 B): 230 KiB a table, pinning at most
// 1024 spans' strings of the tracer. Direct-mapped, the same 1024 slots
// found 91 % of bench.SteadyState's spans (200 keys; keys that shared a slot
// evicted each other); two ways find 96.5 %. The LRU bit per set assumes two
// ways.
const (
	recentSpans = 1024
	recentWays  = 2
	recentSets  = recentSpans / recentWays
)

// recentPeers is how many peer tags a cached span may carry.
const recentPeers = 4

// recentSlot maps one span's label fields (raw, or collapsed by the budgets)
// to the entry they hit. It is validated by the identity of the fields'
// string data (see same), the entry's key generation (recycling changes it)
// and the entry's interval (budgets are decided per interval).
type recentSlot struct {
	span recentKey
	e    *Entry
	gen  uint32
}

// recentKey is the key part of a Record, peer tags in the tracer's order.
type recentKey struct {
	fields         [9]string
	peers          [recentPeers]string
	numPeers       uint8
	flags          uint8
	httpStatusCode uint32
}

func spanFlags(s *Record) uint8 {
	f := uint8(traceRoot(s))
	if s.Synthetics {
		f |= 4
	}
	return f
}

func (k *recentKey) setKey(s *Record) {
	k.fields = [9]string{s.Service, s.Name, s.Resource, s.Type, s.SpanKind,
		s.HTTPMethod, s.HTTPEndpoint, s.GRPCStatusCode, s.ServiceSource}
	copy(k.peers[:], s.PeerTags[:s.NumPeerTags])
	k.numPeers, k.flags, k.httpStatusCode = s.NumPeerTags, spanFlags(s), s.HTTPStatusCode
}

func (k *recentKey) sameKey(s *Record) bool {
	if k.httpStatusCode != s.HTTPStatusCode || k.numPeers != s.NumPeerTags || k.flags != spanFlags(s) ||
		s.NumPeerTags > recentPeers || s.ExtraPeerTags != nil ||
		!same(k.fields[2], s.Resource) || !same(k.fields[0], s.Service) || !same(k.fields[1], s.Name) ||
		!same(k.fields[3], s.Type) || !same(k.fields[4], s.SpanKind) || !same(k.fields[5], s.HTTPMethod) ||
		!same(k.fields[6], s.HTTPEndpoint) || !same(k.fields[7], s.GRPCStatusCode) || !same(k.fields[8], s.ServiceSource) {
		return false
	}
	for i := range s.NumPeerTags {
		if !same(k.peers[i], s.PeerTags[i]) {
			return false
		}
	}
	return true
}

// same reports whether a and b are the same string data: equal length and
// address. The cache holds its strings, so their memory cannot be reused
// while cached, and Go strings are immutable: the same data means equal
// contents. Equal contents at another address (an empty string may have
// any address) is a miss — such a span was not cached in this set
// anyway (see recentIndex) — and a miss never reads the bytes of a string
// cached long ago.
func same(a, b string) bool {
	return len(a) == len(b) && unsafe.StringData(a) == unsafe.StringData(b)
}

// recentIndex picks a set (the index of its first slot) from the identity of
// the span's most variable strings (the same string data lands in the same
// set) and a tag for the slot from other bits of the same hash. Only the
// set choice depends on addresses; a hit is decided by the fields
// themselves (sameKey).
func recentIndex(s *Record) (uint, uint32) {
	h := addr(s.Resource)*0x9E3779B97F4A7C15 ^
		addr(s.Name)*0xC2B2AE3D27D4EB4F ^
		addr(s.Service)*0x165667B19E3779F9 ^
		uint64(len(s.Resource))
	if s.NumPeerTags > 0 {
		h ^= addr(s.PeerTags[s.NumPeerTags-1]) * 0x27D4EB2F165667C5
	}
	return uint(h>>40) % recentSets * recentWays, uint32(h>>8) | 1
}

// addr is the address of v's bytes (in 64 bits on every platform).
func addr(v string) uint64 { return uint64(uintptr(unsafe.Pointer(unsafe.StringData(v)))) }

// addCollapsed counts s in the entry of its key with the fields in rejected
// replaced by BlockedValue; kept holds its kept peer tags in the tracer's
// order, over-budget ones already replaced. Under attack the collapsed key
// repeats (the varying fields all read tracer_blocked_value, the others keep
// the tracer's strings): the last collapsed key is checked first, field by
// field against s, then the recent-span cache; only a new collapsed key is
// sorted, encoded and hashed.
func (t *Table) addCollapsed(s *Record, rejected uint16, kept []string) {
	m := &t.lastCollapsed
	e := m.e
	if e == nil || e.epoch != t.epoch || e.gen != m.gen || !m.matches(s, rejected, kept) {
		c := t.collapse(s, rejected, kept)
		if e = t.recentEntry(c); e == nil {
			b := t.encodeKey(c, t.sortedPeers(kept))
			h := hash(b)
			if e = t.lookup(h, b[seedLen:]); e == nil {
				e = t.insert(h, b[seedLen:])
			}
			e.epoch = t.epoch
			t.remember(c, e)
		}
		m.e = nil
		if t.cacheable(c, e) {
			m.key.setKey(c)
			m.rejected, m.e, m.gen = rejected, e, e.gen
		}
	}
	e.record(s.Duration, s.Error, s.TopLevel)
}

// collapsedMemo is the last collapsed key and its entry.
type collapsedMemo struct {
	key      recentKey
	rejected uint16
	e        *Entry
	gen      uint32
}

// matches reports whether s with the fields in rejected collapsed and the
// peer tags kept is the memo's key (compared by identity, like sameKey).
func (m *collapsedMemo) matches(s *Record, rejected uint16, kept []string) bool {
	k := &m.key
	if m.rejected != rejected || int(k.numPeers) != len(kept) || k.httpStatusCode != s.HTTPStatusCode ||
		k.flags != spanFlags(s) ||
		!sameOr(k.fields[0], s.Service, rejected&(1<<FieldService)) ||
		!sameOr(k.fields[1], s.Name, rejected&(1<<FieldOperation)) ||
		!sameOr(k.fields[2], s.Resource, rejected&(1<<FieldResource)) ||
		!sameOr(k.fields[3], s.Type, rejected&(1<<FieldType)) ||
		!sameOr(k.fields[4], s.SpanKind, rejected&(1<<FieldSpanKind)) ||
		!sameOr(k.fields[5], s.HTTPMethod, rejected&(1<<FieldHTTPMethod)) ||
		!sameOr(k.fields[6], s.HTTPEndpoint, rejected&(1<<FieldHTTPEndpoint)) ||
		!sameOr(k.fields[7], s.GRPCStatusCode, rejected&(1<<FieldGRPCStatusCode)) ||
		!sameOr(k.fields[8], s.ServiceSource, rejected&(1<<FieldServiceSource)) {
		return false
	}
	for i, p := range kept { // len(kept) == numPeers <= recentPeers
		if !same(k.peers[i], p) {
			return false
		}
	}
	return true
}

// sameOr is same(k, v), or same(k, BlockedValue) when v was collapsed.
func sameOr(k, v string, collapsed uint16) bool {
	if collapsed != 0 {
		v = BlockedValue
	}
	return same(k, v)
}

// keptPeers returns the span's peer tags whose key is kept, in the
// tracer's order, in t.kept.
func (t *Table) keptPeers(s *Record) []string {
	p := t.kept[:0]
	if t.peerKeys == nil {
		p = append(p, s.PeerTags[:s.NumPeerTags]...)
		p = append(p, s.ExtraPeerTags...)
	} else {
		p = t.keepPeers(p, s.PeerTags[:s.NumPeerTags])
		p = t.keepPeers(p, s.ExtraPeerTags)
	}
	t.kept = p
	return p
}

// sortedPeers returns kept as a sorted set in t.peers: the key treats peer
// tags as a set, whatever order the tracer gave.
func (t *Table) sortedPeers(kept []string) []string {
	p := sortSet(append(t.peers[:0], kept...))
	t.peers = p
	return p
}

func (t *Table) keepPeers(dst, tags []string) []string {
	for i, tag := range tags {
		if t.keepPeer(i, tag) {
			dst = append(dst, tag)
		}
	}
	return dst
}

// keepPeer reports whether tag's key is kept. Spans of one client repeat
// their tag layout, so the decision for the key at each position is
// remembered and checked with one prefix comparison.
func (t *Table) keepPeer(i int, tag string) bool {
	if i < len(t.keepMemo) {
		m := &t.keepMemo[i]
		if n := len(m.key); m.key != "" && len(tag) > n && tag[n] == ':' && tag[:n] == m.key {
			return m.keep
		}
	}
	k := tag
	if j := strings.IndexByte(tag, ':'); j >= 0 {
		k = tag[:j]
	}
	_, keep := t.peerKeys[k]
	if i < len(t.keepMemo) && k != tag {
		// Pins at most one tracer string per position; cloning would
		// allocate whenever layouts alternate.
		t.keepMemo[i].key, t.keepMemo[i].keep = k, keep
	}
	return keep
}

// sortSet sorts p in place and removes duplicates.
func sortSet(p []string) []string {
	for i := 1; i < len(p); i++ { // insertion sort: a handful of tags
		for j := i; j > 0 && p[j] < p[j-1]; j-- {
			p[j], p[j-1] = p[j-1], p[j]
		}
	}
	if len(p) > 1 {
		w := 1
		for i := 1; i < len(p); i++ {
			if p[i] != p[w-1] {
				p[w] = p[i]
				w++
			}
		}
		clear(p[w:])
		p = p[:w]
	}
	return p
}

func traceRoot(s *Record) Trilean {
	if s.TraceRoot {
		return True
	}
	return False
}

// appendField appends s with a uvarint length prefix: unlike a separator, a
// prefix makes the key bytes injective, so equal bytes mean equal fields.
func appendField(b []byte, s string) []byte {
	if len(s) < 0x80 {
		b = append(b, byte(len(s)))
	} else {
		b = binary.AppendUvarint(b, uint64(len(s)))
	}
	return append(b, s...)
}

// encodeKey writes the span's key bytes after the seed prefix of t.keyBuf and
// returns them (seed included). The bytes are injective in the key fields,
// so one byte comparison replaces a comparison per field.
func (t *Table) encodeKey(s *Record, peers []string) []byte {
	b := t.keyBuf[:seedLen]
	b = appendField(b, s.Service)
	b = appendField(b, s.Name)
	b = appendField(b, s.Resource)
	b = appendField(b, s.Type)
	b = appendField(b, s.SpanKind)
	b = appendField(b, s.HTTPMethod)
	b = appendField(b, s.HTTPEndpoint)
	b = appendField(b, s.GRPCStatusCode)
	b = appendField(b, s.ServiceSource)
	b = binary.LittleEndian.AppendUint32(b, s.HTTPStatusCode)
	flags := byte(traceRoot(s))
	if s.Synthetics {
		flags |= 4
	}
	b = append(b, flags)
	b = binary.AppendUvarint(b, uint64(len(peers)))
	for _, p := range peers {
		b = appendField(b, p)
	}
	t.keyBuf = b
	return b
}

// hash is xxhash of the key bytes behind the per-process seed: one pass over
// contiguous bytes beats a digest call per field, and the one-shot Sum64
// skips the streaming Digest's buffering.
func hash(b []byte) uint64 { return xxhash.Sum64(b) }

// matches reports whether e holds the key encoded in b (without the seed).
func (e *Entry) matches(key []byte) bool { return e.key == string(key) }

// matchesSpan compares e's key with the fields of s field by field (no
// encoding). It is exact for any entry, including a recycled one.
func (e *Entry) matchesSpan(s *Record, peers []string) bool {
	k := &e.Key
	if k.Service != s.Service || k.Name != s.Name || k.Resource != s.Resource ||
		k.Type != s.Type || k.SpanKind != s.SpanKind || k.HTTPMethod != s.HTTPMethod ||
		k.HTTPEndpoint != s.HTTPEndpoint || k.GRPCStatusCode != s.GRPCStatusCode ||
		k.ServiceSource != s.ServiceSource || k.HTTPStatusCode != s.HTTPStatusCode ||
		k.Synthetics != s.Synthetics || k.IsTraceRoot != traceRoot(s) || len(k.PeerTags) != len(peers) {
		return false
	}
	for i, p := range peers {
		if k.PeerTags[i] != p {
			return false
		}
	}
	return true
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
		e = new(Entry)
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

// setKey gives e the key encoded in key. One string holds every field and
// the fields are substrings of it: the entry owns its memory (it never pins a
// tracer's larger buffers) for one allocation per new key.
func (e *Entry) setKey(key []byte) {
	e.key = string(key)
	d := keyDecoder{s: e.key}
	k := &e.Key
	k.Service = d.field()
	k.Name = d.field()
	k.Resource = d.field()
	k.Type = d.field()
	k.SpanKind = d.field()
	k.HTTPMethod = d.field()
	k.HTTPEndpoint = d.field()
	k.GRPCStatusCode = d.field()
	k.ServiceSource = d.field()
	k.HTTPStatusCode = d.uint32()
	// Blocked fields share the constant: comparing a collapsed span with
	// the entry then short-circuits on equal pointers.
	for _, f := range []*string{&k.Service, &k.Name, &k.Resource, &k.Type, &k.SpanKind,
		&k.HTTPMethod, &k.HTTPEndpoint, &k.GRPCStatusCode, &k.ServiceSource} {
		if *f == BlockedValue {
			*f = BlockedValue
		}
	}
	flags := d.byte()
	k.IsTraceRoot = Trilean(flags & 3)
	k.Synthetics = flags&4 != 0
	k.PeerTags = k.PeerTags[:0]
	for n := d.uvarint(); n > 0; n-- {
		k.PeerTags = append(k.PeerTags, d.field())
	}
	if len(k.PeerTags) == 0 {
		k.PeerTags = nil
	}
	if d.i != len(d.s) {
		panic("BUG: aggregate: key bytes not fully decoded")
	}
}

// keyDecoder reads back the fields encodeKey wrote.
type keyDecoder struct {
	s string
	i int
}

func (d *keyDecoder) byte() byte {
	c := d.s[d.i]
	d.i++
	return c
}

func (d *keyDecoder) uvarint() uint64 {
	var v uint64
	for shift := 0; ; shift += 7 {
		c := d.byte()
		v |= uint64(c&0x7f) << shift
		if c < 0x80 {
			return v
		}
	}
}

func (d *keyDecoder) field() string {
	n := int(d.uvarint())
	f := d.s[d.i : d.i+n]
	d.i += n
	return f
}

func (d *keyDecoder) uint32() uint32 {
	s := d.s[d.i : d.i+4]
	d.i += 4
	return uint32(s[0]) | uint32(s[1])<<8 | uint32(s[2])<<16 | uint32(s[3])<<24
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

func (t *Table) overflowEntry() *Entry {
	if t.overflow == nil {
		t.overflow = &Entry{Key: Key{
			Service: BlockedValue, Name: BlockedValue, Resource: BlockedValue,
			Type: BlockedValue, SpanKind: BlockedValue, HTTPMethod: BlockedValue,
			HTTPEndpoint: BlockedValue, GRPCStatusCode: BlockedValue,
			ServiceSource: BlockedValue,
		}}
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
	clear(t.recent[:])
	clear(t.recentTags[:])
	t.lastCollapsed = collapsedMemo{}
	t.overflow = nil
	t.cursor = 0
	t.nextEpoch()
}
