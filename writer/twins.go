// This file lays out a bucket's groups so that the agent files each under
// its own Type: groups that differ only in Type go to separate buckets.

package writer

import (
	"encoding/binary"

	"github.com/cespare/xxhash/v2"

	"github.com/spanstats/spanstats/aggregate"
)

// TypeSplitter lays out buckets for the agent (v0.85.4), whose intake
// merges the duplicate groups of each bucket by a key that leaves out Type
// (agent.mergeDuplicates): of groups that differ only in Type, the first
// takes the others' hits, errors and durations while they keep their
// top-level hits and sketches, and its aggregator, which keys by Type,
// then files the counts under the wrong Type. Such twins go to separate
// buckets of the same start and length, which the agent keeps apart.
//
// A TypeSplitter is a value to reuse: its memory is kept between calls, so
// laying out the same shape again allocates nothing. It is for one
// goroutine at a time.
type TypeSplitter struct {
	seen   map[uint64]int // typeless key hash → groups of that key so far
	layers [][]*aggregate.Entry
	buf    []byte
}

// Split appends the buckets of src to dst as the agent needs them: a bucket
// without twins as it is (the usual case), else as one bucket per twin
// layer, the n-th group of a typeless key in the n-th. The groups of the
// buckets it lays out are the TypeSplitter's until Release.
func (s *TypeSplitter) Split(dst, src []Bucket) []Bucket {
	if s.seen == nil {
		s.seen = make(map[uint64]int)
	}
	for _, b := range src {
		clear(s.seen)
		twins := false
		for _, e := range b.Groups {
			if e == nil { // skipped, as Pack skips it
				continue
			}
			k := s.typeless(e)
			n := s.seen[k]
			s.seen[k] = n + 1
			twins = twins || n > 0
		}
		if !twins {
			dst = append(dst, b)
			continue
		}
		clear(s.seen)
		first := len(s.layers)
		for _, e := range b.Groups {
			if e == nil {
				continue
			}
			k := s.typeless(e)
			n := s.seen[k]
			s.seen[k] = n + 1
			for first+n >= len(s.layers) { // reslice first: Release kept each layer's memory
				if len(s.layers) < cap(s.layers) {
					s.layers = s.layers[:len(s.layers)+1]
				} else {
					s.layers = append(s.layers, nil)
				}
			}
			s.layers[first+n] = append(s.layers[first+n], e)
		}
		for _, l := range s.layers[first:] {
			dst = append(dst, Bucket{Start: b.Start, Duration: b.Duration, AgentTimeShift: b.AgentTimeShift, Groups: l})
		}
	}
	return dst
}

// Release forgets the groups of the buckets Split laid out (so that they do
// not stay reachable), keeping the memory.
func (s *TypeSplitter) Release() {
	for i := range s.layers {
		clear(s.layers[i])
		s.layers[i] = s.layers[i][:0]
	}
	s.layers = s.layers[:0]
}

// typeless hashes every label of e that the agent merges duplicates by: all
// but Type. Fields are length-prefixed, so equal bytes are equal fields; a
// collision of different keys only puts a group in a bucket of its own.
func (s *TypeSplitter) typeless(e *aggregate.Entry) uint64 {
	b := s.buf[:0]
	resource := e.Resource
	if resource == "" {
		resource = e.Name // as the agent fills it in before merging (normalizeStatsGroup)
	}
	for _, v := range [...]string{e.Service, e.Name, resource, e.SpanKind, e.HTTPMethod, e.HTTPEndpoint, e.GRPCStatusCode, e.ServiceSource} {
		b = append(binary.AppendUvarint(b, uint64(len(v))), v...)
	}
	b = binary.AppendUvarint(b, uint64(e.HTTPStatusCode))
	flags := uint64(uint32(e.IsTraceRoot)) << 1
	if e.Synthetics {
		flags |= 1
	}
	b = binary.AppendUvarint(b, flags)
	b = binary.AppendUvarint(b, uint64(len(e.PeerTags)))
	for _, v := range e.PeerTags {
		b = append(binary.AppendUvarint(b, uint64(len(v))), v...)
	}
	s.buf = b
	return xxhash.Sum64(b)
}
