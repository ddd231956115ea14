// This file owns the collapsed-key path: turning the budgets on, deciding
// a span's fields against them (admit), counting what they collapse, and
// finding the entry of a span whose fields were collapsed.

package aggregate

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
	var rejected uint16 // bit per Field
	for f, v := range s.labels() {
		if !b.fields[f].ok(v, ep) {
			rejected |= 1 << f
		}
	}
	for i, p := range kept {
		if vs := b.peerSetCached(i, p); !vs.ok(p, ep) {
			t.collapsed[FieldPeerTags]++
			kept[i] = vs.blocked
			rejected |= 1 << FieldPeerTags
		}
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
		k.flags != s.flags() {
		return false
	}
	// A field in rejected is BlockedValue in the memo's key, as in s's
	// collapsed key: only the others need comparing.
	r := rejected
	for f, v := range s.labels() {
		if r&1 == 0 && !same(k.fields[f], v) {
			return false
		}
		r >>= 1
	}
	for i, p := range kept { // len(kept) == numPeers <= recentPeers
		if !same(k.peers[i], p) {
			return false
		}
	}
	return true
}

// Collapsed is the number of values of field f replaced by BlockedValue.
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
