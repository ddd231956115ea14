// This file owns the recent-span cache: it finds the entry of a span whose
// label strings the tracer reuses (constants, route templates) by the
// identity of those strings, without encoding or hashing the key.

package aggregate

import "unsafe"

// recentSpans is the size of the recent-span cache, in sets of recentWays
// slots, the least recently used of which a new key replaces. Each slot
// holds one span's label strings, so the cache pins at most recentSpans
// spans' strings of the tracer. Two ways, not one, so that keys sharing a
// set do not evict each other (see BenchmarkConsumer/SteadyState); the LRU
// bit per set assumes two ways.
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
	fields         [numLabels]string // indexed by Field
	peers          [recentPeers]string
	numPeers       uint8
	flags          uint8
	httpStatusCode uint32
}

func (k *recentKey) setKey(s *Record) {
	k.fields = *s.labels()
	copy(k.peers[:], s.PeerTags[:s.NumPeerTags])
	k.numPeers, k.flags, k.httpStatusCode = s.NumPeerTags, s.flags(), s.HTTPStatusCode
}

func (k *recentKey) sameKey(s *Record) bool {
	// Unrolled by Field: the loop is slower on every span's hit (see
	// BenchmarkConsumer/SteadyState). *[9] fails to compile if a Field is
	// added; TestEveryLabelCounts checks each index.
	a, b := (*[9]string)(&k.fields), (*[9]string)(s.labels())
	if k.httpStatusCode != s.HTTPStatusCode || k.numPeers != s.NumPeerTags || k.flags != s.flags() ||
		s.NumPeerTags > recentPeers || s.ExtraPeerTags != nil ||
		!same(a[0], b[0]) || !same(a[1], b[1]) || !same(a[2], b[2]) || !same(a[3], b[3]) || !same(a[4], b[4]) ||
		!same(a[5], b[5]) || !same(a[6], b[6]) || !same(a[7], b[7]) || !same(a[8], b[8]) {
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

// forgetRecent empties the recent-span cache and the last collapsed key:
// both find entries by a span's strings, which Clear and SetPeerTagKeys
// give another meaning.
func (t *Table) forgetRecent() {
	clear(t.recent[:])
	clear(t.recentTags[:])
	t.lastCollapsed = collapsedMemo{}
}
