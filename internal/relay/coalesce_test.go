// This file tests read coalescing: when a reader pauses (the coalescer's
// rule, read by read) and what a Server's readers do with it.

package relay

import (
	"net"
	"testing"
	"time"
)

// TestCoalescerLimits: a Unix socket's cycle may take half its queue (at
// most a batch) and is busy at a full queue (or past a batch); a UDP
// socket's may take a batch and is busy past it; reads of one datagram
// each, or a queue of one, never pause.
func TestCoalescerLimits(t *testing.T) {
	for _, tc := range []struct {
		name        string
		t           Transport
		batch, q    int
		batched     bool
		limit, busy int
		pausing     bool
	}{
		{"unix default queue", Unix, 16, 10, true, 5, 10, true},
		{"unix long queue", Unix, 16, 512, true, 16, 17, true},
		{"unix queue of 1", Unix, 16, 1, true, 0, 1, false},
		{"udp", UDP, 16, 10, true, 16, 17, true},
		{"udp small batch", UDP, 4, 10, true, 4, 5, true},
		{"one datagram a read", UDP, 16, 10, false, 16, 17, false},
	} {
		c := newCoalescer(tc.t, time.Millisecond, tc.batch, tc.q, tc.batched)
		if c.limit != tc.limit || c.busy != tc.busy || (c.pause > 0) != tc.pausing {
			t.Errorf("%s: limit %d, busy %d, pause %v; want %d, %d, pausing %v",
				tc.name, c.limit, c.busy, c.pause, tc.limit, tc.busy, tc.pausing)
		}
	}
}

// TestCoalescerRule steps a UDP socket's coalescer (batches of 16: limit
// 16, busy 17) through reads at a fake clock.
func TestCoalescerRule(t *testing.T) {
	const pause = 4 * time.Millisecond
	at := time.Unix(1000, 0)
	nows := 0
	now := func() time.Time { nows++; return at }
	c := newCoalescer(UDP, pause, 16, 10, true)
	step := func(name string, n int, advance time.Duration, want time.Duration) {
		t.Helper()
		at = at.Add(advance)
		if got := c.after(n, 16, now); got != want {
			t.Fatalf("%s: read of %d after %v: pause %v, want %v", name, n, advance, got, want)
		}
	}
	step("the first datagram in a while", 1, time.Hour, 0)
	step("another 1ms later", 1, time.Millisecond, pause)
	step("what the pause queued", 4, pause, pause)
	step("just within two pauses", 3, 2*pause-time.Nanosecond, pause)
	step("two pauses after", 1, 2*pause, 0)
	step("a datagram soon after", 1, time.Millisecond, pause)
	step("a cycle of the limit in one read", 15+1, pause, 0) // a full batch: read on
	step("the cycle's end, nothing more", 0, 0, pause)

	// A busy cycle (17 ≥ busy): no pause for coalesceHold, however
	// sparse the reads become meanwhile.
	nows = 0
	step("a full batch", 16, pause, 0)
	if nows != 0 {
		t.Fatalf("the clock was read %d times for a full batch; want none", nows)
	}
	step("one more: 17 in the cycle", 1, 0, 0)
	if c.count != 0 {
		t.Fatalf("cycle count %d after the cycle ended; want 0", c.count)
	}
	for held := time.Duration(0); held < coalesceHold-pause; held += pause {
		step("a small cycle within the hold", 2, pause, 0)
	}
	step("the first small cycle past the hold", 2, pause, pause)

	// Past the limit but not busy: that cycle does not pause, and the hold
	// does not start.
	c2 := newCoalescer(Unix, pause, 16, 10, true) // limit 5, busy 10
	at = at.Add(time.Hour)
	for _, r := range []struct {
		n    int
		want time.Duration
	}{{1, 0}, {1, pause}, {6, 0}, {2, pause}, {10, 0}, {2, 0}} {
		at = at.Add(time.Millisecond)
		if got := c2.after(r.n, 16, now); got != r.want {
			t.Fatalf("unix socket, read of %d: pause %v, want %v", r.n, got, r.want)
		}
	}

	// The pause adapts: cycles past the limit (not busy) halve it down to
	// an eighth; one within the limit keeps it; one of at most half the
	// limit doubles it, up to the setting.
	c3 := newCoalescer(Unix, pause, 16, 10, true) // limit 5, busy 10
	at = at.Add(time.Hour)
	c3.after(1, 16, now)
	for _, r := range []struct {
		n       int
		want    time.Duration
		wantCur time.Duration
	}{
		{6, 0, pause / 2}, {6, 0, pause / 4}, {6, 0, pause / 8}, {6, 0, pause / 8},
		{4, pause / 8, pause / 8}, {2, pause / 4, pause / 4}, {1, pause / 2, pause / 2}, {2, pause, pause}, {1, pause, pause},
	} {
		at = at.Add(c3.cur) // a cycle a pause after the last
		if got := c3.after(r.n, 16, now); got != r.want || c3.cur != r.wantCur {
			t.Fatalf("unix socket, cycle of %d: pause %v (now %v), want %v (now %v)", r.n, got, c3.cur, r.want, r.wantCur)
		}
	}

	off := newCoalescer(UDP, -1, 16, 10, true)
	for i := range 3 {
		if d := off.after(1, 16, now); d != 0 {
			t.Fatalf("read %d with coalescing off: pause %v", i, d)
		}
	}
}

// TestReadsCoalesce: a sender writing a datagram every millisecond to a
// relay's UDP socket: with an 8 ms ReadCoalesce the reader takes them in
// far fewer reads than datagrams, pausing between, and every datagram is
// taken; with coalescing off it never pauses.
func TestReadsCoalesce(t *testing.T) {
	const sent = 150
	for _, pause := range []time.Duration{8 * time.Millisecond, -1} {
		s := runServer(t, ServerConfig{UnixPath: "-", UDPAddr: "127.0.0.1:0", ReadCoalesce: pause})
		conn, err := net.Dial("udp", s.Addr(UDP))
		if err != nil {
			t.Fatal(err)
		}
		for range sent {
			if _, err := conn.Write([]byte{0xc1}); err != nil { // malformed, but read and counted
				t.Fatal(err)
			}
			time.Sleep(time.Millisecond)
		}
		conn.Close()
		waitFor(t, "every datagram sent", func() bool { return s.Relay().Stats().Datagrams[UDP] == sent })
		reads, pauses := s.reads[UDP].Load(), s.pauses[UDP].Load()
		t.Logf("ReadCoalesce %v: %d datagrams in %d reads, %d pauses", pause, sent, reads, pauses)
		switch {
		case pause < 0 && pauses != 0:
			t.Errorf("coalescing off: %d pauses, want none", pauses)
		case pause > 0 && (pauses == 0 || reads > sent/2):
			// At 1 ms apart, an 8 ms pause takes about 8 a read (at most a
			// batch, 16, to go on pausing): a half leaves room for a sender
			// slowed by a loaded machine.
			t.Errorf("ReadCoalesce %v: %d datagrams in %d reads with %d pauses; want at most %d reads, some pauses",
				pause, sent, reads, pauses, sent/2)
		}
	}
}
