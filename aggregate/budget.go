// This file owns the cardinality budgets: a set of admitted values per
// field and per peer-tag key, decided afresh each interval.

package aggregate

import (
	"hash/maphash"
	"math/bits"
	"strings"
	"unsafe"
)

// maxPeerTagKeys bounds the peer-tag keys tracked when the agent gave no
// list: each key has its own budget, so the keys need one too.
const maxPeerTagKeys = 64

// valueSet is the budget of one field: an open-addressing set of the
// values' seeded hashes, each with the last interval that admitted it.
// Storing hashes, not strings, means admission never allocates and values
// seen in earlier intervals are re-admitted for a probe. A slot keeps the
// hash's top 48 bits (the rest hold the interval): two values whose hashes
// share them share one admission — an extra value's worth of detail, never
// a lost span.
type valueSet struct {
	limit    int // < 0: unlimited
	slots    []uint64
	mask     uint64
	used     int          // occupied slots
	remember int          // occupied slots kept across intervals before a reset
	epoch    uint32       // interval that n counts
	n        int          // values admitted in epoch
	blocked  string       // the replacement value
	seed     maphash.Seed // the table's: one hash per value for every set
	// filter has a bit, picked by the value's sample (see sample), set for
	// every value inserted since the slots were last cleared, at bloomBits
	// bits a slot: a full set turns away most values it never held (an
	// attack's) on this bit, without hashing the whole value or reading the
	// slots, in a sixteenth of their memory.
	filter     []uint64
	filterMask uint64
	sampleSeed uint64

	// The last value decided, and the decision: a field that keeps its
	// value from span to span (a service, "GET", "") is decided by one
	// comparison of addresses. A decision holds for the rest of its
	// interval; budgets.forget ends it.
	last   string
	lastOK bool
}

// A slot packs the top 48 bits of a value's hash with the low 16 bits of the
// last interval that admitted it: 8 bytes a value keeps the sets of a whole
// table within L2. 0 is an empty slot.
const (
	slotEpochBits = 16
	slotEpochMask = 1<<slotEpochBits - 1
)

func newValueSet(limit int, blocked string, seed maphash.Seed) *valueSet {
	s := &valueSet{limit: limit, blocked: blocked, seed: seed, last: noValue,
		sampleSeed: maphash.String(seed, "sample")}
	if limit < 0 {
		return s
	}
	// The values of the previous interval or so are remembered, so a
	// steady value set costs a probe, not an insert; the bound keeps a
	// stream of fresh values from growing the set: at most remember + limit
	// slots are ever occupied.
	s.remember = limit + 64
	// Load factor <= 3/4: an attack's new values probe a few slots, mostly
	// on one cache line, and the sets of a table stay small enough to share
	// the L2 cache with everything else the consumer touches (see
	// BenchmarkConsumer/Adversarial).
	n := 16
	for 3*n < 4*(s.remember+limit+1) {
		n <<= 1
	}
	s.slots = make([]uint64, n)
	s.mask = uint64(n - 1)
	s.filter = make([]uint64, n*bloomBits/64)
	s.filterMask = uint64(n*bloomBits - 1)
	return s
}

// bloomBits is the filter's bits per slot: with at most about half the
// slots used, one value in eight it never held passes it.
const bloomBits = 4

// filterBit returns the word and bit of the filter for sample f.
func (s *valueSet) filterBit(f uint64) (int, uint64) {
	b := bits.RotateLeft64(f, 24) & s.filterMask // its top bits first
	return int(b >> 6), 1 << (b & 63)
}

// sample is a cheap seeded hash of v for the filter: its length and three
// 8-byte words — the first, the middle and the last, overlapping in short
// strings — where maphash reads every byte. Values that differ only outside
// those words share a sample, so all but the first of them pass the filter
// and are decided by their full hash: as slow as without a filter, never
// wrong. An attack's values (a UUID or a counter in a resource, a host
// name) differ in a sampled word.
func (s *valueSet) sample(v string) uint64 {
	var a, b, c uint64
	switch n := len(v); {
	case n >= 8:
		a, b, c = le64(v), le64(v[(n-8)/2:]), le64(v[n-8:])
	case n >= 4:
		a, c = le32(v), le32(v[n-4:])
	case n > 0:
		a = uint64(v[0])<<16 | uint64(v[n/2])<<8 | uint64(v[n-1])
	}
	h := (s.sampleSeed ^ uint64(len(v)) ^ a) * 0x9E3779B97F4A7C15
	h = (bits.RotateLeft64(h, 31) ^ b) * 0xBF58476D1CE4E5B9
	h = (bits.RotateLeft64(h, 29) ^ c) * 0x94D049BB133111EB
	return h ^ h>>32
}

