// This file holds memo, the bounded cache that interns the strings the
// mapping builds and remembers what normalizing and obfuscating made of a
// value, so a repeated route costs lookups, not allocations.

package otelstats

import (
	"hash/maphash"
	"sync/atomic"
)

// memoSlots is the size of each memo's table of small entries:
// direct-mapped, so memory stays bounded however many distinct values spans
// carry; a collision only costs a recomputation
// (BenchmarkOnEnd/distinct-routes).
const memoSlots = 4096

// memoSmallEntry is the most bytes (key, value and tags) of an entry in the
// memoSlots table: a key and a value of 256 bytes, which services, tags,
// operation names and most hosts and peer-tag sets fit in, so mostly long
// statements and routes go to the smaller table of large entries.
const memoSmallEntry = 512

// memoLargeSlots and memoLargeBytes size each memo's table of large
// entries: as many slots as the small table, so an application's repeated
// long statements (the costliest to obfuscate again) collide no more often
// than short values (TestMemoKeepsLongStatements);
// bounded in bytes, where full slots of a 5 KB statement and its
// obfuscation would hold tens of MiB for the life of the process
// (TestMemoRetainedHeap). Past the bytes, entries are evicted in slot
// order from a moving cursor.
const (
	memoLargeSlots = memoSlots
	memoLargeBytes = 2 << 20
)

// memo maps a key (bytes) to a computed string or tag list. It is safe for
// concurrent use without locks: a slot holds an immutable entry, replaced
// whole.
type memo struct {
	seed  maphash.Seed
	small [memoSlots]atomic.Pointer[memoEntry]
	large [memoLargeSlots]atomic.Pointer[memoEntry]
	// largeBytes is the size of the entries in large, exact: each is
	// added as it is swapped in and taken off as it is swapped out.
	largeBytes atomic.Int64
	cursor     atomic.Uint32 // the next large slot evictLarge empties
	// maxKey is the longest key kept: attribute values have no length
	// limit by default, and a slot holding megabytes would make the memo
	// bounded in count only. A longer key is computed every time.
	maxKey int
}

// memoMaxKey is the maxKey of every memo but the resources' (their keys are
// cut to resourceKeyLen): far above what real routes give as a service, an
// operation name or a span's peer-tag values.
const memoMaxKey = 4 << 10

type memoEntry struct {
	key  string
	val  string
	tags []string
}

// size is the bytes of e's strings, which decide its table.
func (e *memoEntry) size() int {
	n := len(e.key) + len(e.val)
	for _, t := range e.tags {
		n += len(t)
	}
	return n
}

func newMemo(maxKey int) *memo { return &memo{seed: maphash.MakeSeed(), maxKey: maxKey} }

// get returns the entry stored for key, or nil.
func (m *memo) get(key []byte) *memoEntry {
	h := maphash.Bytes(m.seed, key)
	if e := m.small[h%memoSlots].Load(); e != nil && e.key == string(key) {
		return e
	}
	if e := m.large[h%memoLargeSlots].Load(); e != nil && e.key == string(key) {
		return e
	}
	return nil
}

// getS is get for a key held as a string.
func (m *memo) getS(key string) *memoEntry {
	h := maphash.String(m.seed, key) // the same hash as Bytes of the same content
	if e := m.small[h%memoSlots].Load(); e != nil && e.key == key {
		return e
	}
	if e := m.large[h%memoLargeSlots].Load(); e != nil && e.key == key {
		return e
	}
	return nil
}

// put stores e under e.key (replacing whatever shared its slot) and
// returns it; a key longer than maxKey is not stored.
func (m *memo) put(e *memoEntry) *memoEntry {
	if len(e.key) > m.maxKey {
		return e
	}
	h := maphash.String(m.seed, e.key)
	n := e.size()
	if n <= memoSmallEntry {
		m.small[h%memoSlots].Store(e)
		return e
	}
	i := h % memoLargeSlots
	if old := m.large[i].Swap(e); old != nil {
		n -= old.size()
	}
	if m.largeBytes.Add(int64(n)) > memoLargeBytes {
		m.evictLarge(i)
	}
	return e
}

// evictLarge empties large slots other than keep until the entries fit
// memoLargeBytes again; at most one pass over the table, as concurrent
// puts may keep adding.
func (m *memo) evictLarge(keep uint64) {
	for range memoLargeSlots {
		if m.largeBytes.Load() <= memoLargeBytes {
			return
		}
		j := uint64(m.cursor.Add(1)) % memoLargeSlots
		if j == keep {
			continue
		}
		if old := m.large[j].Swap(nil); old != nil {
			m.largeBytes.Add(-int64(old.size()))
		}
	}
}

// str returns compute(key) remembered under key; compute receives the key
// as a string it may keep.
func (m *memo) str(key []byte, compute func(string) string) string {
	if e := m.get(key); e != nil {
		return e.val
	}
	k := string(key)
	return m.put(&memoEntry{key: k, val: compute(k)}).val
}

// strS is str for a key already held as a string.
func (m *memo) strS(key string, compute func(string) string) string {
	if e := m.getS(key); e != nil {
		return e.val
	}
	return m.put(&memoEntry{key: key, val: compute(key)}).val
}
