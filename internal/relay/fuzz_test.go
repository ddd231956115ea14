// This file fuzzes Accept: a rejected datagram changes nothing, an
// accepted one is counted whole within the bounds, and what is forwarded
// decodes.

package relay

import (
	"maps"
	"testing"

	"github.com/spanstats/spanstats/aggregate"
	"github.com/spanstats/spanstats/writer"
)

// held is the part of a relay's state a rejected datagram must leave as
// it was: what it holds and what it has counted of spans.
type held struct {
	received, pending, folded, overflows uint64
	groups, bytes                        int
	dropped                              map[string]uint64
}

func heldOf(s Stats) held {
	return held{s.SpansReceived, s.SpansPending, s.FoldedSpans, s.OverflowGroups, s.Groups, s.HeldBytes, maps.Clone(s.SpansDropped)}
}

func (h held) equal(o held) bool {
	return h.received == o.received && h.pending == o.pending && h.folded == o.folded &&
		h.overflows == o.overflows && h.groups == o.groups && h.bytes == o.bytes && maps.Equal(h.dropped, o.dropped)
}

func FuzzAccept(f *testing.F) {
	f.Add(datagram(1, header("a"), bucket(w0, 10*sec, entry(key("r"), 2, 1, 5), entry(key("s"), 3, 0, 1, 2))))
	f.Add(datagram(7, header(""), bucket(w0+3, 4*sec, entry(key("r"), 1, 0))))
	var wide []*aggregate.Entry // 1 µs..100 s, ~900 bins each: past the byte bound
	for i := range 8 {
		var durs []float64
		for v := 1e-3; v < 1e5; v *= 1.3 {
			durs = append(durs, v)
		}
		wide = append(wide, entry(key(string(rune('a'+i))), uint64(len(durs)), 0, durs...))
	}
	f.Add(datagram(2, header("a"), bucket(w0, 10*sec, wide...)))
	f.Add([]byte{0x80})
	f.Add([]byte("SSR1"))
	f.Fuzz(func(t *testing.T, d []byte) {
		// Bounds a few groups reach: a wide sketch takes 8 KiB, an
		// overflow group reserves 16 KiB.
		const maxBytes = 32 << 10
		r := newTestRelay(Config{MaxGroups: 8, MaxHeldBytes: maxBytes})
		before := len(d)
		for i := range 2 { // twice: the second merges into what the first created
			was := heldOf(r.Stats())
			err := r.Accept(d, 0, Transport(i))
			now := heldOf(r.Stats())
			switch {
			case err != nil && was.received != 0:
				t.Fatalf("rejected after an acceptance of the same bytes: %v", err)
			case err != nil && !now.equal(was):
				// Rejected whole: nothing of it is held or counted as spans.
				t.Fatalf("rejected (%v), yet the state changed: %+v, was %+v", err, now, was)
			case err == nil:
				// What is accepted is counted, every span of the body.
				_, body, _, _ := writer.ParseDatagram(d)
				p, derr := writer.DecodePayload(body)
				if derr != nil {
					t.Fatalf("accepted a body that does not decode: %v", derr)
				}
				var hits uint64
				for _, b := range p.Buckets {
					for _, g := range b.Groups {
						hits += g.Hits
					}
				}
				if now.received-was.received != hits {
					t.Fatalf("accepted %d hits, received grew by %d", hits, now.received-was.received)
				}
			}
		}
		if len(d) != before {
			t.Fatal("Accept changed its input's length")
		}
		s := checkAccounting(t, r)
		if s.Groups > 8 || s.HeldBytes > maxBytes {
			t.Fatalf("%d groups, %d bytes held; MaxGroups 8, MaxHeldBytes %d", s.Groups, s.HeldBytes, maxBytes)
		}
		// What is forwarded encodes to bodies that decode, whose groups
		// obey what the relay checks of what it accepts, and that carry
		// every span the batch counts.
		var forwarded uint64
		pk := writer.Packer{Limit: 1 << 20}
		for _, b := range r.Harvest(t0.Add(2 * MaxClockSkew)) {
			var inBodies uint64
			pk.PackPayload(&b.Payload, func(body []byte, n uint64) {
				p, err := writer.DecodePayload(body)
				if err != nil {
					t.Fatalf("a forwarded body does not decode: %v", err)
				}
				var hits uint64
				for _, bk := range p.Buckets {
					// A merged bucket runs from the earliest start (not
					// before the window) to the latest end of its window's
					// buckets: each of at most MaxBucketDuration, ending
					// at most that after the window.
					if bk.Duration == 0 || bk.Duration > uint64(2*MaxBucketDuration+DefaultInterval) {
						t.Fatalf("forwarded a bucket of duration %d", bk.Duration)
					}
					for _, g := range bk.Groups {
						var ok, bad uint64
						if g.Ok != nil {
							ok = g.Ok.Count()
						}
						if g.Err != nil {
							bad = g.Err.Count()
						}
						if g.Errors > g.Hits || g.TopLevelHits > g.Hits || ok > g.Hits || bad > g.Hits-ok {
							t.Fatalf("forwarded group: hits %d errors %d top-level %d, sketches %d ok %d errors",
								g.Hits, g.Errors, g.TopLevelHits, ok, bad)
						}
						hits += g.Hits
					}
				}
				if hits != n {
					t.Fatalf("a body of %d hits counted as %d", hits, n)
				}
				inBodies += n
			})
			if inBodies != b.Hits {
				t.Fatalf("batch of %d hits packed into bodies of %d", b.Hits, inBodies)
			}
			forwarded += b.Hits
			r.Forwarded(b.Hits)
			r.Release(&b)
		}
		s = checkAccounting(t, r)
		if s.SpansPending != 0 || s.Groups != 0 || s.HeldBytes != 0 {
			t.Fatalf("after harvest: pending %d groups %d bytes %d", s.SpansPending, s.Groups, s.HeldBytes)
		}
		if forwarded != s.SpansForwarded {
			t.Fatalf("forwarded %d, counted %d", forwarded, s.SpansForwarded)
		}
	})
}
