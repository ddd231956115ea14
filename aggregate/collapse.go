// This file owns the collapsed-key path: turning the budgets on, deciding
// a span's fields against them (admit), counting what they collapse, and
// finding the entry of a span whose fields were collapsed.

package aggregate

import (
	"slices"
	"strings"
)

// SetLimits turns on per-interval cardinality budgets (zero fields take
// DefaultLimits). A Table without SetLimits keeps every value.
func (t *Table) SetLimits(l Limits) {
	t.budgets = newBudgets(l.withDefaults())
}

// Attacked reports whether the last span added had a value over its
// cardinality budget: under an attack most spans do.
func (t *Table) Attacked() bool { return t.attacked }

// admit checks every budgeted field of s, and its kept peer tags (kept, in
// the tracer's order), in the current interval. It returns the fields over
// budget, a bit per Field (FieldPeerTags for any tag), after counting each
// collapse and replacing the over-budget tags in kept; 0 when all are
// within budget.
func (t *Table) admit(s *Record, kept []string) uint16 {
	b := t.budgets
	ep := t.epoch
	// Unrolled by Field, as sameKey and for the same reason: the loop
	// spills its state around each inlined ok on every collapsed span (see
	// BenchmarkConsumer/Adversarial). *[9] fails to compile if a Field is
	// added; TestEveryLabelCounts checks each index.
	l, v := (*[9]*valueSet)(&b.fields), (*[9]string)(s.labels())
	var rejected uint16 // bit per Field
	if !l[0].ok(v[0], ep) {
		rejected |= 1 << 0
	}
	if !l[1].ok(v[1], ep) {
		rejected |= 1 << 1
	}
	if !l[2].ok(v[2], ep) {
		rejected |= 1 << 2
	}
	if !l[3].ok(v[3], ep) {
		rejected |= 1 << 3
	}
	if !l[4].ok(v[4], ep) {
		rejected |= 1 << 4
	}
	if !l[5].ok(v[5], ep) {
		rejected |= 1 << 5
	}
	if !l[6].ok(v[6], ep) {
		rejected |= 1 << 6
	}
	if !l[7].ok(v[7], ep) {
		rejected |= 1 << 7
	}
	if !l[8].ok(v[8], ep) {
		rejected |= 1 << 8
	}
	for i, p := range kept {
		if vs := b.peerSetCached(i, p, ep, t.peerKeys == nil); !vs.ok(p, ep) {
			kept[i] = vs.blocked
			rejected |= 1 << FieldPeerTags
		}
	}
	// Once per span, however many of its tags were over: as every field,
	// within CollapsedSpans (TestCollapsedPeerTagsCountsSpans).
	if rejected&(1<<FieldPeerTags) != 0 {
		t.collapsed[FieldPeerTags]++
	}
	if rejected != 0 {
		if m := rejected &^ (1 << FieldPeerTags); m != t.runMask {
			t.endRun()
			t.runMask = m
		}
		t.runLen++
		t.collapsedSpans++
	}
	return rejected
}

// collapse returns s's key with the fields in rejected replaced by
// BlockedValue and the peer tags kept (admit's), in t.collapsedSpan.
func (t *Table) collapse(s *Record, rejected uint16, kept []string) *Record {
	// Only the key fields: the caller records s's measurements.
	c := &t.collapsedSpan
	labels := c.labels()
	*labels = *s.labels()
	for f := range labels {
		if rejected&(1<<f) != 0 {
			labels[f] = BlockedValue
		}
	}
	c.HTTPStatusCode, c.TraceRoot, c.Synthetics = s.HTTPStatusCode, s.TraceRoot, s.Synthetics
	clear(c.PeerTags[:c.NumPeerTags]) // do not pin the last span's tags
	n := copy(c.PeerTags[:], kept)
	c.NumPeerTags, c.ExtraPeerTags = uint8(n), nil
	if len(kept) > n {
		c.ExtraPeerTags = kept[n:] // scratch: never cached
	}
	return c
}

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
		// A tag past the peer-key cap is a bare BlockedValue, which a
		// span's own tag of those bytes shares, though its key drops it
		// (no colon): the caches could swap the two keys' entries.
		// Likewise a collapsed span kind with the lone base-service tag,
		// kept only because the span's own kind is internal or empty: a
		// span whose kind reads tracer_blocked_value keeps no such tag.
		// And a tag whose value quantized to nothing ("peer.hostname:,"
		// gives "peer.hostname:"), kept as the agent keeps it, which a
		// span carrying "peer.hostname:" itself drops.
		cache := (rejected&(1<<FieldPeerTags) == 0 || !slices.Contains(kept, BlockedValue)) &&
			(rejected&(1<<FieldSpanKind) == 0 || len(kept) == 0) &&
			!slices.ContainsFunc(kept, emptyValue)
		if e = nil; cache {
			e = t.cachedEntry(c)
		}
		if e == nil {
			b := t.encodeKey(c, t.sortedPeers(kept))
			h := hash(b)
			if e = t.lookup(h, b[seedLen:]); e == nil {
				e = t.insert(h, b[seedLen:])
			}
			e.epoch = t.epoch
			if cache {
				t.remember(c, e)
			}
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
		k.flags != s.flags() {
		return false
	}
	// A field in rejected is BlockedValue in the memo's key, as in s's
	// collapsed key: only the others need comparing. Unrolled as in admit.
	a, b, r := (*[9]string)(&k.fields), (*[9]string)(s.labels()), rejected
	if !sameUnless(a[0], b[0], r&(1<<0)) || !sameUnless(a[1], b[1], r&(1<<1)) ||
		!sameUnless(a[2], b[2], r&(1<<2)) || !sameUnless(a[3], b[3], r&(1<<3)) ||
		!sameUnless(a[4], b[4], r&(1<<4)) || !sameUnless(a[5], b[5], r&(1<<5)) ||
		!sameUnless(a[6], b[6], r&(1<<6)) || !sameUnless(a[7], b[7], r&(1<<7)) ||
		!sameUnless(a[8], b[8], r&(1<<8)) {
		return false
	}
	for i, p := range kept { // len(kept) == numPeers <= recentPeers
		if !same(k.peers[i], p) {
			return false
		}
	}
	return true
}

// sameUnless is same(a, b), or true when the field was collapsed.
func sameUnless(a, b string, collapsed uint16) bool { return collapsed != 0 || same(a, b) }

// Collapsed is the number of spans whose field f was replaced by
// BlockedValue (for FieldPeerTags: one or more of their peer tags).
func (t *Table) Collapsed(f Field) uint64 {
	n := t.collapsed[f]
	if f != FieldPeerTags && t.runMask&(1<<f) != 0 {
		n += t.runLen
	}
	return n
}

// endRun adds the current run of spans collapsed in the same fields to the
// per-field counts.
func (t *Table) endRun() {
	for f := range FieldPeerTags {
		if t.runMask&(1<<f) != 0 {
			t.collapsed[f] += t.runLen
		}
	}
	t.runLen = 0
}

// CollapsedSpans is the number of spans with at least one collapsed field.
func (t *Table) CollapsedSpans() uint64 { return t.collapsedSpans }

// emptyValue reports whether a kept peer tag has no value after its colon.
func emptyValue(tag string) bool { return strings.HasSuffix(tag, ":") }
