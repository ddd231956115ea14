// This file holds the held state and the merge into it: identities,
// windows and groups, and the bounds on what they hold (MaxGroups,
// MaxHeldBytes) with the overflow group beyond them.

package relay

import (
	"unsafe"

	"github.com/spanstats/spanstats/aggregate"
	"github.com/spanstats/spanstats/writer"
)

// DropMaxGroups is the Dropped reason of spans the relay itself could not
// hold: MaxGroups reached and every overflow group's reserve in use (see
// overflowReserve).
const DropMaxGroups = "max_groups"

// DropMaxBytes is the Dropped reason of spans the relay could not hold
// within MaxHeldBytes: no room left even for an overflow group.
const DropMaxBytes = "max_bytes"

// overflowReserve is how many of max groups are kept for overflow groups,
// one per identity and window at the bound: a new label group is created only
// below max-reserve, an overflow group only below max. At least two, so
// that one sender's two windows (the previous one's grace running) each
// fold (TestOneSenderFoldsInTwoWindows).
func overflowReserve(max int) int { return max/64 + 2 }

// bytesReserve is the part of MaxHeldBytes kept for overflow groups (and the
// identities and windows they need), as overflowReserve is of MaxGroups.
func bytesReserve(max int) int { return max / 16 }

// What held state costs besides its strings and sketches, approximately:
// the structs, their entries in the maps that index them, and the map each
// window (its groups' index) and identity (its windows) starts. A group's
// slots in its window's arrays are counted by their capacity (window.add).
const (
	groupOverhead = 32
	// smallMapBytes is what a map of up to eight 16-byte slots takes: its
	// header and one group of slots; a window or identity of one group
	// costs more in its map than in its struct.
	smallMapBytes    = 48 + 8 + 8*16
	windowOverhead   = int(unsafe.Sizeof(window{})) + smallMapBytes + 32
	identityOverhead = int(unsafe.Sizeof(identity{})) + smallMapBytes + 32
	// An overflow group's two sketches are reserved at their largest
	// when it is created; their growth is then not tracked.
	overflowBytes = groupOverhead + 2*aggregate.MaxSketchBytes
)

// sketchBytes is what a held sketch (nil: none) takes.
func sketchBytes(s *aggregate.Sketch) int {
	if s == nil {
		return 0
	}
	return s.HeapBytes()
}

// labelBytes is what a group's strings take once owned: their bytes and the
// headers of its tag lists.
func labelBytes(g *writer.Group) int {
	return groupBytes(g) + 16*(len(g.PeerTags)+len(g.SpanDerivedPrimaryTags)+len(g.AdditionalMetricTags))
}

// newGroupBytes is about what holding g as a new label group costs: its
// summaries are added to sketches of their own (see WireSketch.HeapBytes).
func newGroupBytes(g *writer.Group) int {
	n := groupOverhead + labelBytes(g)
	if g.Wire != nil {
		n += g.Wire.Ok.HeapBytes() + g.Wire.Err.HeapBytes()
	}
	return n
}

// mergeGrowth is at most what merging g into held raises what held takes
// (0: nothing): a merge is refused before it would pass the bound, as a
// new group is, since one merge can grow a sketch by a whole store.
func mergeGrowth(held, g *writer.Group) int {
	if g.Wire == nil {
		return 0
	}
	growth := func(h *aggregate.Sketch, o *writer.WireSketch) int {
		if o.Count() == 0 {
			return 0
		}
		lo, hi, bins := o.Bins()
		switch {
		case h == nil:
			return o.HeapBytes() // a sketch of its own, as newGroupBytes charges
		case !bins:
			return 0
		default:
			return h.RangeGrowth(lo, hi)
		}
	}
	return growth(held.Ok, &g.Wire.Ok) + growth(held.Err, &g.Wire.Err)
}

// growsPast reports whether merging g into held may take the held bytes
// past limit; a merge that grows nothing never does.
func growsPast(held, g *writer.Group, bytes, limit int) bool {
	grow := mergeGrowth(held, g)
	return grow > 0 && bytes+grow > limit
}

