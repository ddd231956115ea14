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
const peerTagSlots = 4096

// PeerTagJoiner joins a peer tag's key and value into the "key:value"
// string Span.PeerTags takes, and remembers what it joined: a tracer that
// holds a span's tags as key and value (most do) then publishes a pair it
// has seen before without allocating, where joining them per span costs a
// string per tag (the agent's concentrator does that for dd-trace-go,
// inside its own Publish). Create one per process and share it: it is safe
// for concurrent use. It keeps at most 4096 tags of at most MaxTagLen
// bytes; a longer one is joined every time.
type PeerTagJoiner struct {
	seed  maphash.Seed
	slots [peerTagSlots]atomic.Pointer[string]
}

// NewPeerTagJoiner returns an empty PeerTagJoiner.
func NewPeerTagJoiner() *PeerTagJoiner { return &PeerTagJoiner{seed: maphash.MakeSeed()} }

// Join returns key + ":" + value, the same string for a pair joined
// before while it is remembered.
func (j *PeerTagJoiner) Join(key, value string) string {
	// The keys are a handful (the agent's peer_tags list): their length
	// and ends tell them apart for the slot; the full compare decides.
	h := maphash.String(j.seed, value)
	if len(key) > 0 {
		h ^= (uint64(len(key))<<16 | uint64(key[0])<<8 | uint64(key[len(key)-1])) * 0x9e3779b97f4a7c15
	}
	slot := &j.slots[h%peerTagSlots]
	if p := slot.Load(); p != nil {
		if t := *p; len(t) == len(key)+1+len(value) && t[:len(key)] == key && t[len(key)] == ':' && t[len(key)+1:] == value {
			return t
		}
	}
	t := key + ":" + value
	if len(t) <= MaxTagLen {
		slot.Store(&t)
	}
	return t
}
