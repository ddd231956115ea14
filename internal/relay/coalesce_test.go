// This file tests read coalescing: when a reader pauses (the coalescer's
// rule, read by read) and what a Server's readers do with it.

package relay

import (
	"net"
	"testing"
	"time"

	"github.com/spanstats/spanstats/internal/dgram"
	"github.com/spanstats/spanstats/internal/sockdir"
)

// TestCoalescerLimits: a Unix socket's pause aims at half its queue (at
// most a batch) and 32 KiB, and is busy at a full queue (or past a batch);
// a UDP socket's aims at a batch and an eighth of its receive buffer, and
// is busy past a batch; reads of one datagram each, a queue of one or no
// receive buffer never pause.
func TestCoalescerLimits(t *testing.T) {
	for _, tc := range []struct {
		name               string
		t                  Transport
		batch, q, granted  int
		batched            bool
		limit, busy, bytes int
		pausing            bool
	}{
		{"unix default queue", Unix, 16, 10, 0, true, 5, 10, 32 << 10, true},
		{"unix long queue", Unix, 16, 512, 0, true, 16, 17, 32 << 10, true},
		{"unix queue of 1", Unix, 16, 1, 0, true, 0, 1, 32 << 10, false},
		{"udp", UDP, 16, 10, 4 << 20, true, 16, 17, 512 << 10, true},
		{"udp small batch", UDP, 4, 10, 4 << 20, true, 4, 5, 512 << 10, true},
		{"udp, no buffer known", UDP, 16, 10, 0, true, 16, 17, 0, false},
		{"one datagram a read", UDP, 16, 10, 4 << 20, false, 16, 17, 512 << 10, false},
	} {
		c := newCoalescer(tc.t, time.Millisecond, tc.batch, tc.q, tc.granted, tc.batched)
		if c.limit != tc.limit || c.busy != tc.busy || c.bytes != tc.bytes || (c.pause > 0) != tc.pausing {
			t.Errorf("%s: limit %d, busy %d, bytes %d, pause %v; want %d, %d, %d, pausing %v",
				tc.name, c.limit, c.busy, c.bytes, c.pause, tc.limit, tc.busy, tc.bytes, tc.pausing)
		}
	}
}

// coalescerClock steps a coalescer through cycles at a fake clock.
type coalescerClock struct {
	t     *testing.T
	c     *coalescer
	at    time.Time
	reads int // times the clock was read
}

func (k *coalescerClock) now() time.Time { k.reads++; return k.at }

// step is a read of n datagrams of size bytes, advance after the last,
// into batches of 16; it must pause want.
func (k *coalescerClock) step(name string, n, size int, advance, want time.Duration) {
	k.t.Helper()
	k.at = k.at.Add(advance)
	if got := k.c.after(n, size, 16, k.now); got != want {
		k.t.Fatalf("%s: read of %d (%d bytes) after %v: pause %v, want %v", name, n, size, advance, got, want)
	}
}

