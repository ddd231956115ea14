// This file owns the recent-span caches: they find the entry of a span
// without encoding or hashing its key, by the identity of its label
// strings when the tracer reuses them (constants, route templates), else by
// their contents when it builds them anew for each span.

package aggregate

import (
	"encoding/binary"
	"unsafe"
)

// recentSpans is the size of each recent-span cache, in sets of recentWays
// slots, the least recently used of which a new key replaces. Each slot
// holds one span's label strings, so the two caches pin at most
// 2*recentSpans spans' strings of the tracer. Two ways, not one, so that
// keys sharing a set do not evict each other (see
// BenchmarkConsumer/SteadyState); the LRU bit per set assumes two ways.
const (
	recentSpans = 1024
	recentWays  = 2
	recentSets  = recentSpans / recentWays
)

// recentPeers is how many peer tags a cached span may carry.
const recentPeers = 4

// recentPinBytes bounds the length of the label strings each recent-span
// cache holds. A slot holds a span's own strings, which a tracer that
// builds them per span would otherwise free. A span whose strings would take the cache past the bound is not cached (it is
// found by its key, hashed), where a few hundred keys of long interned
// strings (SQL resources) still fit; Rotate empties the caches
// (TestRecentCachesPinBoundedBytes). Lengths,
// not memory: a label sliced out of a larger string keeps all of it
// alive, as the tracer's span did.
const recentPinBytes = 1 << 20

// recentSlot maps one span's label fields (raw, or collapsed by the budgets)
// to the entry they hit. It is validated by the fields' string data (their
// identity, see same, or their contents, as its cache decides), the entry's
// key generation (recycling changes it) and the entry's interval (budgets
// are decided per interval).
type recentSlot struct {
	span  recentKey
	e     *Entry
	gen   uint32
	bytes int32 // of span's strings, counted in spanCache.pinned
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
	n := copy(k.peers[:], s.PeerTags[:s.NumPeerTags])
	clear(k.peers[n:]) // a previous key's tags, kept alive for nothing
	k.numPeers, k.flags, k.httpStatusCode = s.NumPeerTags, s.flags(), s.HTTPStatusCode
}

