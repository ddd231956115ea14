// This file owns a span's peer tags on their way into its key: which keys
// are kept (SetPeerTagKeys) and the sorted set the key holds.

package aggregate

import (
	"strings"
	"unicode"

	"github.com/spanstats/spanstats/internal/casefold"
)

// SetPeerTagKeys keeps only peer tags whose key is in keys (the agent's
// peer_tags list, or the tracer's own). A nil keys keeps every key; an
// empty one keeps none, as the agent keeps none for an empty list.
func (t *Table) SetPeerTagKeys(keys []string) {
	t.forgetRecent() // cached spans were keyed under the old filter
	clear(t.keepMemo[:])
	clear(t.tagMemo[:])
	if t.budgets != nil {
		// Its positions may hold blocked, the cap's answer: a list turns
		// the cap off.
		t.budgets.recent = [MaxInlinePeerTags]recentPeer{}
	}
	if keys == nil {
		t.peerKeys = nil
		return
	}
	t.peerKeys = make(map[string]struct{}, len(keys))
	for _, k := range keys {
		t.peerKeys[k] = struct{}{}
	}
	if t.budgets != nil {
		// With a list the key cap is off (peerSet): the budgets of keys it
		// no longer holds would otherwise stay for the table's life.
		for k := range t.budgets.peer {
			if _, ok := t.peerKeys[k]; !ok && k != BaseServiceKey {
				delete(t.budgets.peer, k)
			}
		}
	}
}

// keptPeers returns the span's peer tags whose key is kept and whose value
// is not empty (the agent aggregates no empty value), IP addresses in them
// quantized (quantizeTag), in the tracer's order, in t.kept.
//
// With a key list, the one "_dd.base_service" tag of an internal span or
// one without kind (BaseServiceKind) is kept whether the list holds its
// key or not: the agent's peerTagKeysToAggregateForSpan answers with that
// key alone for such a span, without looking it up in the list (only an
// empty list keeps nothing), and with nothing for a server span.
func (t *Table) keptPeers(s *Record) []string {
	p := t.kept[:0]
	if len(t.peerKeys) > 0 && s.NumPeerTags == 1 && s.ExtraPeerTags == nil {
		if tag := s.PeerTags[0]; len(tag) > len(BaseServiceKey)+1 && hasPeerKey(tag, BaseServiceKey) && BaseServiceKind(s.SpanKind) {
			p = append(p, t.quantizeTag(tag, len(BaseServiceKey)))
			t.kept = p
			return p
		}
	}
	p = t.keepPeers(p, s.PeerTags[:s.NumPeerTags])
	p = t.keepPeers(p, s.ExtraPeerTags)
	t.kept = p
	return p
}

// BaseServiceKey is the peer-tag key of a span's base service, the one peer
// tag an internal span, or one without kind, keeps (a server span keeps none).
const BaseServiceKey = "_dd.base_service"

// BaseServiceKind reports whether the agent keeps a span's base-service
// peer tag for its kind: strings.ToLower(kind) is "" or internal.
func BaseServiceKind(kind string) bool {
	return kind == "" || casefold.Is(kind, "internal", unicode.ToLower)
}

// PeerKind reports whether the agent keeps a span's peer tags for its kind:
// strings.ToLower(kind) is client, producer or consumer (compared rune by
// rune, without allocating; only U+0130 and U+212A lower to ASCII from
// outside it, in two and three bytes).
func PeerKind(kind string) bool {
	return casefold.Is(kind, "client", unicode.ToLower) || casefold.Is(kind, "producer", unicode.ToLower) ||
		casefold.Is(kind, "consumer", unicode.ToLower)
}

// sortedPeers returns kept as a sorted set in t.peers: the key treats peer
// tags as a set, whatever order the tracer gave.
func (t *Table) sortedPeers(kept []string) []string {
	p := sortSet(append(t.peers[:0], kept...))
	t.peers = p
	return p
}

// keepPeers appends to dst the tags of tags that have a value (neither
// "key:" nor a bare "key") and whose key is kept, quantized.
func (t *Table) keepPeers(dst, tags []string) []string {
	for i, tag := range tags {
		if i < len(t.tagMemo) {
			// Pins at most one tracer string per position, as keepMemo.
			m := &t.tagMemo[i]
			if !same(m.tag, tag) {
				m.tag = tag
				m.out, m.keep = t.keepTag(i, tag)
			}
			if m.keep {
				dst = append(dst, m.out)
			}
			continue
		}
		if out, keep := t.keepTag(i, tag); keep {
			dst = append(dst, out)
		}
	}
	return dst
}

// keepTag returns the tag at position i of a span's peer tags quantized,
// and whether it is kept: it has a value (neither "key:" nor a bare "key")
// and its key is kept.
func (t *Table) keepTag(i int, tag string) (string, bool) {
	c, keep := t.peerKeyEnd(i, tag)
	if !keep || c == len(tag)-1 {
		return "", false
	}
	return t.quantizeTag(tag, c), true
}

// peerKeyEnd returns where tag's key ends (its first colon; -1 without
// one, which is never kept) and whether the key is kept. Spans of one
// client repeat their tag layout, so the key at each position is
// remembered and checked with one prefix comparison, which finds the colon
// as well.
func (t *Table) peerKeyEnd(i int, tag string) (int, bool) {
	if i < len(t.keepMemo) {
		if m := &t.keepMemo[i]; m.key != "" && hasPeerKey(tag, m.key) {
			return len(m.key), m.keep
		}
	}
	c := strings.IndexByte(tag, ':')
	if c < 0 {
		return -1, false
	}
	keep := true
	if t.peerKeys != nil {
		_, keep = t.peerKeys[tag[:c]]
	}
	if i < len(t.keepMemo) {
		// Pins at most one tracer string per position; cloning would
		// allocate whenever layouts alternate.
		t.keepMemo[i].key, t.keepMemo[i].keep = tag[:c], keep
	}
	return c, keep
}

// peerKey is the key of a "key:value" peer tag (all of tag without a colon).
func peerKey(tag string) string {
	if i := strings.IndexByte(tag, ':'); i >= 0 {
		tag = tag[:i]
	}
	return tag
}

// hasPeerKey reports whether peerKey(tag) == key, for the cost of one prefix
// comparison when key is the one a memo holds.
func hasPeerKey(tag, key string) bool {
	n := len(key)
	return len(tag) > n && tag[n] == ':' && tag[:n] == key
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