// le64 is the little-endian word of v's first 8 bytes; the compiler makes
// it one load.
func le64(v string) uint64 {
	_ = v[7]
	return uint64(v[0]) | uint64(v[1])<<8 | uint64(v[2])<<16 | uint64(v[3])<<24 |
		uint64(v[4])<<32 | uint64(v[5])<<40 | uint64(v[6])<<48 | uint64(v[7])<<56
}

// le32 is the little-endian word of v's first 4 bytes.
func le32(v string) uint64 {
	_ = v[3]
	return uint64(v[0]) | uint64(v[1])<<8 | uint64(v[2])<<16 | uint64(v[3])<<24
}

// ok reports whether v is within budget in interval epoch, admitting it if
// there is room. The repeated-value check is small enough to inline: it asks
// whether v is the very string decided last (a tracer's constant, an
// interned route), not whether its bytes are equal — an equal string at
// another address is decided afresh, which gives the same answer for the
// cost of a hash, while a new value (a cardinality attack) costs no byte
// comparison before its hash.
func (s *valueSet) ok(v string, epoch uint32) bool {
	// !same(s.last, v), spelled out: the call would push ok over the
	// inliner's budget.
	if unsafe.StringData(s.last) != unsafe.StringData(v) || len(s.last) != len(v) {
		s.decide(v, epoch)
	}
	return s.lastOK
}

// noValue is what a set's last value is before the first decision of an
// interval: a byte of its own, so no tracer string is ever the same data
// (string([]byte{0}) is not: the runtime serves every one-byte string
// from one shared table, TestNoValueIsNoTracerString).
var (
	noValueByte = [1]byte{0}
	noValue     = unsafe.String(&noValueByte[0], 1)
)

// forget drops every set's last decision: they held for the interval that
// ended. The per-position memory goes too: it may hold blocked, the cap's
// answer in the interval that ended. The keys stay, with the values they
// remember: under the cap dropStaleKeys makes room for a new interval's
// keys, and with the agent's key list (no cap) every listed key in use
// keeps its set rather than being allocated again each interval.
func (b *budgets) forget() {
	for _, s := range b.fields {
		s.last = noValue
	}
	b.recent = [MaxInlinePeerTags]recentPeer{}
	for _, s := range b.peer {
		s.last = noValue
	}
	b.blocked.last = noValue
}

// decide decides v afresh and remembers the decision in s.last and
// s.lastOK. Not inlined: ok, its caller, must stay small enough to inline.
//
//go:noinline
func (s *valueSet) decide(v string, epoch uint32) {
	ok := true
	if s.limit >= 0 {
		// An absent label ("") is no value: it takes no room and is never
		// replaced, as the agent's checkStringField leaves it. Nor is the
		// replacement itself, which a span may carry already: counted as
		// a collapse or not, it would depend on the span before it
		// (TestLiteralBlockedValueNeverCounts).
		ok = v == "" || v == s.blocked || s.within(v, epoch)
	} else {
		s.epoch = epoch // in use this interval (see dropStaleKeys)
	}
	// Holding v pins at most one tracer string per field.
	s.last, s.lastOK = v, ok
}

// within reports whether v is within budget in interval epoch, admitting it
// if there is room. A full set asks its filter first: a value it never held
// is refused for the cost of its sample.
func (s *valueSet) within(v string, epoch uint32) bool {
	f := s.sample(v)
	if s.epoch == epoch && s.n >= s.limit {
		if w, bit := s.filterBit(f); s.filter[w]&bit == 0 {
			return false
		}
	}
	return s.admit(maphash.String(s.seed, v), f, epoch)
}

