// This file tests the workloads: their cardinalities stay as pinned, and
// the fresh-string copies hold the same spans with strings of their own.

package bench

import (
	"hash/maphash"
	"reflect"
	"slices"
	"strings"
	"testing"
	"unsafe"

	"github.com/spanstats/spanstats/stats"
)

// groupKey is the aggregation key of a span, every field of aggregate.Key
// (peer tags as a sorted set, kept only for client, producer and consumer).
type groupKey struct {
	Service, Name, Resource, Type, SpanKind      string
	HTTPStatusCode                               uint32
	HTTPMethod, HTTPEndpoint, GRPC, SrvSrc, Peer string
	TraceRoot, Synthetics                        bool
}

// keyOf returns the span's key; joined caches the peer-tag set of each
// peer-tag slice (the workloads share them).
func keyOf(s *stats.Span, joined map[*string]string) groupKey {
	k := groupKey{
		Service: s.Service, Name: s.Name, Resource: s.Resource, Type: s.Type, SpanKind: s.SpanKind,
		HTTPStatusCode: s.HTTPStatusCode, HTTPMethod: s.HTTPMethod, HTTPEndpoint: s.HTTPEndpoint,
		GRPC: s.GRPCStatusCode, SrvSrc: s.ServiceSource, TraceRoot: s.TraceRoot, Synthetics: s.Synthetics,
	}
	switch strings.ToLower(s.SpanKind) {
	case "client", "producer", "consumer":
		if len(s.PeerTags) == 0 {
			break
		}
		j, ok := joined[&s.PeerTags[0]]
		if !ok {
			p := slices.Clone(s.PeerTags)
			slices.Sort(p)
			j = strings.Join(slices.Compact(p), ",")
			joined[&s.PeerTags[0]] = j
		}
		k.Peer = j
	}
	return k
}

// shape is what a workload must keep: its length, distinct keys, distinct
// values per field, and the spans' measurements.
type shape struct {
	spans, keys                                int
	services, operations, resources, peerHosts int
}

// TestWorkloadShapes pins the cardinalities of every workload so that a
// change cannot silently make a benchmark easier.
func TestWorkloadShapes(t *testing.T) {
	for _, tc := range []struct {
		name string
		w    func() *Workload
		want shape
	}{
		{"SteadyState", SteadyState, shape{spans: 1 << 16, keys: 200, services: 5, operations: 8, resources: 40, peerHosts: 12}},
		{"ClientPeerTags", ClientPeerTags, shape{spans: 1 << 16, keys: 200, services: 4, operations: 3, resources: 50, peerHosts: 50}},
		{"HeapEntries", HeapEntries, shape{spans: HeapKeys * HeapSpansPerKey, keys: HeapKeys, services: 16, operations: 8, resources: 128, peerHosts: 40}},
		{"HighCardinalityResource", HighCardinalityResource, shape{spans: 1 << 20, keys: Resources, services: 1, operations: 1, resources: Resources, peerHosts: 0}},
		{"HighCardinalityPeer", HighCardinalityPeer, shape{spans: 1 << 16, keys: PeerHostnames, services: 1, operations: 1, resources: 1, peerHosts: PeerHostnames}},
		{"Adversarial", Adversarial, shape{spans: 1 << 20, keys: 1 << 20, services: Services, operations: Operations, resources: Resources, peerHosts: PeerHostnames}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel() // the large ones build and count in a few seconds each
			w := tc.w()
			if w.Name != tc.name {
				t.Errorf("name %q, want %q", w.Name, tc.name)
			}
			if tc.w() != w {
				t.Fatal("the workload is rebuilt on every call; it must be built once")
			}
			if got := measureShape(t, w); got != tc.want {
				t.Errorf("shape %+v, want %+v", got, tc.want)
			}
		})
	}
}

