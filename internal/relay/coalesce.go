// This file owns read coalescing: while datagrams arrive sparsely, a
// socket's reader pauses between reads so that the kernel queues a few
// milliseconds of them and one wake-up takes them all.

package relay

import "time"

// DefaultReadCoalesce is the longest a reader pauses between reads while
// datagrams arrive sparsely. At 1 000 datagrams a second a wake-up per
// datagram, not the decoding, is most of what the relay costs
// (BenchmarkRelayPaced, rate 1000); a few milliseconds in the kernel's
// queue change nothing downstream, where buckets wait for the interval.
const DefaultReadCoalesce = 4 * time.Millisecond

// MinReadCoalesce and MaxReadCoalesce bound ServerConfig.ReadCoalesce:
// below the minimum a pause saves no wake-up; the maximum is far below what
// an SDK sender waits for a full socket (100 ms a report).
const (
	MinReadCoalesce = 100 * time.Microsecond
	MaxReadCoalesce = 50 * time.Millisecond
)

// coalesceHold is how long a reader does not pause after a busy cycle: an
// SDK's patience with a full socket (100 ms a report), so that the senders
// of a burst, retrying, meet no pause (TestBurstOfThousandSenders counts
// their waits).
const coalesceHold = 100 * time.Millisecond

// unixCoalesceBytes is what a Unix socket's cycle may carry and still
// pause: a Unix datagram is charged to its sender's send buffer until read,
// and an SDK sizes that buffer for two of its largest datagrams, so a
// pause must not let one sender's datagrams of tens of KiB wait.
const unixCoalesceBytes = 32 << 10

// coalescer decides, after each read of one socket, whether its reader
// pauses before the next, and for how long. The reads since the last
// decision (a cycle: reads that filled their batch go on at once) say how
// fast datagrams come. The pause is the time that rate takes to bring
// three quarters of limit datagrams (and of bytes bytes), at most the
// setting; the reader does not pause when that is under an eighth of the
// setting (a rate too high to gain), when the cycle came twice the setting
// or more after the one before (a datagram now and then is read when it
// arrives, as without coalescing, not after a pause that would find
// nothing and wake the reader twice), within coalesceHold of a busy
// cycle: busy datagrams or more (a Unix socket's queue found full; more
// than a batch from UDP), or more than bytes, nor unless the cycle before
// would have paused too: at the first datagrams of a burst after a quiet
// spell the rate says nothing of the burst, which such a pause lets fill a
// Unix socket's queue (BenchmarkRelayPaced, rate 100000).
type coalescer struct {
	pause       time.Duration // the setting; <= 0: never
	limit, busy int           // datagrams: see coalescer
	bytes       int           // bytes a cycle may carry and not be busy
	count, size int           // the cycle under way: datagrams, bytes
	last        time.Time     // when the previous cycle ended
	calm        time.Time     // no pause before: coalesceHold after a busy cycle
	steady      bool          // the previous cycle would have paused
}

// newCoalescer returns the coalescer of a socket of transport t, whose
// reads fill batches of batch datagrams, for a ServerConfig.ReadCoalesce
// of pause. unixQueue is how many datagrams a Unix socket queues before
// its senders get EAGAIN: a pause aims at three eighths of them, and
// a full queue is busy. A UDP socket aims at a batch and is busy past
// one, or past an eighth of its receive buffer (granted: the kernel
// charges a datagram more than its length). Where a read takes one
// datagram (batched false), its count cannot tell an empty queue: never.
func newCoalescer(t Transport, pause time.Duration, batch, unixQueue, granted int, batched bool) coalescer {
	limit, busy, bytes := batch, batch+1, granted/8
	if t == Unix {
		limit, busy, bytes = min(unixQueue/2, batch), min(unixQueue, batch+1), unixCoalesceBytes
	}
	if !batched || limit < 1 || bytes < 1 {
		pause = 0
	}
	return coalescer{pause: pause, limit: limit, busy: busy, bytes: bytes}
}

// after records a read of n datagrams of size bytes into a batch of
// capacity datagrams and returns how long to pause before the next read (0:
// none). now is read only when a cycle ends.
func (c *coalescer) after(n, size, capacity int, now func() time.Time) time.Duration {
	if c.pause <= 0 {
		return 0
	}
	c.count += n
	c.size += size
	if n >= capacity {
		return 0 // more may be queued: read on
	}
	at := now()
	count, size, since := c.count, c.size, at.Sub(c.last)
	c.count, c.size, c.last = 0, 0, at
	steady := c.steady
	c.steady = false
	if count >= c.busy || size > c.bytes {
		c.calm = at.Add(coalesceHold)
		return 0
	}
	if count == 0 || since <= 0 {
		return 0
	}
	d := min(c.pause, since*time.Duration(3*c.limit)/time.Duration(4*count))
	if size > 0 {
		d = min(d, time.Duration(float64(since)*float64(3*c.bytes)/float64(4*size)))
	}
	if d < c.pause/8 || since >= 2*c.pause {
		return 0
	}
	c.steady = true
	if !steady || at.Before(c.calm) {
		return 0
	}
	return d
}
