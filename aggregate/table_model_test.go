// This file tests the Table against a plain model of its contract, and its
// recent-span caches against the full path they skip, on random workloads.

package aggregate

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
)

// model is the table's contract as a plain map: creation-order positions,
// recycling of the first idle entry from a forward cursor, and the overflow
// entry when no entry is idle.
type model struct {
	cap        int
	keys       []int       // position -> key id
	pos        map[int]int // key id -> position
	hit        []bool      // position -> hit in this interval
	vals       []modelVals
	overflow   modelVals
	cursor     int
	noIdle     bool
	recycled   uint64
	overflowed uint64
}

type modelVals struct{ hits, errs, top, dur uint64 }

func (v *modelVals) record(s *Record) {
	v.hits++
	v.dur += uint64(s.Duration)
	if s.Error {
		v.errs++
	}
	if s.TopLevel {
		v.top++
	}
}

func newModel(cap int) *model { return &model{cap: cap, pos: map[int]int{}} }

func (m *model) add(k int, s *Record) {
	p, ok := m.pos[k]
	if !ok {
		switch {
		case len(m.keys) < m.cap:
			p = len(m.keys)
			m.keys = append(m.keys, k)
			m.hit = append(m.hit, false)
			m.vals = append(m.vals, modelVals{})
		default:
			p = m.idle()
			if p < 0 {
				m.overflowed++
				m.overflow.record(s)
				return
			}
			delete(m.pos, m.keys[p])
			m.keys[p] = k
			m.recycled++
		}
		m.pos[k] = p
	}
	m.hit[p] = true
	m.vals[p].record(s)
}

func (m *model) idle() int {
	if m.noIdle {
		return -1
	}
	for range len(m.keys) {
		i := m.cursor
		m.cursor = (m.cursor + 1) % len(m.keys)
		if !m.hit[i] {
			return i
		}
	}
	m.noIdle = true
	return -1
}

func (m *model) rotate() {
	for i := range m.hit {
		m.hit[i] = false
		m.vals[i] = modelVals{}
	}
	m.overflow = modelVals{}
	m.noIdle = false
}

func (m *model) clear() {
	*m = model{cap: m.cap, pos: map[int]int{}, recycled: m.recycled, overflowed: m.overflowed}
}

// modelSpan is the span of key id k: resource names the key, the other
// fields vary so that peer tags, booleans and the status take part.
func modelSpan(k int, r *rand.Rand) Record {
	s := baseSpan()
	s.Resource = fmt.Sprintf("GET /r/%d", k)
	s.Service = []string{"web", "api", "worker"}[k%3]
	s.TraceRoot = k%2 == 0
	s.Synthetics = k%5 == 0
	s.HTTPStatusCode = uint32(200 + k%4)
	if k%4 != 0 {
		tags := []string{"peer.service:db", fmt.Sprintf("db.instance:i%d", k%7), "peer.hostname:h"}[:k%4]
		r.Shuffle(len(tags), func(i, j int) { tags[i], tags[j] = tags[j], tags[i] })
		if k%3 == 0 {
			tags = append(tags, tags[0]) // a duplicate
		}
		s.SetPeerTags(tags)
	}
	s.Duration = 1 + r.Int64N(2e9)
	s.Error = r.IntN(5) == 0
	s.TopLevel = r.IntN(2) == 0
	return s
}

