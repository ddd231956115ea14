// This file lays out a bucket's groups so that the agent files each under
// its own Type: groups that differ only in Type go to separate buckets.

package writer

import (
	"encoding/binary"
	"unicode"

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
	types   map[uint64]int   // typeless key → its Types so far
	layerOf map[typedKey]int // typeless key and Type → its layer
	keys    []uint64         // of each group of the bucket: its typeless key
	layers  [][]*aggregate.Entry
	d       xxhash.Digest
	buf     []byte
	// Halt, if not nil, is asked every thousand groups or so whether to
	// give up: Split then returns what it laid out so far, which the
	// caller drops (see Packer.Halt).
	Halt func() bool
}

// typedKey is a typeless key hash and one Type of its groups.
type typedKey struct {
	key uint64
	typ string
}

// Split appends the buckets of src to dst as the agent needs them: a bucket
// without twins as it is (the usual case), else as one bucket per twin
// layer, the groups of the n-th Type of a typeless key in the n-th. Groups
// of one key and one Type share a layer: whatever of them the agent
// merges, it files under their own Type. The groups of the buckets it lays
// out are the TypeSplitter's until Release.
//
// The key leaves out Resource and HTTPStatusCode: the agent rewrites both
// before it merges, by rules only it knows (its SQL obfuscation and Redis
// quantization of some Types' resources, and the operator's replace rules,
// DD_APM_REPLACE_TAGS on resource.name, http.status_code or "*"), so
// groups of different Types that agree on every other label are laid
// apart whatever their resources and status codes. That costs a bucket
// only where one operation of one service has several Types.
func (s *TypeSplitter) Split(dst, src []Bucket) []Bucket {
	if s.types == nil {
		s.types = make(map[uint64]int)
		s.layerOf = make(map[typedKey]int)
	}
	seen := 0
	for _, b := range src {
		s.keys = s.keys[:0]
		clear(s.types)
		clear(s.layerOf)
		twins := false
		for _, e := range b.Groups {
			if e == nil { // skipped, as Pack skips it
				continue
			}
			if seen++; seen%haltEvery == 0 && s.Halt != nil && s.Halt() {
				clear(s.layerOf)
				return dst
			}
			tk := typedKey{s.typeless(e), e.Type}
			s.keys = append(s.keys, tk.key)
			if _, ok := s.layerOf[tk]; !ok {
				n := s.types[tk.key]
				s.types[tk.key] = n + 1
				s.layerOf[tk] = n
				twins = twins || n > 0
			}
		}
		if !twins {
			dst = append(dst, b)
			continue
		}
		first, i := len(s.layers), 0
		for _, e := range b.Groups {
			if e == nil {
				continue
			}
			n := s.layerOf[typedKey{s.keys[i], e.Type}]
			i++
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
	clear(s.layerOf) // do not pin the entries' Type strings
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

// typeless hashes the labels of e that the agent merges duplicates by and
// cannot rewrite: all but Type, Resource and HTTPStatusCode (see Split),
// Service and Name as the agent normalizes them. Fields are
// length-prefixed or (folded) 0-terminated, so equal bytes are equal
// fields; a collision of different keys only splits groups of different
// Types the agent would keep apart.
func (s *TypeSplitter) typeless(e *aggregate.Entry) uint64 {
	b := AppendFoldedLabels(s.buf[:0], e.Service, e.Name)
	for _, v := range [...]string{e.SpanKind, e.HTTPMethod, e.HTTPEndpoint, e.GRPCStatusCode, e.ServiceSource} {
		b = append(binary.AppendUvarint(b, uint64(len(v))), v...)
	}
	flags := uint64(uint32(e.IsTraceRoot)) << 1
	if e.Synthetics {
		flags |= 1
	}
	b = binary.AppendUvarint(b, flags)
	b = AppendTagsHash(b, e.PeerTags)
	s.buf = b
	s.d.Reset()
	s.d.Write(b)
	return s.d.Sum64()
}

// AppendTagsHash appends the 8 bytes of the hash by which the agent
// (v0.85.4) keys a tag list when it merges a bucket's duplicate groups
// (tagsFnvHash: 64-bit FNV-1a of the tags joined with 0 bytes, 0 for no
// tag). Its hash, not the tags: lists it cannot tell apart (a NUL inside a
// tag, a collision) append equal bytes and so get buckets of their own
// when their Types differ. tags must be sorted, as the agent sorts them.
func AppendTagsHash(b []byte, tags []string) []byte {
	if len(tags) == 0 {
		return binary.LittleEndian.AppendUint64(b, 0)
	}
	h := uint64(fnvOffset64)
	for i, v := range tags {
		if i > 0 {
			h *= fnvPrime64 // a 0 byte: the xor changes nothing
		}
		for j := 0; j < len(v); j++ {
			h = (h ^ uint64(v[j])) * fnvPrime64
		}
	}
	return binary.LittleEndian.AppendUint64(b, h)
}

// The 64-bit FNV-1a parameters (hash/fnv), inline: no allocation per list.
const (
	fnvOffset64 = 14695981039346656037
	fnvPrime64  = 1099511628211
)

// AppendFoldedLabels appends service and name folded as the agent
// (v0.85.4) sees them when it merges a bucket's duplicate groups: after
// normalizeStatsGroup, which normalizes Service and Name. Labels the agent
// makes equal append equal bytes; it folds more than the agent (case of
// names, non-ASCII letters), which costs a bucket of its own at most. Each
// label ends in a 0 byte after letters and digits only, so the bytes can
// prefix a hash key. It allocates only to grow b.
func AppendFoldedLabels(b []byte, service, name string) []byte {
	return foldName(foldService(b, service), name)
}

// The agent's normalizer limits (MaxServiceLen, MaxNameLen) and its name
// for a span name without a letter (DefaultSpanName).
const (
	maxServiceLen = 100
	maxNameLen    = 100
	unnamedSpan   = "unnamed_operation"
)

// The folds below append, then a 0 byte, the ASCII letters and digits the
// agent's normalizer keeps of a label: labels it makes equal fold equal.
// They fold more (case, other characters), which costs a bucket at most.

// foldService folds as NormalizeService: the first maxServiceLen bytes,
// lowercased as unicode does (U+212A lowers to an ASCII k). The agent
// names a service that keeps nothing unnamed-<lang>-service, so every
// such name folds as the empty one: the payload's lang is not needed, and
// two langs' unnamed services only share a fold.
func foldService(b []byte, v string) []byte {
	n := len(b)
	for _, r := range v[:min(len(v), maxServiceLen)] { // a rune cut short is RuneError: left out
		if r = unicode.ToLower(r); r < 0x80 && isAlnum(byte(r)) {
			b = append(b, byte(r))
		}
	}
	if f := b[n:]; len(f) >= len(unnamedPrefix)+len(unnamedSuffix) &&
		string(f[:len(unnamedPrefix)]) == unnamedPrefix && string(f[len(f)-len(unnamedSuffix):]) == unnamedSuffix {
		b = b[:n]
	}
	return append(b, 0)
}

// The fold of the agent's fallback service name, unnamed-<lang>-service.
const unnamedPrefix, unnamedSuffix = "unnamed", "service"

// foldName folds as NormalizeName: the first maxNameLen bytes, from the
// first ASCII letter; none is the agent's unnamedSpan.
func foldName(b []byte, v string) []byte {
	n := len(b)
	b = foldFromLetter(b, v)
	if len(b) == n+1 {
		return foldFromLetter(b[:n], unnamedSpan)
	}
	return b
}

// foldFromLetter appends the ASCII letters (lowercased) and digits of the
// first maxNameLen bytes of v, from the first letter, and a 0 byte.
func foldFromLetter(b []byte, v string) []byte {
	letterSeen := false
	for i := range min(len(v), maxNameLen) {
		c := v[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		switch {
		case 'a' <= c && c <= 'z':
			letterSeen = true
		case '0' <= c && c <= '9' && letterSeen:
		default:
			continue
		}
		b = append(b, c)
	}
	return append(b, 0)
}

func isAlnum(c byte) bool { return 'a' <= c && c <= 'z' || '0' <= c && c <= '9' }
