// This file fuzzes Accept with two datagrams in a row, checking the merge
// across them against a plain model of what the relay should hold.

package relay

import (
	"fmt"
	"math/bits"
	"slices"
	"testing"

	"github.com/spanstats/spanstats/aggregate"
	"github.com/spanstats/spanstats/writer"
)

// The model FuzzAcceptPair checks the relay's merge against, computed from
// writer.DecodePayload's view of each accepted datagram, not from the
// relay's merge: DESIGN §8's identity (every payload field but RuntimeID and
// Sequence), window (interval-aligned start) and label key (every label
// field, tag lists as sets).

// pairCell is one label key of one identity in one window.
type pairCell struct{ id, group string }

type pairCellWin struct {
	pairCell
	window uint64
}

// pairSums are a cell's values; they saturate, as DESIGN §5 bounds them.
type pairSums struct{ hits, errors, top, dur, ok, bad uint64 }

func pairSatAdd(a, b uint64) uint64 {
	s, carry := bits.Add64(a, b, 0)
	if carry != 0 {
		return ^uint64(0)
	}
	return s
}

func (s *pairSums) add(g *writer.Group) {
	s.hits = pairSatAdd(s.hits, g.Hits)
	s.errors = pairSatAdd(s.errors, g.Errors)
	s.top = pairSatAdd(s.top, g.TopLevelHits)
	s.dur = pairSatAdd(s.dur, g.Duration)
	if g.Ok != nil {
		s.ok = pairSatAdd(s.ok, g.Ok.Count())
	}
	if g.Err != nil {
		s.bad = pairSatAdd(s.bad, g.Err.Count())
	}
}

// pairSet is v sorted without duplicates, v untouched.
func pairSet(v []string) []string {
	v = slices.Clone(v)
	slices.Sort(v)
	return slices.Compact(v)
}

// pairSorted is v sorted, duplicates kept (asSorted).
func pairSorted(v []string) []string {
	v = slices.Clone(v)
	slices.Sort(v)
	return v
}

func modelIdentity(h *writer.Header) string {
	return fmt.Sprintf("%#v", []any{h.Hostname, h.Env, h.Version, h.Lang, h.TracerVersion,
		h.Service, h.ContainerID, h.GitCommitSha, h.ImageTag, h.ProcessTags,
		h.AgentAggregation, h.ProcessTagsHash, pairSet(h.Tags)})
}

// modelGroup is g's label key; typed false leaves out what the agent's
// duplicate key leaves out (Type, DBType, SpanDerivedPrimaryTags), exactly,
// without its normalization.
func modelGroup(g *writer.Group, typed bool) string {
	k := &g.Key
	f := []any{k.Service, k.Name, k.Resource, k.SpanKind, k.HTTPMethod, k.HTTPEndpoint,
		k.GRPCStatusCode, k.ServiceSource, k.HTTPStatusCode, k.Synthetics, k.IsTraceRoot,
		pairSet(k.PeerTags), pairSorted(g.AdditionalMetricTags)}
	if typed {
		f = append(f, k.Type, g.DBType, pairSorted(g.SpanDerivedPrimaryTags))
	}
	return fmt.Sprintf("%#v", f)
}

// modelAdd adds what body decodes to under the model; false if it does not
// decode.
func modelAdd(m map[pairCellWin]*pairSums, body []byte, interval uint64) (hits uint64, ok bool) {
	p, err := writer.DecodePayload(body)
	if err != nil {
		return 0, false
	}
	id := modelIdentity(&p.Header)
	for _, b := range p.Buckets {
		for gi := range b.Groups {
			g := &b.Groups[gi]
			if g.Hits == 0 {
				continue // nothing counted: whether it is held is not a promise
			}
			c := pairCellWin{pairCell{id, modelGroup(g, true)}, bucketWindow(&b, interval)}
			if m[c] == nil {
				m[c] = new(pairSums)
			}
			m[c].add(g)
			hits += g.Hits
		}
	}
	return hits, true
}

// bucketWindow is the window the relay merges b in, on the test relay's
// clock (t0): the one holding its end, but no later than the clock's or
// its start's. A merged bucket, from the earliest start to the latest end
// of buckets of one window, gives that window again.
func bucketWindow(b *writer.DecodedBucket, interval uint64) uint64 {
	now := uint64(t0.UnixNano())
	return windowOf(max(min(b.Start+b.Duration-1, now), b.Start), interval)
}

