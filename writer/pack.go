// This file holds Packer and Split: groups packed into complete payloads
// under a byte limit, and a payload the agent refused as too large
// re-encoded as smaller ones.

package writer

import (
	"errors"

	"github.com/spanstats/spanstats/aggregate"
)

// ErrUnsplittable: Split was given a payload of fewer than two groups.
var ErrUnsplittable = errors.New("writer: a payload of one group cannot be split")

// A Packer packs groups, in order, into complete payloads of at most Limit
// bytes and MaxBuckets buckets each. Each payload carries the header and, of each bucket, the
// groups that fit, so a bucket may continue in the next payload; groups
// are additive, so the agent (or a relay) sums them back. A group whose
// payload alone exceeds Limit is still emitted, alone: it is never dropped,
// and sending it is the caller's decision. Buckets without groups, and nil
// entries, are left out; no groups, no payload.
//
// A Packer is a value to reuse; it keeps nothing between calls.
type Packer struct {
	// Limit is the most bytes of one payload.
	Limit int
	// Alloc returns an empty buffer with room for n bytes, the bound of
	// the payload it is for: a payload is written with no other
	// allocation. Nil means make.
	Alloc func(n int) []byte
	// Sequence, if not nil, numbers the payloads: each is written with
	// Sequence() as its header's Sequence. Nil keeps the header's.
	Sequence func() uint64
	// Reserve bytes are left before each payload, in its buffer, for the
	// caller to fill (the datagram envelope); the emitted body starts with
	// them. Limit does not count them.
	Reserve int
	// Halt, if not nil, is asked every haltEvery groups whether to give up:
	// Pack then returns at once, the payloads emitted so far emitted, the
	// rest not (a caller out of time, whose report is dropped whole).
	Halt func() bool
}

// haltEvery is how many groups Pack and TypeSplitter.Split lay out between
// two looks at Halt: about 0.1 ms of work for groups of short labels, a few
// ms at the label length limits (TestStopGivesUpWhileEncoding in stats).
const haltEvery = 1024

// Pack packs the SDK's entries: the buckets' groups under the header h.
// emit is called once per payload, in order, with its body (from Alloc,
// the caller's from then on) and the spans it counts (the groups' Hits).
func (p *Packer) Pack(h *Header, buckets []Bucket, emit func(body []byte, hits uint64)) {
	pack(p, h, entryBuckets(buckets), emit)
}

// PackPayload packs decoded (or merged) groups, keeping the fields the SDK
// never sets (DBType, SpanDerivedPrimaryTags, AdditionalMetricTags); emit
// as for Pack.
func (p *Packer) PackPayload(pl *Payload, emit func(body []byte, hits uint64)) {
	pack(p, &pl.Header, decodedBuckets(pl.Buckets), emit)
}

// Split answers a 413: the payload body is decoded and re-encoded as two or
// more complete payloads of at most about half its size, except a group
// larger than that, alone in its own: usually two, often with a third
// holding a group or so, what the first left unused below its limit; each is emitted as by Pack, with a buffer from alloc
// (nil: make) and the header's Sequence.
// It returns ErrUnsplittable, having emitted nothing, if the payload has
// fewer than two groups, and DecodePayload's error if it does not decode.
func Split(body []byte, alloc func(n int) []byte, emit func(body []byte, hits uint64)) error {
	pl, err := DecodePayload(body)
	if err != nil {
		return err
	}
	groups, content := 0, 0
	for i := range pl.Buckets {
		if len(pl.Buckets[i].Groups) > 0 { // pack leaves empty buckets out
			content += bucketHeaderSize
		}
		for j := range pl.Buckets[i].Groups {
			groups++
			content += pl.Buckets[i].Groups[j].Size()
		}
	}
	if groups < 2 {
		return ErrUnsplittable
	}
	// Half the groups' bytes each, plus a bucket header for a bucket the cut
	// goes through: less than the whole, so at least two payloads.
	fixed := HeaderSize(&pl.Header) - bucketHeaderSize
	p := Packer{Limit: fixed + (content+1)/2 + bucketHeaderSize, Alloc: alloc}
	p.PackPayload(pl, emit)
	return nil
}

// pack is Pack and PackPayload: the one splitter. (Generic rather than on
// the interface, which would box src: an allocation per AppendPayload.)
func pack[S groupSource](p *Packer, h *Header, src S, emit func([]byte, uint64)) {
	if h == nil {
		h = &emptyHeader
	}
	fixed := HeaderSize(h) - bucketHeaderSize
	from, size, hits, groups, buckets := cut{}, fixed, uint64(0), 0, 0
	flush := func(to cut) {
		if groups > 0 {
			emitPart(p, h, src, from, to, size, hits, emit)
		}
		from, size, hits, groups, buckets = to, fixed, 0, 0, 0
	}
	seen := 0
	for i := range src.buckets() {
		inPart := false // bucket i has a group in the current payload
		for j := range src.groups(i) {
			e, g := src.group(i, j)
			if e == nil {
				continue
			}
			if seen++; seen%haltEvery == 0 && p.Halt != nil && p.Halt() {
				return
			}
			gs := groupSize(e, g)
			if !inPart {
				gs += bucketHeaderSize
			}
			// At most MaxBuckets buckets a payload: one the decoder (a
			// relay's, or Split's after a 413) refuses is never written.
			if groups > 0 && (size+gs > p.Limit || !inPart && buckets == MaxBuckets) {
				flush(cut{i, j})
				if inPart {
					gs += bucketHeaderSize
				}
			}
			if !inPart || groups == 0 {
				buckets++
			}
			size += gs
			hits += e.Hits
			groups++
			inPart = true
		}
	}
	flush(cut{src.buckets(), 0})
}

