package relay

import (
	"github.com/spanstats/spanstats/writer"
)

// DropMaxGroups is the Dropped reason of spans the relay itself could not
// hold: MaxGroups reached and every overflow group's reserve in use (see
// overflowReserve).
const DropMaxGroups = "max_groups"

// overflowReserve is how many of max groups are kept for overflow groups,
// one per identity and window at the bound: a new label group is created only
// below max-reserve, an overflow group only below max.
func overflowReserve(max int) int { return max/64 + 1 }

// identity is the held state of one payload identity.
type identity struct {
	hdr     writer.Header // RuntimeID and Sequence zero; strings owned
	hash    uint64
	next    *identity // same hash
	windows map[uint64]*window
}

// window is the merged bucket of one identity and interval-aligned window.
type window struct {
	start, end uint64 // earliest start, latest end of the merged buckets
	groups     []writer.Group
	hashes     []uint64 // full key hash of each group
	typeless   []uint64 // key hash without Type, for splitByType
	next       []int32  // next group with the same full hash, -1 none
	index      map[uint64]int32
	hits       uint64
}

func (w *window) find(h uint64, g *writer.Group) int32 {
	i, ok := w.index[h]
	if !ok {
		return -1
	}
	for ; i >= 0; i = w.next[i] {
		if sameGroup(&w.groups[i], g) {
			return i
		}
	}
	return -1
}

// add appends a group of g's key (its strings copied) with empty values.
func (w *window) add(g *writer.Group, h, typeless uint64) int32 {
	ng := writer.Group{DBType: g.DBType, SpanDerivedPrimaryTags: g.SpanDerivedPrimaryTags,
		AdditionalMetricTags: g.AdditionalMetricTags}
	ng.Key = g.Key
	ownGroup(&ng)
	i := int32(len(w.groups))
	w.groups = append(w.groups, ng)
	w.hashes = append(w.hashes, h)
	w.typeless = append(w.typeless, typeless)
	head, ok := w.index[h]
	if !ok {
		head = -1
	}
	w.next = append(w.next, head)
	w.index[h] = i
	return i
}

// state is everything held between harvests. Guarded by Relay.mu.
type state struct {
	ids        map[uint64]*identity
	interval   uint64 // ns
	maxGroups  int
	groups     int    // held, overflow groups included
	hits       uint64 // held
	folded     uint64 // spans folded into overflow groups
	overflowed uint64 // overflow groups created
}

// prepared is one checked payload ready to merge: its tag lists are sets and
// every group's hashes are computed, outside the lock.
type prepared struct {
	p        *writer.Payload
	idHash   uint64
	full     []uint64 // per group with hits, in payload order
	typeless []uint64
	hits     uint64
}

// ovHash, ovTypeless are overflowGroup's hashes under the relay's seed.
type overflowHashes struct{ full, typeless uint64 }

func (s *state) identity(pp *prepared, create bool) *identity {
	id := s.ids[pp.idHash]
	for ; id != nil; id = id.next {
		if sameIdentity(&id.hdr, &pp.p.Header) {
			return id
		}
	}
	if !create {
		return nil
	}
	id = &identity{hdr: pp.p.Header, hash: pp.idHash, windows: make(map[uint64]*window)}
	id.hdr.RuntimeID, id.hdr.Sequence = "", 0
	ownHeader(&id.hdr)
	id.next = s.ids[pp.idHash]
	s.ids[pp.idHash] = id
	return id
}

// merge adds a prepared payload; it returns the spans dropped at the bound.
func (s *state) merge(pp *prepared, ov overflowHashes) (dropped uint64) {
	if s.ids == nil {
		s.ids = make(map[uint64]*identity)
	}
	id := s.identity(pp, false)
	next := 0 // index in pp.full of the next group with hits
	for bi := range pp.p.Buckets {
		b := &pp.p.Buckets[bi]
		ws := b.Start - b.Start%s.interval
		var w *window
		if id != nil {
			w = id.windows[ws]
		}
		for gi := range b.Groups {
			g := &b.Groups[gi]
			if g.Hits == 0 {
				continue // nothing to count; holding it would only cost memory
			}
			gh, gth := pp.full[next], pp.typeless[next]
			next++
			i := int32(-1)
			if w != nil {
				i = w.find(gh, g)
			}
			if i < 0 {
				h, th, key := gh, gth, g
				limit := s.maxGroups - overflowReserve(s.maxGroups)
				if s.groups >= limit {
					s.folded += g.Hits
					h, th, key, limit = ov.full, ov.typeless, &overflowGroup, s.maxGroups
					if w != nil {
						i = w.find(h, key)
					}
				}
				if i < 0 {
					if s.groups >= limit {
						s.folded -= g.Hits
						dropped += g.Hits
						continue
					}
					if w == nil {
						if id == nil {
							id = s.identity(pp, true)
						}
						w = &window{start: b.Start, end: b.Start + b.Duration, index: make(map[uint64]int32)}
						id.windows[ws] = w
					}
					if key == &overflowGroup {
						s.overflowed++
					}
					i = w.add(key, h, th)
					s.groups++
					if key == g { // the decoded sketches are ours: move them, not copy
						w.groups[i].Ok, w.groups[i].Err = g.Ok, g.Err
						g.Ok, g.Err = nil, nil
					}
				}
			}
			w.groups[i].Merge(&g.Entry)
			w.hits += g.Hits
			s.hits += g.Hits
		}
		if w != nil {
			w.start = min(w.start, b.Start)
			w.end = max(w.end, b.Start+b.Duration)
		}
	}
	return dropped
}