// TestTableMatchesModel drives random workloads over many intervals through
// the table and the model and compares everything after each interval:
// Touched (order, keys, values, sketch counts), which keys are indexed, the
// counters and the slot index. forcedHash makes many keys share home slots
// (around the wrap of the slot array) and whole hashes, which stresses
// backward-shift deletion and the key comparison.
func TestTableMatchesModel(t *testing.T) {
	for _, forced := range []bool{false, true} {
		for _, cap := range []int{1, 2, 3, 8, 64} {
			t.Run(fmt.Sprintf("cap=%d/forcedHash=%v", cap, forced), func(t *testing.T) {
				r := rand.New(rand.NewPCG(uint64(cap), 77))
				tb := NewTable(cap)
				m := newModel(cap)
				universe := 3*cap + 5
				hashOf := func(k int) uint64 {
					// Homes in the last two and first two slots; keys equal
					// mod 12 share the whole 64-bit hash.
					home := (tb.mask - 1 + uint64(k%4)) & tb.mask
					return home | uint64(k%12)<<32
				}
				add := func(k int, s *Record) {
					if forced {
						addWithHash(tb, s, hashOf(k))
					} else {
						tb.Add(s)
					}
				}
				lookup := func(k int, s *Record) *Entry {
					if forced {
						return findWithHash(tb, s, hashOf(k))
					}
					return find(tb, s)
				}
				var touched []*Entry
				for interval := range 300 {
					n := r.IntN(4 * cap)
					for range n {
						// Skewed: low key ids are hot.
						k := r.IntN(r.IntN(universe) + 1)
						s := modelSpan(k, r)
						add(k, &s)
						m.add(k, &s)
					}
					touched = tb.Touched(touched[:0])
					var want []*Entry
					var sum uint64
					for p, k := range m.keys {
						if m.hit[p] {
							want = append(want, tb.entries[p])
							if e := tb.entries[p]; !keyEqual(e.Key, wantKey(modelSpan(k, r))) {
								t.Fatalf("interval %d: position %d holds %q, model key %d", interval, p, e.Resource, k)
							}
						}
					}
					if m.overflow.hits > 0 {
						want = append(want, tb.overflow)
					}
					if !slices.Equal(touched, want) {
						t.Fatalf("interval %d: touched %v, want %v", interval, resources(touched), resources(want))
					}
					for _, e := range touched {
						v := m.overflow
						if e != tb.overflow {
							v = m.vals[slices.Index(tb.entries, e)]
						}
						if e.Hits != v.hits || e.Errors != v.errs || e.TopLevelHits != v.top || e.Duration != v.dur ||
							count(e.Ok) != v.hits-v.errs || count(e.Err) != v.errs {
							t.Fatalf("interval %d: %q values %d/%d/%d/%d, model %+v", interval, e.Resource,
								e.Hits, e.Errors, e.TopLevelHits, e.Duration, v)
						}
						sum += e.Hits
					}
					if sum != uint64(n) {
						t.Fatalf("interval %d: %d hits in touched entries, %d spans added", interval, sum, n)
					}
					if tb.Recycled() != m.recycled || tb.Overflowed() != m.overflowed || tb.Len() != len(m.keys) {
						t.Fatalf("interval %d: recycled %d overflowed %d len %d, model %d %d %d", interval,
							tb.Recycled(), tb.Overflowed(), tb.Len(), m.recycled, m.overflowed, len(m.keys))
					}
					for k := range universe {
						s := modelSpan(k, r)
						e := lookup(k, &s)
						p, live := m.pos[k]
						if live != (e != nil) || (live && e != tb.entries[p]) {
							t.Fatalf("interval %d: key %d found=%v, model live=%v", interval, k, e != nil, live)
						}
					}
					checkSlots(t, tb)
					if interval%37 == 36 {
						tb.Clear()
						m.clear()
						if len(tb.Touched(nil)) != 0 || tb.Len() != 0 {
							t.Fatal("Clear left entries")
						}
					} else {
						tb.Rotate()
						m.rotate()
						if len(tb.Touched(nil)) != 0 {
							t.Fatal("Rotate left touched entries")
						}
					}
				}
				if m.recycled == 0 || m.overflowed == 0 {
					t.Fatalf("workload never recycled (%d) or overflowed (%d)", m.recycled, m.overflowed)
				}
			})
		}
	}
}