// emitPart writes the payload of the groups from up to to, of at most size
// bytes, into one buffer and hands it on.
func emitPart[S groupSource](p *Packer, h *Header, src S, from, to cut, size int, hits uint64, emit func([]byte, uint64)) {
	if p.Sequence != nil {
		numbered := *h
		numbered.Sequence = p.Sequence()
		h = &numbered
	}
	var b []byte
	if p.Alloc != nil {
		b = p.Alloc(p.Reserve + size)
	}
	b = grow(b[:0], p.Reserve+size)[:p.Reserve]
	emit(appendPayload(b, h, src, from, to, false), hits)
}

// groupSource is what appendPayload and pack read: the SDK's entries, or
// decoded groups with the fields the SDK never sets.
type groupSource interface {
	buckets() int
	head(i int) (start, duration uint64, shift int64)
	groups(i int) int
	// group returns group j of bucket i: its entry (nil: skip it) and, for
	// a decoded group, the group.
	group(i, j int) (*aggregate.Entry, *Group)
}

type entryBuckets []Bucket

func (s entryBuckets) buckets() int     { return len(s) }
func (s entryBuckets) groups(i int) int { return len(s[i].Groups) }
func (s entryBuckets) head(i int) (uint64, uint64, int64) {
	return s[i].Start, s[i].Duration, s[i].AgentTimeShift
}
func (s entryBuckets) group(i, j int) (*aggregate.Entry, *Group) { return s[i].Groups[j], nil }

type decodedBuckets []DecodedBucket

func (s decodedBuckets) buckets() int     { return len(s) }
func (s decodedBuckets) groups(i int) int { return len(s[i].Groups) }
func (s decodedBuckets) head(i int) (uint64, uint64, int64) {
	return s[i].Start, s[i].Duration, s[i].AgentTimeShift
}
func (s decodedBuckets) group(i, j int) (*aggregate.Entry, *Group) {
	g := &s[i].Groups[j]
	return &g.Entry, g
}

// groupRange is the range of groups of bucket i between from and to.
func groupRange[S groupSource](src S, i int, from, to cut) (j0, j1 int) {
	j0, j1 = 0, src.groups(i)
	if i == from.i {
		j0 = from.j
	}
	if i == to.i {
		j1 = to.j
	}
	return j0, j1
}

// present counts the groups of bucket i between from and to that are
// written (not nil).
func present[S groupSource](src S, i int, from, to cut) int {
	n := 0
	j0, j1 := groupRange(src, i, from, to)
	for j := j0; j < j1; j++ {
		if e, _ := src.group(i, j); e != nil {
			n++
		}
	}
	return n
}

// groupSize is GroupSize(e) plus the fields of g the SDK never sets.
func groupSize(e *aggregate.Entry, g *Group) int {
	n := GroupSize(e)
	if g != nil {
		// GroupSize counts an empty DBType and two empty arrays.
		n += strSize(g.DBType) - 1 + arraySize(g.SpanDerivedPrimaryTags) - 1 + arraySize(g.AdditionalMetricTags) - 1
		// With Wire summaries e's sketches are nil, counted as empty
		// sketches in bins with one-byte lengths: a bound, then.
		if g.Wire != nil {
			n += binSize(len(g.Wire.Ok.b)) + binSize(len(g.Wire.Err.b))
		}
	}
	return n
}

// Size is an upper bound of the bytes Append writes for g (exact without
// Wire summaries).
func (g *Group) Size() int { return groupSize(&g.Entry, g) }

// Append appends g as one msgpack ClientGroupedStats map, as AppendGroup
// does, with its DBType, SpanDerivedPrimaryTags and AdditionalMetricTags,
// and its Wire summaries as they came when it has them.
func (g *Group) Append(b []byte) []byte { return appendGroup(b, &g.Entry, g) }

// Append appends p as one complete msgpack ClientStatsPayload, as
// AppendPayload does, with every field of its groups (see Group.Append).
// It grows b at most once.
func (p *Payload) Append(b []byte) []byte {
	src := decodedBuckets(p.Buckets)
	n := HeaderSize(&p.Header) - bucketHeaderSize
	for i := range p.Buckets {
		n += bucketHeaderSize
		for j := range p.Buckets[i].Groups {
			n += p.Buckets[i].Groups[j].Size()
		}
	}
	return appendPayload(grow(b, n), &p.Header, src, cut{}, cut{len(p.Buckets), 0}, true)
}
