package relay

import "testing"

func FuzzAccept(f *testing.F) {
	f.Add(datagram(1, header("a"), bucket(w0, 10*sec, entry(key("r"), 2, 1, 5), entry(key("s"), 3, 0, 1, 2))))
	f.Add(datagram(7, header(""), bucket(w0+3, 4*sec, entry(key("r"), 1, 0))))
	f.Add([]byte{0x80})
	f.Add([]byte("SSR1"))
	f.Fuzz(func(t *testing.T, d []byte) {
		r := newTestRelay(Config{MaxGroups: 8})
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
		if s.Groups > 8 {
			t.Fatalf("%d groups held, MaxGroups 8", s.Groups)
		}
		for _, b := range r.Harvest(t0.Add(2 * MaxClockSkew)) {
			r.Forwarded(b.Hits)
		}
		if s := checkAccounting(t, r); s.SpansPending != 0 || s.Groups != 0 {
			t.Fatalf("after harvest: pending %d groups %d", s.SpansPending, s.Groups)
		}
	})
}