// TestCachesMatchFullPath runs random workloads through two tables: one as
// it runs, one that forgets its recent-span caches before every span, so
// that each span takes the full path (encode, hash, look up, budgets). The
// caches must change no outcome: after every interval both tables hold the
// same groups in the same order with the same values, every span added is
// counted once, and the counters agree. The spans' strings are fresh copies
// or shared constants, resources share their lengths and first and last
// eight bytes (one contentIndex set and tag), as do two peer tags; peer
// tags come in any order, with IP addresses, empty values, bare tags, more
// than fit inline and enough keys to pass the peer-key cap; caps and
// budgets are small, and Clear, SetPeerTagKeys and SetLimits come between
// spans.
func TestCachesMatchFullPath(t *testing.T) {
	resources := []string{
		"GET /api/v1/users/aaaa/all-orders", "GET /api/v1/users/bbbb/all-orders",
		"GET /api/v1/users/cccc/all-orders", "GET /api/v1/users/aaab/all-orders",
		BlockedValue,
	}
	peerPool := []string{
		"peer.service:users-db", "peer.service:orders-db", "db.instance:i1",
		"peer.hostname:10.0.0.1", "peer.hostname:10.0.0.2", "peer.hostname:host-aaaa-00000001",
		"peer.hostname:host-bbbb-00000001", "out.host:", "bare", BlockedValue,
		"peer.service:" + BlockedValue, "_dd.base_service:web",
		"peer.hostname:,", "db.instance:", // quantized to no value, and none
	}
	keyLists := [][]string{nil, {"peer.service", "peer.hostname"}, {"db.instance", "out.host"}, {}}
	limits := []Limits{{Resource: 2, PeerTag: 2}, {Resource: 3, SpanKind: 1, PeerTag: 1}, {Service: 1}, {}}
	for seed := range uint64(8) {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			r := rand.New(rand.NewPCG(seed, 75))
			cap := []int{2, 4, 16, 64, 200, 200, 16, 200}[seed]
			// narrow: one label set and one peer tag, of over a hundred
			// keys or a bare BlockedValue, so that spans pass the peer-key
			// cap and collapsed keys meet raw ones of the same bytes.
			narrow := seed >= 6
			got, ref := NewTable(cap), NewTable(cap)
			var halt atomic.Bool
			got.SetHalt(&halt)
			str := func(v string) string {
				if r.IntN(2) == 0 {
					return strings.Clone(v)
				}
				return v
			}
			span := func() Record {
				s := Record{
					Resource: str(resources[r.IntN(len(resources))]),
					Service:  str([]string{"web", "api"}[r.IntN(2)]),
					Name:     str("http.request"),
					SpanKind: str([]string{"client", "internal", "server"}[r.IntN(3)]),
					Duration: 1 + r.Int64N(1e6), Error: r.IntN(4) == 0, TopLevel: r.IntN(2) == 0,
					TraceRoot: r.IntN(3) == 0, HTTPStatusCode: uint32(200 + r.IntN(2)),
				}
				if narrow {
					s.Resource, s.Service, s.SpanKind, s.HTTPStatusCode = str(resources[r.IntN(2)]), "web", "client", 200
					s.TraceRoot = false
					tag := BlockedValue
					if r.IntN(2) == 0 {
						tag = fmt.Sprintf("junk%d:v", r.IntN(150))
					}
					s.SetPeerTags([]string{str(tag)})
					return s
				}
				n := r.IntN(6)
				if r.IntN(10) == 0 {
					n = MaxInlinePeerTags + 1 // ExtraPeerTags: never cached
				}
				var tags []string
				for range n {
					tag := peerPool[r.IntN(len(peerPool))]
					if r.IntN(8) == 0 {
						tag = fmt.Sprintf("junk%d:v", r.IntN(100)) // toward the peer-key cap
					}
					tags = append(tags, str(tag))
				}
				s.SetPeerTags(tags)
				return s
			}
			var added uint64
			for interval := range 60 {
				for range 40 + r.IntN(40) {
					switch x := r.IntN(100); {
					case x < 2:
						k := keyLists[r.IntN(len(keyLists))]
						got.SetPeerTagKeys(k)
						ref.SetPeerTagKeys(k)
					case x < 3:
						l := limits[r.IntN(len(limits))]
						got.SetLimits(l)
						ref.SetLimits(l)
					case x < 30:
						batch := make([]*Record, 1+r.IntN(20))
						for i := range batch {
							s := span()
							batch[i] = &s
						}
						halt.Store(r.IntN(4) == 0)
						n := got.AddBatch(batch)
						halt.Store(false)
						for _, s := range batch[:n] {
							forgetAll(ref)
							ref.Add(s)
						}
						added += uint64(n)
					default:
						s := span()
						got.Add(&s)
						forgetAll(ref)
						ref.Add(&s)
						added++
					}
				}
				a, b := got.Touched(nil), ref.Touched(nil)
				var sum uint64
				for i := range max(len(a), len(b)) {
					if i >= len(a) || i >= len(b) {
						t.Fatalf("interval %d: %d groups, full path %d", interval, len(a), len(b))
					}
					x, y := a[i], b[i]
					if !keyEqual(x.Key, y.Key) || x.Hits != y.Hits || x.Errors != y.Errors ||
						x.TopLevelHits != y.TopLevelHits || x.Duration != y.Duration {
						t.Fatalf("interval %d, group %d: %+v with %d hits, full path %+v with %d hits",
							interval, i, x.Key, x.Hits, y.Key, y.Hits)
					}
					sum += x.Hits
				}
				if sum != added {
					t.Fatalf("interval %d: %d hits in touched groups, %d spans added", interval, sum, added)
				}
				added = 0
				if got.Recycled() != ref.Recycled() || got.Overflowed() != ref.Overflowed() ||
					got.CollapsedSpans() != ref.CollapsedSpans() {
					t.Fatalf("interval %d: recycled %d overflowed %d collapsed %d, full path %d %d %d", interval,
						got.Recycled(), got.Overflowed(), got.CollapsedSpans(),
						ref.Recycled(), ref.Overflowed(), ref.CollapsedSpans())
				}
				for f := range NumFields {
					if got.Collapsed(f) != ref.Collapsed(f) {
						t.Fatalf("interval %d: %d collapsed in field %d, full path %d", interval,
							got.Collapsed(f), f, ref.Collapsed(f))
					}
				}
				if interval%17 == 16 {
					got.Clear()
					ref.Clear()
				} else {
					got.Rotate()
					ref.Rotate()
				}
			}
		})
	}
}

// forgetAll empties tb's caches of recent spans, field by field rather than
// by forgetRecent, which is under test.
func forgetAll(tb *Table) {
	tb.recent, tb.seen, tb.lastCollapsed = spanCache{}, spanCache{}, collapsedMemo{}
}
