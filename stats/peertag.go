// This file holds PeerTagJoiner: the "key:value" strings of Span.PeerTags
// built from a span's tags without an allocation per span.

package stats

import (
	"hash/maphash"
	"sync/atomic"
)

// peerTagSlots is how many joined tags a PeerTagJoiner remembers:
// direct-mapped, so its memory stays bounded however many distinct values
// spans carry; a collision only costs joining that pair again.
const (
	peerTagBits  = 12
	peerTagSlots = 1 << peerTagBits
)

// PeerTagJoiner joins a peer tag's key and value into the "key:value"
// string Span.PeerTags takes, and remembers what it joined: a tracer that
// holds a span's tags as key and value (most do) then publishes a pair it
// has seen before without allocating, where joining them per span costs a
// string per tag (the agent's concentrator does that for dd-trace-go,
// inside its own Publish). Create one per process and share it: it is safe
// for concurrent use, and its zero value is ready (a package variable will
// do). It keeps at most 4096 tags of at most MaxTagLen bytes; a longer one
// is joined every time.
type PeerTagJoiner struct {
	slots [peerTagSlots]atomic.Pointer[string]
}

// joinerSeed hashes the pairs of every PeerTagJoiner: one per process, so
// that the zero value needs no seed of its own (maphash refuses a zero one).
var joinerSeed = maphash.MakeSeed()

// NewPeerTagJoiner returns an empty PeerTagJoiner.
func NewPeerTagJoiner() *PeerTagJoiner { return &PeerTagJoiner{} }

// Join returns key + ":" + value, the same string for a pair joined
// before while it is remembered.
func (j *PeerTagJoiner) Join(key, value string) string {
	slot := &j.slots[j.slot(key, value)]
	if p := slot.Load(); p != nil {
		if t := *p; len(t) == len(key)+1+len(value) && t[:len(key)] == key && t[len(key)] == ':' && t[len(key)+1:] == value {
			return t
		}
	}
	t := key + ":" + value
	if len(t) <= MaxTagLen {
		kept := t // only a kept tag needs a pointer of its own
		slot.Store(&kept)
	}
	return t
}

// slot is where the pair is kept. Both are hashed: db.instance:orders and
// db.name:orders, say, must not share a slot and evict each other at every
// span. The high bits: the multiply mixes the key's hash into them.
func (j *PeerTagJoiner) slot(key, value string) uint64 {
	return (maphash.String(joinerSeed, value) ^ maphash.String(joinerSeed, key)*0x9e3779b97f4a7c15) >> (64 - peerTagBits)
}
