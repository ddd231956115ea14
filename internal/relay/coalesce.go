// This file owns read coalescing: while datagrams arrive sparsely, a
// socket's reader pauses between reads so that the kernel queues a few
// milliseconds of them and one wake-up takes them all.

package relay

import "time"

// DefaultReadCoalesce is how long a reader pauses between reads while
// datagrams arrive sparsely. At 1 000 datagrams a second a wake-up per
// datagram, not the decoding, is most of what the relay costs
// (BenchmarkRelayPaced, rate 1000); a few milliseconds in the kernel's
// queue change nothing downstream, where buckets wait for the interval.
const DefaultReadCoalesce = 4 * time.Millisecond

// MaxReadCoalesce bounds ServerConfig.ReadCoalesce: far below what an SDK
// sender waits for a full socket (100 ms a report), so that no pause can
// cost a sender its report.
const MaxReadCoalesce = 50 * time.Millisecond

// coalesceHold is how long a reader does not pause after a cycle that
// found its socket busy: an SDK's patience with a full socket (100 ms a
// report), so that the senders of a burst, retrying, never meet a pause
// (TestBurstOfThousandSenders counts their waits).
const coalesceHold = 100 * time.Millisecond

// coalescer decides, after each read of one socket, whether its reader
// pauses before the next. The reads since the last decision (a cycle:
// reads that filled their batch go on at once) say how busy the socket is.
// The reader pauses only when the cycle took at most limit datagrams, so
// that a pause lets the kernel queue about that many; only when the cycle
// came within two pauses of the one before (a datagram now and then is read
// when it arrives, as without coalescing, not after a pause that would find
// nothing and wake the reader twice); and not within coalesceHold of a
// cycle of busy datagrams or more (a Unix socket's queue was full, a UDP
// socket's cycle needed more than a batch). The pause adapts to the rate:
// a cycle past limit halves it (down to an eighth of the setting), one of
// at most half of limit doubles it back, so that at a steady rate cycles
// stay within limit rather than pausing every other time.
type coalescer struct {
	pause       time.Duration // the setting; <= 0: never
	cur         time.Duration // the pause now, within pause/8..pause
	limit, busy int           // see coalescer
	count       int           // datagrams of the cycle under way
	last        time.Time     // when the previous cycle ended
	calm        time.Time     // no pause before: coalesceHold after a busy cycle
}

// newCoalescer returns the coalescer of a socket of transport t, whose
// reads fill batches of batch datagrams, for a ServerConfig.ReadCoalesce
// of pause; unixQueue is how many datagrams a Unix socket queues before
// its senders get EAGAIN. A Unix socket's cycle may take half of those (a
// pause must not fill the queue: its senders would retry), and is busy at
// a full queue; a UDP socket's may take a batch, a small part of what its
// receive buffer holds. Where a read takes one datagram (batched false),
// its count cannot tell an empty queue: never.
func newCoalescer(t Transport, pause time.Duration, batch, unixQueue int, batched bool) coalescer {
	limit, busy := batch, batch+1
	if t == Unix {
		limit, busy = min(unixQueue/2, batch), min(unixQueue, batch+1)
	}
	if !batched || limit < 1 {
		pause = 0
	}
	return coalescer{pause: pause, cur: pause, limit: limit, busy: busy}
}

// after records a read of n datagrams into a batch of capacity datagrams
// and returns how long to pause before the next read (0: none). now is
// read only when a cycle ends.
func (c *coalescer) after(n, capacity int, now func() time.Time) time.Duration {
	if c.pause <= 0 {
		return 0
	}
	c.count += n
	if n >= capacity {
		return 0 // more may be queued: read on
	}
	at := now()
	count, since := c.count, at.Sub(c.last)
	c.count, c.last = 0, at
	if count >= c.busy {
		c.calm = at.Add(coalesceHold)
	}
	switch {
	case count > c.limit:
		c.cur = max(c.cur/2, c.pause/8)
		return 0
	case count <= c.limit/2:
		c.cur = min(2*c.cur, c.pause)
	}
	if since >= 2*c.cur || at.Before(c.calm) {
		return 0
	}
	return c.cur
}