// TestCoalescerRule steps a UDP socket's coalescer (batches of 16: limit
// 16, busy 17; 1 MiB buffer: 128 KiB) and a Unix socket's (queue of 10:
// limit 5, busy 10; 32 KiB) through reads at a fake clock.
func TestCoalescerRule(t *testing.T) {
	const pause = 4 * time.Millisecond
	udp := newCoalescer(UDP, pause, 16, 10, 1<<20, true)
	k := &coalescerClock{t: t, c: &udp, at: time.Unix(1000, 0)}
	k.step("the first datagram in a while", 1, 100, time.Hour, 0)
	k.step("another 1ms later: it would pause, but the cycle before would not", 1, 100, time.Millisecond, 0)
	k.step("another: 12 take 12ms, more than the setting", 1, 100, time.Millisecond, pause)
	k.step("12 a pause: 3000/s, 12 take the setting", 12, 1200, pause, pause)
	k.step("a full batch: read on", 16, 1600, pause, 0)
	reads := k.reads
	k.step("another", 16, 1600, 0, 0)
	if k.reads != reads {
		t.Fatalf("the clock was read for a full batch")
	}
	k.step("the cycle's end: 32 in a pause, busy", 0, 0, 0, 0)
	if udp.count != 0 || udp.size != 0 {
		t.Fatalf("cycle count %d, size %d after the cycle ended; want 0", udp.count, udp.size)
	}
	for held := time.Duration(0); held < coalesceHold-pause; held += pause {
		k.step("a small cycle within the hold", 2, 200, pause, 0)
	}
	k.step("the first small cycle past the hold", 2, 200, pause, pause)
	k.step("15 in 4ms (3750/s): 12 take 3.2ms", 15, 1500, pause, 3200*time.Microsecond)
	k.step("1 after 3.2ms: 12 would take longer than the setting", 1, 100, 3200*time.Microsecond, pause)
	k.step("10 in 0.2ms (50 000/s): 12 take 0.24ms, under an eighth of the setting", 10, 1000, 200*time.Microsecond, 0)
	k.step("two pauses after the last cycle: a datagram now and then", 1, 100, 2*pause, 0)
	k.step("a datagram soon after: the cycle before would not have paused", 1, 100, time.Millisecond, 0)
	k.step("another", 1, 100, time.Millisecond, pause)
	k.step("few datagrams, but past an eighth of the buffer: busy", 2, 129<<10, pause, 0)
	k.step("a small cycle within the hold", 1, 100, time.Millisecond, 0)

	// Bytes size the pause too: a 64 KiB buffer takes 8 KiB a cycle.
	small := newCoalescer(UDP, pause, 16, 10, 64<<10, true)
	k = &coalescerClock{t: t, c: &small, at: time.Unix(2000, 0)}
	k.step("first", 1, 100, time.Hour, 0)
	k.step("steady from here", 1, 100, time.Millisecond, 0)
	k.step("4 KiB in 4ms: 6 KiB take 6ms, more than the setting", 2, 4<<10, pause, pause)
	k.step("8 KiB in 4ms: 6 KiB take 3ms", 2, 8<<10, pause, 3*time.Millisecond)
	k.step("past 8 KiB: busy", 1, 8<<10+1, 3*time.Millisecond, 0)

	// A Unix socket at 1000 datagrams a second: pauses of three quarters of
	// half its queue, 3.75 datagrams; a full queue holds pauses off.
	unix := newCoalescer(Unix, pause, 16, 10, 0, true)
	k = &coalescerClock{t: t, c: &unix, at: time.Unix(3000, 0)}
	k.step("first", 1, 1024, time.Hour, 0)
	k.step("1 after 1ms: not yet steady", 1, 1024, time.Millisecond, 0)
	k.step("1 after 1ms", 1, 1024, time.Millisecond, 3750*time.Microsecond)
	k.step("4 after 3.75ms", 4, 4096, 3750*time.Microsecond, 3515625*time.Nanosecond)
	k.step("9 after 3.5ms: within the queue, a shorter pause", 9, 9216, 3515625*time.Nanosecond, 1464843*time.Nanosecond)
	k.step("a full queue: busy", 10, 10240, 1464843*time.Nanosecond, 0)
	k.step("a small cycle within the hold", 1, 1024, time.Millisecond, 0)
	k.step("past 32 KiB in a cycle: busy", 2, 33<<10, coalesceHold, 0)

	// Bursts of 100 a millisecond at a Unix socket the reader keeps up
	// with (BenchmarkRelayPaced, rate 100000): within a burst the rate is
	// too high to gain; the first datagrams after the quiet between bursts
	// alone would ask for a pause, which the burst would fill the queue in.
	burst := newCoalescer(Unix, pause, 16, 10, 0, true)
	k = &coalescerClock{t: t, c: &burst, at: time.Unix(5000, 0)}
	for range 3 {
		for range 10 {
			k.step("5 in 50µs, within a burst", 5, 5120, 50*time.Microsecond, 0)
		}
		k.step("the first 2 of the next burst, 0.5ms later", 2, 2048, 500*time.Microsecond, 0)
	}

	off := newCoalescer(UDP, -1, 16, 10, 1<<20, true)
	k = &coalescerClock{t: t, c: &off, at: time.Unix(4000, 0)}
	for range 3 {
		k.step("coalescing off", 1, 100, time.Millisecond, 0)
	}
}

// TestReadsCoalesce: a sender writing a datagram every millisecond to a
// relay's UDP or Unix socket: with an 8 ms ReadCoalesce the reader takes
// them in far fewer reads than datagrams, pausing between (UDP: 8 ms, 8 a
// read; Unix, aiming at three eighths of its queue of 10: 3.75), and every
// datagram is taken; with coalescing off it never pauses.
func TestReadsCoalesce(t *testing.T) {
	if !dgram.BatchedReads {
		t.Skip("reads take one datagram here: they never pause")
	}
	const sent = 150
	for _, tr := range []Transport{UDP, Unix} {
		for _, pause := range []time.Duration{8 * time.Millisecond, -1} {
			cfg := ServerConfig{UnixPath: "-", UDPAddr: "-", ReadCoalesce: pause}
			network := "udp"
			if tr == Unix {
				cfg.UnixPath, network = sockdir.Path(t, "r.sock"), "unixgram"
			} else {
				cfg.UDPAddr = "127.0.0.1:0"
			}
			s := runServer(t, cfg)
			conn, err := net.Dial(network, s.Addr(tr))
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
			waitFor(t, "every datagram sent", func() bool { return s.Relay().Stats().Datagrams[tr] == sent })
			reads, pauses := s.reads[tr].Load(), s.pauses[tr].Load()
			t.Logf("%v, ReadCoalesce %v: %d datagrams in %d reads, %d pauses", tr, pause, sent, reads, pauses)
			switch {
			case pause < 0 && pauses != 0:
				t.Errorf("%v, coalescing off: %d pauses, want none", tr, pauses)
			case pause > 0 && (pauses == 0 || reads > sent/2):
				// A half leaves room for a sender slowed by a loaded
				// machine.
				t.Errorf("%v, ReadCoalesce %v: %d datagrams in %d reads with %d pauses; want at most %d reads, some pauses",
					tr, pause, sent, reads, pauses, sent/2)
			}
		}
	}
}
