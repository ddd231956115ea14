package aggregate

import (
	"fmt"
	"math/rand/v2"
	"slices"
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