// measureShape counts distinct values by their 64-bit hash (maps of
// uint64 keep this test fast under -race; a collision among a million
// values has odds of 1 in 10^7).
func measureShape(t *testing.T, w *Workload) shape {
	n := w.Len()
	seed := maphash.MakeSeed()
	// Sized for the worst case: growing maps of a million entries would be
	// most of this test's time.
	res := make(map[uint64]struct{}, n)
	svcs, ops, hosts := map[uint64]struct{}{}, map[uint64]struct{}{}, map[uint64]struct{}{}
	var errs, ineligible int
	minD, maxD := int64(1<<62), int64(0)
	p := w.Producer(0)
	durs := make([]int64, n)
	for i := range n {
		j, s := p.Next()
		if j != i {
			t.Fatalf("position %d, want %d", j, i)
		}
		durs[i] = s.Duration
		svcs[maphash.String(seed, s.Service)] = struct{}{}
		ops[maphash.String(seed, s.Name)] = struct{}{}
		res[maphash.String(seed, s.Resource)] = struct{}{}
		for _, p := range s.PeerTags {
			if h, ok := strings.CutPrefix(p, "peer.hostname:"); ok {
				hosts[maphash.String(seed, h)] = struct{}{}
			}
		}
		if s.Error {
			errs++
		}
		if !s.Eligible() {
			ineligible++
		}
		minD, maxD = min(minD, s.Duration), max(maxD, s.Duration)
	}
	if ineligible != 0 {
		t.Errorf("%d ineligible spans: every span must be counted", ineligible)
	}
	if rate := float64(errs) / float64(n); rate < 0.19 || rate > 0.21 {
		t.Errorf("error rate %.3f, want 0.20", rate)
	}
	if minD < 50_000 || maxD > 2_000_000_000 {
		t.Errorf("durations in [%d, %d] ns, want within [50 µs, 2 s]", minD, maxD)
	}
	// Log-uniform over [50 µs, 2 s]: each third of the log range (cut at
	// 1.7 ms and 58 ms) holds a third of the spans.
	if lo, hi := countBelow(durs, 50_000*34.2), countBelow(durs, 50_000*1170); !near(lo, n/3) || !near(hi-lo, n/3) {
		t.Errorf("durations not log-uniform: %d below 1.7 ms, %d in [1.7 ms, 58 ms), of %d", lo, hi-lo, n)
	}
	// The resource is part of the key: if every span has its own resource,
	// every span has its own key, and the large workloads need no key set.
	keys := len(res)
	if keys < n {
		set, joined := map[uint64]struct{}{}, map[*string]string{}
		p := w.Producer(0)
		for range n {
			_, s := p.Next()
			set[maphash.Comparable(seed, keyOf(s, joined))] = struct{}{}
		}
		keys = len(set)
	}
	return shape{
		spans: n, keys: keys, services: len(svcs), operations: len(ops),
		resources: len(res), peerHosts: len(hosts),
	}
}

func countBelow(durs []int64, d float64) int {
	c := 0
	for _, v := range durs {
		if float64(v) < d {
			c++
		}
	}
	return c
}

func near(got, want int) bool { return got > want*95/100 && got < want*105/100 }

// TestFreshStrings checks that the fresh-string workloads hold the same
// spans as the ones they copy, value for value, and that no two positions
// share the data of a string a tracer builds per span: otherwise the SDK's
// recent-span cache by identity would hit on them as it does on the
// interned ones.
func TestFreshStrings(t *testing.T) {
	for _, tc := range []struct{ fresh, src *Workload }{
		{SteadyStateFreshStrings(), SteadyState()},
		{ClientPeerTagsFreshStrings(), ClientPeerTags()},
	} {
		t.Run(tc.fresh.Name, func(t *testing.T) {
			if tc.fresh.Len() != tc.src.Len() {
				t.Fatalf("%d spans, want %d", tc.fresh.Len(), tc.src.Len())
			}
			seen := map[*byte]int{}
			mine := func(i int, v string) {
				if v == "" {
					return
				}
				p := unsafe.StringData(v)
				if j, ok := seen[p]; ok {
					t.Fatalf("positions %d and %d share the data of %q", j, i, v)
				}
				seen[p] = i
			}
			for i := range tc.src.Len() {
				f, s := &tc.fresh.spans[i], &tc.src.spans[i]
				if !reflect.DeepEqual(*f, *s) {
					t.Fatalf("position %d: %+v, want %+v", i, *f, *s)
				}
				mine(i, f.Resource)
				mine(i, f.HTTPMethod)
				for _, p := range f.PeerTags {
					mine(i, p)
				}
				if len(f.PeerTags) > 0 && &f.PeerTags[0] == &s.PeerTags[0] {
					t.Fatalf("position %d shares its peer-tag slice with %s", i, tc.src.Name)
				}
			}
		})
	}
}