// pairKey is key("r") of another kind, type or peer tags.
func pairKey(kind, typ string, peers ...string) aggregate.Key {
	k := key("r")
	k.SpanKind, k.Type, k.PeerTags = kind, typ, peers
	return k
}

// withErrs is e with errs of its hits errors whose latencies durs (ms) are
// in its error sketch.
func withErrs(e *aggregate.Entry, durs ...float64) *aggregate.Entry {
	e.Err = new(aggregate.Sketch)
	for _, d := range durs {
		e.Err.Add(d * 1e6)
		e.Duration += uint64(d * 1e6)
	}
	e.Hits += uint64(len(durs))
	e.Errors += uint64(len(durs))
	return e
}

func bare(h writer.Header, buckets ...writer.Bucket) []byte {
	return writer.AppendPayload(nil, &h, buckets)
}

// FuzzAcceptPair feeds two datagrams, a then b, and checks the merge
// promises across them: every accepted datagram's spans received, a
// rejected one changing nothing; per identity, window and label key, the
// forwarded hits, errors, top-level hits, durations and sketch counts the
// sums of the accepted groups of that key; each such key forwarded once,
// and never beside a group differing from it only in Type, DBType or
// SpanDerivedPrimaryTags (DESIGN §8, splitByType); and received =
// forwarded + dropped + pending throughout.
//
// Two inputs, not one cut at a fuzzed offset: the mutator changes one of
// them at a time, so a pair that merges keeps merging while the other is
// mutated, and seeds read as the two datagrams they are.
func FuzzAcceptPair(f *testing.F) {
	r1, s1 := key("r"), key("s")
	one := bucket(w0, 10*sec, entry(r1, 2, 1, 5), entry(s1, 3, 0, 1, 2))
	// Same identity and keys, differing only in RuntimeID.
	f.Add(datagram(1, header("a"), one),
		datagram(1, header("b"), bucket(w0, 10*sec, withErrs(entry(r1, 4, 0, 7, 9), 30), entry(s1, 1, 1))))
	// The same sender's next datagram; and the same datagram twice.
	f.Add(datagram(1, header("a"), one), datagram(2, header("a"), one))
	f.Add(datagram(3, header("a"), one), datagram(3, header("a"), one))
	// Peer tags in another order, one duplicated; Tags in another order.
	h2 := header("b")
	h2.Tags = []string{"a:1", "b:2", "a:1"}
	f.Add(datagram(1, header("a"), bucket(w0, 10*sec, entry(pairKey("client", "", "peer.service:db", "db.instance:x"), 2, 1, 3, 4))),
		datagram(1, h2, bucket(w0, 10*sec, entry(pairKey("client", "", "db.instance:x", "peer.service:db", "db.instance:x"), 5, 2, 8))))
	// Differing only in Type: separate buckets of the same start, within
	// one datagram and across two.
	f.Add(datagram(1, header("a"), bucket(w0, 10*sec, entry(pairKey("server", "web"), 2, 0, 1), entry(pairKey("server", "sql"), 3, 1, 2))),
		datagram(1, header("b"), bucket(w0, 10*sec, entry(pairKey("server", "sql"), 1, 0, 5))))
	f.Add(datagram(1, header("a"), bucket(w0, 10*sec, entry(pairKey("server", "web"), 2, 0, 1))),
		datagram(1, header("b"), bucket(w0+2*sec, 8*sec, entry(pairKey("server", "sql"), 4, 4, 2))))
	// The same window from a bucket a Flush split; the window before.
	f.Add(datagram(1, header("a"), bucket(w0, 3*sec, entry(r1, 2, 0, 1))),
		datagram(2, header("a"), bucket(w0+3*sec, 7*sec, entry(r1, 5, 1, 2, 3), entry(s1, 1, 0))))
	f.Add(datagram(1, header("a"), bucket(w0-10*sec, 10*sec, entry(r1, 2, 0, 1))),
		datagram(1, header("b"), bucket(w0, 10*sec, entry(r1, 5, 1, 2)), bucket(w0-10*sec+5*sec, 5*sec, entry(r1, 1, 0, 4))))
	// A bucket ending past the relay's clock, windowed by the clock, beside
	// a short one of the same window.
	now := uint64(t0.UnixNano())
	f.Add(datagram(1, header("a"), bucket(now, sec, entry(r1, 2, 0))), datagram(1, header("b"), bucket(now, 20*sec, entry(r1, 3, 0))))
	// Another identity; a bare body beside an enveloped one.
	h3 := header("c")
	h3.Env = "staging"
	f.Add(datagram(1, header("a"), one), datagram(1, h3, one))
	f.Add(bare(header("a"), one), datagram(1, header("b"), one))
	// One rejected: garbage, an envelope alone, a bucket of zero duration.
	f.Add(datagram(1, header("a"), one), []byte{0x80})
	f.Add([]byte("SSR1"), datagram(1, header("a"), one))
	f.Add(datagram(1, header("a"), bucket(w0, 0, entry(r1, 1, 0))), datagram(1, header("b"), one))
	f.Fuzz(func(t *testing.T, a, b []byte) {
		const interval = uint64(DefaultInterval)
		r := newTestRelay(Config{}) // bounds no two datagrams reach: nothing folds
		model := make(map[pairCellWin]*pairSums)
		for _, d := range [][]byte{a, b} {
			was := heldOf(r.Stats())
			err := r.Accept(d, 0, UDP)
			now := heldOf(checkAccounting(t, r))
			if err != nil {
				if !now.equal(was) {
					t.Fatalf("rejected (%v), yet the state changed: %+v, was %+v", err, now, was)
				}
				continue
			}
			_, body, _, perr := writer.ParseDatagram(d)
			if perr != nil {
				t.Fatalf("accepted a datagram that does not parse: %v", perr)
			}
			hits, ok := modelAdd(model, body, interval)
			if !ok {
				t.Fatal("accepted a body that does not decode")
			}
			if now.received-was.received != hits {
				t.Fatalf("accepted %d hits, received grew by %d", hits, now.received-was.received)
			}
		}
		if s := r.Stats(); s.FoldedSpans != 0 || len(s.SpansDropped) != 0 {
			t.Fatalf("folded %d, dropped %v under the default bounds", s.FoldedSpans, s.SpansDropped)
		}
		got := make(map[pairCellWin]*pairSums)
		var forwarded uint64
		pk := writer.Packer{Limit: 1 << 20}
		for _, bt := range harvestAll(t, r) {
			// Batch sketches, before encoding: the merge's counts.
			for _, bk := range bt.Buckets {
				for gi := range bk.Groups {
					g := &bk.Groups[gi]
					var ok, bad uint64
					if g.Ok != nil {
						ok = g.Ok.Count()
					}
					if g.Err != nil {
						bad = g.Err.Count()
					}
					c := pairCellWin{pairCell{modelIdentity(&bt.Header), modelGroup(g, true)}, bucketWindow(&bk, interval)}
					if m := model[c]; m == nil || m.ok != ok || m.bad != bad {
						t.Fatalf("held sketches of %v: %d ok, %d errors; inputs' %+v", c, ok, bad, m)
					}
				}
			}
			pk.PackPayload(&bt.Payload, func(body []byte, n uint64) {
				p, err := writer.DecodePayload(body)
				if err != nil {
					t.Fatalf("a forwarded body does not decode: %v", err)
				}
				id := modelIdentity(&p.Header)
				for _, bk := range p.Buckets {
					typeless := make(map[string]string)
					for gi := range bk.Groups {
						g := &bk.Groups[gi]
						if k, typed := modelGroup(g, false), modelGroup(g, true); typeless[k] != "" {
							t.Fatalf("bucket at %d holds %s beside %s: the agent would merge them", bk.Start, typed, typeless[k])
						} else {
							typeless[k] = typed
						}
						c := pairCellWin{pairCell{id, modelGroup(g, true)}, bucketWindow(&bk, interval)}
						if got[c] != nil {
							t.Fatalf("%v forwarded twice", c)
						}
						got[c] = new(pairSums)
						got[c].add(g)
					}
				}
				forwarded += n
			})
		}
		for c, want := range model {
			if g := got[c]; g == nil || *g != *want {
				t.Errorf("%v: forwarded %+v, accepted %+v", c, g, want)
			}
		}
		for c, g := range got {
			if model[c] == nil {
				t.Errorf("%v: forwarded %+v, never accepted", c, g)
			}
		}
		if s := checkAccounting(t, r); s.SpansForwarded != forwarded || s.SpansReceived != forwarded {
			t.Fatalf("received %d, forwarded %d, bodies carried %d", s.SpansReceived, s.SpansForwarded, forwarded)
		}
	})
}
