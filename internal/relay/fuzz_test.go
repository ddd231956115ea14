package relay

import (
	"testing"

	"github.com/spanstats/spanstats/aggregate"
)

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
			if err := r.Accept(d, 0, Transport(i)); err != nil && r.Stats().SpansReceived != 0 {
				t.Fatalf("rejected after an acceptance of the same bytes: %v", err)
			}
		}
		if len(d) != before {
			t.Fatal("Accept changed its input's length")
		}
		s := checkAccounting(t, r)
		if s.Groups > 8 || s.HeldBytes > maxBytes {
			t.Fatalf("%d groups, %d bytes held; MaxGroups 8, MaxHeldBytes %d", s.Groups, s.HeldBytes, maxBytes)
		}
		for _, b := range r.Harvest(t0.Add(2 * MaxClockSkew)) {
			r.Forwarded(b.Hits)
		}
		if s := checkAccounting(t, r); s.SpansPending != 0 || s.Groups != 0 || s.HeldBytes != 0 {
			t.Fatalf("after harvest: pending %d groups %d bytes %d", s.SpansPending, s.Groups, s.HeldBytes)
		}
	})
}