// admit reports whether the value with hash h and sample f is within budget
// in interval epoch, admitting it if there is room.
func (s *valueSet) admit(h, f uint64, epoch uint32) bool {
	if s.limit < 0 {
		return true
	}
	if s.epoch != epoch {
		// Clearing when the 16-bit interval stamp wraps keeps an old stamp
		// from passing for the current interval.
		if s.used > s.remember || epoch>>slotEpochBits != s.epoch>>slotEpochBits {
			clear(s.slots)
			clear(s.filter)
			s.used = 0
		}
		s.epoch, s.n = epoch, 0
	}
	tag := h &^ slotEpochMask
	if tag == 0 {
		tag = 1 << slotEpochBits // 0 marks an empty slot
	}
	w, bit := s.filterBit(f)
	if s.filter[w]&bit == 0 && s.n >= s.limit {
		return false // never held, and no room
	}
	stamp := uint64(epoch & slotEpochMask)
	for i := (h >> slotEpochBits) & s.mask; ; i = (i + 1) & s.mask {
		sl := s.slots[i]
		if sl&^slotEpochMask == tag {
			if sl&slotEpochMask == stamp {
				return true
			}
			if s.n >= s.limit {
				return false
			}
			s.slots[i] = tag | stamp
			s.n++
			return true
		}
		if sl == 0 {
			if s.n >= s.limit {
				return false
			}
			s.slots[i] = tag | stamp
			s.filter[w] |= bit
			s.used++
			s.n++
			return true
		}
	}
}

// budgets holds the value sets of a Table.
type budgets struct {
	seed    maphash.Seed
	fields  [FieldPeerTags]*valueSet
	peer    map[string]*valueSet // per peer-tag key
	limits  Limits
	blocked *valueSet // stands in for keys beyond maxPeerTagKeys
	// sweptEpoch is the interval dropStaleKeys last ran in, if swept.
	sweptEpoch uint32
	swept      bool
	// recent remembers, per position in a span's kept peer tags (in the
	// tracer's order), the last key's set: spans of one client repeat
	// their key layout.
	recent [MaxInlinePeerTags]recentPeer
}

// recentPeer is one position of budgets.recent.
type recentPeer struct {
	key string // the tag's key, a substring of tag
	tag string // the last tag seen at this position
	set *valueSet
}

// peerSetCached is peerSet with the per-position memory of recent.
func (b *budgets) peerSetCached(i int, tag string, epoch uint32, capped bool) *valueSet {
	if i >= len(b.recent) {
		return b.peerSet(tag, epoch, capped)
	}
	r := &b.recent[i]
	if r.set != nil && (same(tag, r.tag) || hasPeerKey(tag, r.key)) {
		r.tag = tag
		return r.set
	}
	set := b.peerSet(tag, epoch, capped)
	r.key, r.tag, r.set = peerKey(tag), tag, set
	return set
}

// dropStaleKeys forgets the peer-tag keys not used in interval epoch: the
// key cap is per interval, so keys of an earlier one must not count against
// this one. Once per interval: after it every key left is in use until the
// next, so junk keys past the cap do not each pay for a scan.
func (b *budgets) dropStaleKeys(epoch uint32) {
	if b.swept && b.sweptEpoch == epoch {
		return
	}
	b.swept, b.sweptEpoch = true, epoch
	dropped := false
	for k, s := range b.peer {
		if s.epoch != epoch {
			delete(b.peer, k)
			dropped = true
		}
	}
	if dropped {
		b.recent = [MaxInlinePeerTags]recentPeer{} // may hold a dropped set
	}
}

func newBudgets(l Limits) *budgets {
	b := &budgets{limits: l, peer: map[string]*valueSet{}, seed: maphash.MakeSeed()}
	for f := range FieldPeerTags {
		b.fields[f] = newValueSet(l.Get(f), BlockedValue, b.seed)
	}
	b.blocked = newValueSet(0, BlockedValue, b.seed)
	return b
}

// peerSet returns the budget of a peer tag's key, creating it; capped (the
// agent gave no list of keys, which would bound them itself), only while
// fewer than maxPeerTagKeys keys are in use in interval epoch.
func (b *budgets) peerSet(tag string, epoch uint32, capped bool) *valueSet {
	k := peerKey(tag)
	if s, ok := b.peer[k]; ok {
		return s
	}
	if capped && len(b.peer) >= maxPeerTagKeys {
		b.dropStaleKeys(epoch)
		if len(b.peer) >= maxPeerTagKeys {
			return b.blocked
		}
	}
	k = strings.Clone(k)
	s := newValueSet(b.limits.PeerTag, k+":"+BlockedValue, b.seed)
	b.peer[k] = s
	return s
}