// keyBytes is the bytes of the label strings setKey would keep of s.
func keyBytes(s *Record) int {
	n := 0
	for _, v := range s.labels() {
		n += len(v)
	}
	for _, v := range s.PeerTags[:min(s.NumPeerTags, recentPeers)] {
		n += len(v)
	}
	return n
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

// equalKey is sameKey by the strings' contents. Unrolled as sameKey; ==
// compares the lengths before any byte, and equal addresses end the
// comparison of equal lengths at once.
func (k *recentKey) equalKey(s *Record) bool {
	a, b := (*[9]string)(&k.fields), (*[9]string)(s.labels())
	if k.httpStatusCode != s.HTTPStatusCode || k.numPeers != s.NumPeerTags || k.flags != s.flags() ||
		s.NumPeerTags > recentPeers || s.ExtraPeerTags != nil ||
		a[0] != b[0] || a[1] != b[1] || a[2] != b[2] || a[3] != b[3] || a[4] != b[4] ||
		a[5] != b[5] || a[6] != b[6] || a[7] != b[7] || a[8] != b[8] {
		return false
	}
	for i := range s.NumPeerTags {
		if k.peers[i] != s.PeerTags[i] {
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

// contentIndex is recentIndex by the contents of the span's most variable
// strings: their lengths and first and last bytes, read in a few words, so
// that it costs a fraction of hashing the key. Keys that share those bytes
// share a set and may evict each other; a hit is still decided by the
// fields themselves (equalKey), so a collision costs a miss, never a wrong
// entry.
func contentIndex(s *Record) (uint, uint32) {
	h := ends(s.Resource)*0x9E3779B97F4A7C15 ^
		ends(s.Name)*0xC2B2AE3D27D4EB4F ^
		ends(s.Service)*0x165667B19E3779F9
	for _, p := range s.PeerTags[:min(s.NumPeerTags, recentPeers)] {
		h = (h ^ ends(p)) * 0x27D4EB2F165667C5
	}
	// Folded as murmur3's finalizer: the bytes that vary most, a
	// resource's last ones, sit in the words' top bits, which the products
	// above carry no lower.
	h ^= h >> 33
	h *= 0xFF51AFD7ED558CCD
	h ^= h >> 33
	h *= 0xC4CEB9FE1A85EC53
	h ^= h >> 33
	return uint(h>>40) % recentSets * recentWays, uint32(h>>8) | 1
}

// ends mixes v's length with its first and last eight bytes (all of
// them, when shorter).
func ends(v string) uint64 {
	n := len(v)
	if n < 8 {
		var w uint64
		for i := range n {
			w = w<<8 | uint64(v[i])
		}
		return w ^ uint64(n)<<56
	}
	b := unsafe.Slice(unsafe.StringData(v), n)
	return binary.LittleEndian.Uint64(b)*0xFF51AFD7ED558CCD ^ binary.LittleEndian.Uint64(b[n-8:]) ^ uint64(n)
}

// addr is the address of v's bytes (in 64 bits on every platform).
func addr(v string) uint64 { return uint64(uintptr(unsafe.Pointer(unsafe.StringData(v)))) }

// spanCache maps recent spans' label fields to their entries, in sets of
// recentWays slots found by a hash of the span (recentIndex or
// contentIndex). The tags, 4 KiB that stay in the L1 cache, turn away most
// misses before a slot (a few cache lines) or its entry is read.
type spanCache struct {
	slots  [recentSpans]recentSlot
	tags   [recentSpans]uint32 // 0: empty slot
	lru    [recentSets]uint8   // per set: the way to replace next
	pinned int                 // the slots' bytes, at most recentPinBytes
}

// find returns the entry of s's key in the set at i with tag, or nil. A slot
// matches s by the identity of its strings (sameKey) or, byContent, by
// their contents (equalKey).
func (c *spanCache) find(i uint, tag uint32, s *Record, epoch uint32, byContent bool) *Entry {
	for w := range uint(recentWays) {
		if c.tags[i+w] != tag {
			continue
		}
		slot := &c.slots[i+w]
		if byContent {
			if !slot.span.equalKey(s) {
				continue
			}
		} else if !slot.span.sameKey(s) {
			continue
		}
		if e := slot.e; e.epoch == epoch && e.gen == slot.gen {
			if lru := &c.lru[i/recentWays]; *lru == uint8(w) {
				*lru = uint8(w ^ 1) // the other way is now the older
			}
			return e
		}
	}
	return nil
}

// put puts s's key, counted in e, in the least recently used way of the set
// at i, or in the other if only replacing that one keeps the cache within
// recentPinBytes, or nowhere.
func (c *spanCache) put(i uint, tag uint32, s *Record, e *Entry) {
	lru := &c.lru[i/recentWays]
	w := uint(*lru)
	n := keyBytes(s)
	if c.pinned-int(c.slots[i+w].bytes)+n > recentPinBytes {
		if w ^= 1; c.pinned-int(c.slots[i+w].bytes)+n > recentPinBytes {
			return
		}
	}
	slot := &c.slots[i+w]
	*lru = uint8(w ^ 1)
	c.pinned += n - int(slot.bytes)
	slot.span.setKey(s)
	slot.e, slot.gen, slot.bytes = e, e.gen, int32(n)
	c.tags[i+w] = tag
}

func (c *spanCache) clear() {
	clear(c.slots[:])
	clear(c.tags[:])
	c.pinned = 0
}

// cachedEntry returns the entry one of the recent-span caches holds for s's
// key, or nil: the cache by identity first, at the cost of a few address
// comparisons, then the one by contents, which reads the strings.
func (t *Table) cachedEntry(s *Record) *Entry {
	if e := t.recentEntry(s); e != nil {
		return e
	}
	return t.contentEntry(s)
}

// contentEntry returns the entry the cache by contents holds for s's key,
// or nil.
func (t *Table) contentEntry(s *Record) *Entry {
	i, tag := contentIndex(s)
	return t.seen.find(i, tag, s, t.epoch, true)
}

// recentEntry returns the entry the cache by identity holds for s's key, or
// nil.
func (t *Table) recentEntry(s *Record) *Entry {
	i, tag := recentIndex(s)
	return t.recent.find(i, tag, s, t.epoch, false)
}

// cacheable reports whether s's key, counted in e, fits a recentKey (and
// is worth remembering: the overflow entry's key is not s's).
func (t *Table) cacheable(s *Record, e *Entry) bool {
	return e != t.overflow && s.NumPeerTags <= recentPeers && s.ExtraPeerTags == nil
}

// remember puts s's key, counted in e, in both recent-span caches: which
// of them its next span finds depends on whether the tracer reuses its
// strings.
func (t *Table) remember(s *Record, e *Entry) {
	if t.cacheable(s, e) {
		i, tag := recentIndex(s)
		t.recent.put(i, tag, s, e)
		i, tag = contentIndex(s)
		t.seen.put(i, tag, s, e)
	}
}

// forgetRecent empties the recent-span caches, the last collapsed key and
// the collapse scratch span: they find entries by a span's strings, which
// Clear and SetPeerTagKeys give another meaning, and would pin them.
func (t *Table) forgetRecent() {
	t.recent.clear()
	t.seen.clear()
	t.lastCollapsed = collapsedMemo{}
	t.collapsedSpan.Reset()
}