// addSketches adds g's summaries to held's sketches, creating them as
// needed.
func addSketches(dec *writer.Decoder, held, g *writer.Group) {
	if g.Wire == nil {
		return
	}
	for _, p := range [...]struct {
		into **aggregate.Sketch
		w    *writer.WireSketch
	}{{&held.Ok, &g.Wire.Ok}, {&held.Err, &g.Wire.Err}} {
		if p.w.Count() == 0 {
			continue
		}
		if *p.into == nil {
			*p.into = new(aggregate.Sketch)
		}
		dec.AddSketch(*p.into, p.w)
	}
}

// headerBytes is what an identity's owned header takes: its strings and
// the headers of its tags.
func headerBytes(hd *writer.Header) int { return headerStrBytes(hd) + 16*len(hd.Tags) }

// identity is the held state of one payload identity.
type identity struct {
	hdr     writer.Header // RuntimeID and Sequence zero; strings owned
	hash    uint64
	local   bool      // its senders share the relay's cgroup (Batch.Local)
	next    *identity // same hash
	windows map[uint64]*window
	bytes   int // its own (not its windows'), counted in state.bytes
}

// window is the merged bucket of one identity and interval-aligned window.
type window struct {
	start, end uint64 // earliest start (not before the window), latest end of the merged buckets
	groups     []writer.Group
	hashes     []uint64      // full key hash of each group
	typeless   []typelessKey // for splitByType
	next       []int32       // next group with the same full hash, -1 none
	index      map[uint64]int32
	hits       uint64
	bytes      int   // its own and its groups', counted in state.bytes
	overflow   int32 // the overflow group the relay created in it, -1 none
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

// groupSlotBytes is what one group takes in a window's arrays (groups,
// hashes, typeless, next).
const groupSlotBytes = int(unsafe.Sizeof(writer.Group{})) + 8 + int(unsafe.Sizeof(typelessKey{})) + 4

// arrayBytes is what w's group arrays take, by capacity: append leaves up to
// half of them empty, which for windows of a few small groups is more than
// the groups' own strings (TestHeldBytesCountSmallWindows).
func (w *window) arrayBytes() int {
	return cap(w.groups)*int(unsafe.Sizeof(writer.Group{})) + 8*cap(w.hashes) +
		cap(w.typeless)*int(unsafe.Sizeof(typelessKey{})) + 4*cap(w.next)
}

// addGrowth is about what adding a group to w (nil: a window to create)
// raises arrayBytes by: nothing while its arrays have room, else what
// append grows them by (twice as long while short, a quarter longer past
// 256 groups), less what they held.
func (w *window) addGrowth() int {
	if w == nil {
		return groupSlotBytes
	}
	n, c := len(w.groups), min(cap(w.groups), cap(w.hashes), cap(w.typeless), cap(w.next))
	if n < c {
		return 0
	}
	grown := 2 * c
	if c >= 256 {
		grown = c + (c+3*256)/4
	}
	return max(grown*groupSlotBytes-w.arrayBytes(), 0)
}

// add appends a group of g's key (its strings copied) with empty values.
// It returns its index and what arrayBytes grew by.
func (w *window) add(g *writer.Group, h uint64, typeless typelessKey) (int32, int) {
	arrays := w.arrayBytes()
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
	return i, w.arrayBytes() - arrays
}

// state is everything held between harvests. Guarded by Relay.mu.
type state struct {
	ids       map[uint64]*identity
	interval  uint64 // ns
	maxGroups int
	maxBytes  int
	groups    int // held, overflow groups included, and outGroups
	bytes     int // held, approximately (see MaxHeldBytes), and outBytes
	// outGroups and outBytes are the part of groups and bytes harvested
	// and not yet Released: charged until the round sends them.
	outGroups, outBytes int
	round               uint64 // harvests so far
	hits                uint64 // held
	folded              uint64 // spans folded into overflow groups
	overflowed          uint64 // overflow groups created
	harvested           uint64 // the latest round's boundary (unix ns; see harvest)
	late                uint64 // spans merged into a window harvested already
}

// prepared is one checked payload ready to merge: its tag lists are sets and
// every group's key hash is computed, outside the lock (a group new to its
// window takes its typeless hash under it, with h).
type prepared struct {
	p      *writer.Payload
	dec    *writer.Decoder // p's, for its summaries (AddSketch)
	idHash uint64
	local  bool     // from a sender sharing the relay's cgroup (Batch.Local)
	h      *hasher  // prepare's, for the typeless hash of a new group
	full   []uint64 // per group with hits, in payload order
	hits   uint64
}

// overflowHashes are overflowGroup's hashes under the relay's seed: full
// and typeless.
type overflowHashes struct {
	full     uint64
	typeless typelessKey
}

func (s *state) identity(pp *prepared, create bool) *identity {
	id := s.ids[pp.idHash]
	for ; id != nil; id = id.next {
		if id.local == pp.local && sameIdentity(&id.hdr, &pp.p.Header) {
			return id
		}
	}
	if !create {
		return nil
	}
	id = &identity{hdr: pp.p.Header, hash: pp.idHash, local: pp.local, windows: make(map[uint64]*window)}
	id.hdr.RuntimeID, id.hdr.Sequence = "", 0
	ownHeader(&id.hdr)
	id.bytes = identityOverhead + headerBytes(&id.hdr)
	s.bytes += id.bytes
	id.next = s.ids[pp.idHash]
	s.ids[pp.idHash] = id
	return id
}

// merge adds a prepared payload; it returns the spans dropped at the
// bounds, by reason.
//
// A group of a new label key is created below both bounds less their
// reserves, and a held group takes a merge that would grow its sketches
// only then too; otherwise the group's spans fold into its identity and
// window's overflow group, created below the full bounds. What even that
// cannot take is dropped.
func (s *state) merge(pp *prepared, ov overflowHashes, now uint64) (droppedGroups, droppedBytes uint64) {
	if s.ids == nil {
		s.ids = make(map[uint64]*identity)
	}
	id := s.identity(pp, false)
	next := 0 // index in pp.full of the next group with hits
	groupLimit := s.maxGroups - overflowReserve(s.maxGroups)
	byteLimit := s.maxBytes - bytesReserve(s.maxBytes)
	for bi := range pp.p.Buckets {
		b := &pp.p.Buckets[bi]
		// The window of the bucket's end (Duration > 0, checked): by its
		// start, a bucket longer than the interval or across a boundary
		// would be in a window forwarded before the bucket even closed,
		// and every span of it late whatever the grace. An end past now
		// (a sender's clock behind, or a hostile bucket an hour long)
		// counts as now: such a bucket is not held, against -max-groups,
		// until a window that far ahead closes.
		ws := windowOf(max(min(b.Start+b.Duration-1, now), b.Start), s.interval)
		late := ws+s.interval <= s.harvested // its round has forwarded this window
		var w *window
		if id != nil {
			w = id.windows[ws]
		}
		// newCost is what creating a group of cost c in w costs, with the
		// window and identity it may need.
		newCost := func(c int) int {
			if w == nil {
				c += windowOverhead
				if id == nil {
					c += identityOverhead + headerBytes(&pp.p.Header)
				}
			}
			return c
		}
		merged := false // a bucket that adds no span to w leaves its times alone
		for gi := range b.Groups {
			g := &b.Groups[gi]
			if g.Hits == 0 {
				continue // nothing to count; holding it would only cost memory
			}
			gh := pp.full[next]
			next++
			i := int32(-1)
			if w != nil {
				i = w.find(gh, g)
			}
			fold := false
			switch {
			case i >= 0 && gh == ov.full && sameGroup(g, &overflowGroup):
				// A sender's own overflow-keyed group would fold into the
				// group it found anyway (the relay's overflow group, or the
				// one such a group started): not folded by the relay
				// (TestSenderOverflowIsNotFolded). Unless it is the relay's
				// own, reserved at its full size, it grows as any group
				// does, within MaxHeldBytes (TestSenderOverflowGrowthBounded).
				if i != w.overflow && growsPast(&w.groups[i], g, s.bytes, s.maxBytes) {
					droppedBytes += g.Hits
					continue
				}
			case i >= 0:
				fold = growsPast(&w.groups[i], g, s.bytes, byteLimit)
			case s.groups >= groupLimit:
				fold = true
			default:
				if s.bytes+newCost(newGroupBytes(g)+w.addGrowth()) > byteLimit {
					fold = true
					break
				}
				// Its sketches are counted as they grow, below.
				w, id = s.window(pp, id, w, ws, b)
				var grew int
				i, grew = w.add(g, gh, pp.h.typeless(g))
				s.groups++
				s.hold(w, groupOverhead+labelBytes(&w.groups[i])+grew)
			}
			if fold {
				i = -1
				if w != nil {
					i = w.find(ov.full, &overflowGroup)
				}
				switch {
				case i >= 0:
					if i != w.overflow && growsPast(&w.groups[i], g, s.bytes, s.maxBytes) {
						// A sender's own overflow-keyed group, grown
						// as any label group: no room left.
						droppedBytes += g.Hits
						continue
					}
				case s.groups >= s.maxGroups:
					droppedGroups += g.Hits
					continue
				case s.bytes+newCost(overflowBytes+w.addGrowth()) > s.maxBytes:
					droppedBytes += g.Hits
					continue
				default:
					w, id = s.window(pp, id, w, ws, b)
					var grew int
					i, grew = w.add(&overflowGroup, ov.full, ov.typeless)
					w.overflow = i
					s.groups++
					s.overflowed++
					s.hold(w, overflowBytes+grew)
				}
				s.folded += g.Hits
			}
			merged = true
			held := &w.groups[i]
			before := sketchBytes(held.Ok) + sketchBytes(held.Err)
			held.Merge(&g.Entry)
			addSketches(pp.dec, held, g)
			if i != w.overflow { // an overflow group's sketches are reserved
				s.hold(w, sketchBytes(held.Ok)+sketchBytes(held.Err)-before)
			}
			w.hits += g.Hits
			s.hits += g.Hits
			if late {
				s.late += g.Hits
			}
		}
		if merged {
			w.start = min(w.start, startIn(b, ws))
			w.end = max(w.end, b.Start+b.Duration)
		}
	}
	return droppedGroups, droppedBytes
}

// window returns w, or creates the window ws of bucket b in id (created
// too if nil).
func (s *state) window(pp *prepared, id *identity, w *window, ws uint64, b *writer.DecodedBucket) (*window, *identity) {
	if w != nil {
		return w, id
	}
	if id == nil {
		id = s.identity(pp, true)
	}
	w = &window{start: startIn(b, ws), end: b.Start + b.Duration, index: make(map[uint64]int32), overflow: -1}
	id.windows[ws] = w
	s.hold(w, windowOverhead)
	return w, id
}

// startIn is where bucket b, merged into window ws, starts the merged
// bucket: its own start, not before ws. A bucket longer than the interval
// (a sender at a longer BucketInterval, or a span's worth of a 59-minute
// one) would otherwise date every sender's spans of the window before it,
// and the agent (v0.85.4) files a bucket older than its oldest open one
// there: in the previous interval (TestLongBucketMisdatesNoOne).
func startIn(b *writer.DecodedBucket, ws uint64) uint64 {
	return max(b.Start, ws)
}

// hold counts n more bytes held in w.
func (s *state) hold(w *window, n int) {
	w.bytes += n
	s.bytes += n
}

// windowOf is the start of the window holding t (unix ns): aligned on the
// epoch, as the agent aligns buckets and the forwarder's boundaries
// (boundaryAfter) end windows.
func windowOf(t, interval uint64) uint64 {
	return t - t%interval
}
