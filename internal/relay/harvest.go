// This file holds the harvest: the windows an interval boundary has
// closed, taken out of the held state as one payload per identity (Batch).

package relay

import (
	"slices"

	"github.com/spanstats/spanstats/writer"
)

// Batch is what Harvest hands the forwarder for one identity: a payload
// ready to encode (the identity's header, ContainerID included; RuntimeID
// and Sequence are the forwarder's to set) and the hits in it, which the
// forwarder reports back with Forwarded or Dropped.
type Batch struct {
	writer.Payload
	Hits uint64
	// Local: the senders share the relay's cgroup file, and have no
	// container id the relay can read (a container in a private cgroup
	// namespace shows "0::/" from inside). The agent files a request
	// without a container header under the relay's own container, found
	// from its socket's credentials: theirs too.
	Local bool
	// groups and bytes are what the batch's windows took in the state
	// (state.groups, state.bytes), and its identity's header when the batch
	// took the identity's last window: charged there until Release, so that a
	// round slow to send them does not let new groups fill the bound anew
	// beside them.
	groups, bytes int
	round         uint64 // the harvest's (state.round)
}

// HasContainer reports whether the batch has a container id. Without one it
// must not be forwarded over the agent's Unix socket from a relay in a
// container, which would file it under the relay's container, unless it is
// Local.
func (b *Batch) HasContainer() bool { return b.ContainerID != "" }

// harvest removes and returns the windows that end at or before boundary
// (unix ns), one Batch per identity, windows in start order; now (unix ns)
// places the round, whose boundary marks what comes late from then on.
func (s *state) harvest(boundary, now uint64, dst []Batch) []Batch {
	// The previous round is over: what it did not Release goes now.
	s.groups -= s.outGroups
	s.bytes -= s.outBytes
	s.outGroups, s.outBytes = 0, 0
	s.round++
	// The round's boundary, back with the wall clock when it steps back. A
	// boundary past the current window's end is no round's but everything
	// held (a clock stepped back, the stop): windows that had not ended are
	// not late, or every span would be from then on.
	s.harvested = boundary
	if cur := windowOf(now, s.interval); boundary > cur+s.interval {
		s.harvested = cur
	}
	for h, id := range s.ids {
		var prev *identity
		for cur := id; cur != nil; cur = cur.next {
			if b, ok := s.harvestIdentity(cur, boundary); ok {
				dst = append(dst, b)
			} else if len(cur.windows) == 0 {
				s.bytes -= cur.bytes // no batch carries its header
			}
			if len(cur.windows) == 0 { // unlink
				if prev == nil {
					s.ids[h] = cur.next
				} else {
					prev.next = cur.next
				}
				continue
			}
			prev = cur
		}
		if s.ids[h] == nil {
			delete(s.ids, h)
		}
	}
	return dst
}

func (s *state) harvestIdentity(id *identity, boundary uint64) (Batch, bool) {
	var starts []uint64
	for ws := range id.windows {
		if ws+s.interval <= boundary {
			starts = append(starts, ws)
		}
	}
	if len(starts) == 0 {
		return Batch{}, false
	}
	slices.Sort(starts)
	b := Batch{Payload: writer.Payload{Header: id.hdr}, Local: id.local, round: s.round}
	for _, ws := range starts {
		w := id.windows[ws]
		delete(id.windows, ws)
		b.Buckets = splitByType(b.Buckets, w)
		b.Hits += w.hits
		s.hits -= w.hits
		b.groups += len(w.groups)
		b.bytes += w.bytes
	}
	if len(id.windows) == 0 {
		b.bytes += id.bytes // its header goes on in the batch, charged with it
	}
	s.outGroups += b.groups
	s.outBytes += b.bytes
	return b, true
}

// splitByType appends w as buckets of w's start and length. The agent
// (v0.85.4) merges the groups of a bucket by a key that leaves out Type,
// DBType and SpanDerivedPrimaryTags (crediting one group's counts to the
// other's Type), so groups that differ only in those go to separate
// buckets of the same start: the groups of the n-th (Type, DBType,
// SpanDerivedPrimaryTags) of a typeless key go to the n-th bucket. Groups
// of one key and one of those share a bucket: whatever of them the agent
// merges, it files under their own Type.
//
// The agent rewrites Resource and HTTPStatusCode before it merges, by
// rules only it knows (its obfuscation of some Types' resources, the
// operator's replace rules), so the typeless key leaves both out, as
// writer.TypeSplitter's does.
func splitByType(dst []writer.DecodedBucket, w *window) []writer.DecodedBucket {
	// A key and what separates its groups: Type exactly (groups of two
	// Types in one bucket is what the agent misfiles), DBType and the
	// SpanDerivedPrimaryTags hash (which its aggregator drops: a collision
	// costs nothing).
	type typed struct {
		key         uint64
		typ, db     string
		spanDerived uint64
	}
	layers := make([]int32, len(w.groups))          // each group's bucket
	layerOf := make(map[typed]int32, len(w.groups)) // typeless key and Type → its bucket
	types := make(map[uint64]int32, len(w.groups))  // typeless key → its Types so far
	n := int32(1)                                   // buckets
	for i, t := range w.typeless {
		g := &w.groups[i]
		k := typed{t.key, g.Type, g.DBType, t.spanDerived}
		l, ok := layerOf[k]
		if !ok {
			l = types[k.key]
			types[k.key] = l + 1
			layerOf[k] = l
			n = max(n, l+1)
		}
		layers[i] = l
	}
	if n == 1 { // the usual case: one bucket, the window's groups as they are
		return append(dst, writer.DecodedBucket{Start: w.start, Duration: w.end - w.start, Groups: w.groups})
	}
	// The window is dropped after its harvest: its groups are moved into
	// runs, one per bucket, in place (each swap puts one group in its run
	// for good), and the buckets are those runs; no group is copied out
	// (TestTwinHarvestDoesNotCopyGroups).
	end := make([]int, n+1) // run l is [end[l], end[l+1]) once counted
	for _, l := range layers {
		end[l+1]++
	}
	for l := range n {
		end[l+1] += end[l]
	}
	next := slices.Clone(end[:n]) // the first position of each run not yet filled
	for l := range n {
		for next[l] < end[l+1] {
			i := next[l]
			m := layers[i]
			if m != l {
				j := next[m]
				w.groups[i], w.groups[j] = w.groups[j], w.groups[i]
				layers[i], layers[j] = layers[j], m
			}
			next[m]++
		}
	}
	for l := range n {
		dst = append(dst, writer.DecodedBucket{Start: w.start, Duration: w.end - w.start,
			Groups: w.groups[end[l]:end[l+1]:end[l+1]]})
	}
	return dst
}
