// This file holds the datagram transport: each payload of a report goes to
// a relay (cmd/statsrelay) as one datagram, in the envelope of DESIGN §8.

package stats

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/spanstats/spanstats/internal/dgram"
	"github.com/spanstats/spanstats/writer"
)

// Bounds of the wait for a full socket or a missing relay: the sender
// sleeps at most datagramPatience in all retrying a report's datagrams
// (per report, for held reports a Flush takes along), then drops what is
// left (counted, and announced in the next datagram's envelope).
const (
	datagramPatience   = 100 * time.Millisecond
	datagramFirstPause = 500 * time.Microsecond
	datagramMaxPause   = 10 * time.Millisecond
	datagramBusyPause  = 4 * time.Millisecond
)

// ErrDatagramTooLarge is the error (Health.LastSendError, Flush) of a
// payload dropped because it holds one group larger than MaxDatagramBytes
// alone, which no split can bring under the limit.
var ErrDatagramTooLarge = errors.New("stats: group too large for a datagram, dropped")

// datagramOut writes reports to a relay. It runs on the sender goroutine.
type datagramOut struct {
	to    target
	ctx   context.Context // ends when Stop gives up
	ctr   *counters
	bufs  bufPool
	conn  *dgram.Sender
	limit int    // Config.MaxDatagramBytes, envelope included
	seq   uint64 // of the last datagram written
	sleep func(time.Duration)

	// What was dropped since the last datagram written, for its envelope.
	droppedPayloads, droppedSpans uint64
}

func newDatagramOut(ctx context.Context, to target, limit int, ctr *counters, bufs bufPool) *datagramOut {
	return &datagramOut{to: to, ctx: ctx, limit: limit, ctr: ctr, bufs: bufs, sleep: time.Sleep}
}

func (d *datagramOut) start()                     {}
func (d *datagramOut) nextDue() (time.Time, bool) { return time.Time{}, false }
func (d *datagramOut) runDue(time.Time)           {}

func (d *datagramOut) stop() {
	if d.conn != nil {
		d.conn.Close()
	}
}

// dial connects to the relay; the socket buffer of a Unix socket is raised
// so that two datagrams of the limit fit in it (the kernel caps it at
// net.core.wmem_max; a datagram beyond the buffer fails, counted).
func (d *datagramOut) dial() error {
	var err error
	if d.to.network == "unixgram" {
		d.conn, err = dgram.DialUnixgram(d.to.address, 2*d.limit)
	} else {
		d.conn, err = dgram.DialUDP(d.to.address)
	}
	return err
}

// send writes each part as one datagram. A full socket is waited for, a
// missing relay retried with growing pauses, until the report's patience
// runs out; what is left is then dropped and counted.
func (d *datagramOut) send(r *report, last bool) {
	// The patience is time slept waiting for the relay: a sender starved of
	// CPU (a thousand processes flushing at once) is not a full socket.
	patience := datagramPatience * time.Duration(1+r.merged) // per report, held ones merged in included
	pause := datagramFirstPause
	first, lastErr := r.answer, error(nil)
	if r.headerOnly {
		// The final flag without spans (consumer.sendFinal): neither a
		// payload sent nor one dropped if it fails, but it waits for a full
		// socket as a report does: it is the last chance to tell the drops.
		_ = d.write(r.parts[0], writer.FlagFinal, &patience)
		d.bufs.put(r.parts[0].body)
		return
	}
	for i, p := range r.parts {
		flags := uint8(0)
		if last && i == len(r.parts)-1 {
			flags = writer.FlagFinal
		}
		var err error
		if len(p.body) > d.limit {
			// One group alone over the limit (labels at their caps, many
			// long peer tags): the relay would drop it as truncated while
			// this sender counted it sent.
			err = fmt.Errorf("%w: a payload of one group is %d bytes, over MaxDatagramBytes %d", ErrDatagramTooLarge, len(p.body), d.limit)
		} else {
			err = d.write(p, flags, &patience)
		}
		for errors.Is(err, dgram.ErrNoRelay) && patience >= pause && d.ctx.Err() == nil {
			d.ctr.noteError(err)
			d.ctr.payloadsFailed.Add(1)
			d.ctr.payloadsRetried.Add(1)
			// Jittered: a host's senders that lost the relay together must
			// not retry together.
			d.sleep(take(&patience, pause/2+rand.N(pause/2+1)))
			pause = min(2*pause, datagramMaxPause)
			err = d.write(p, flags, &patience)
		}
		if err == nil {
			d.ctr.payloadsSent.Add(1)
			d.ctr.bytesSent.Add(uint64(len(p.body)))
			d.ctr.spansSent.Add(p.hits)
		} else {
			d.ctr.noteError(err)
			d.ctr.payloadsFailed.Add(1)
			d.ctr.payloadsDropped.Add(1)
			d.ctr.spansUnsent.Add(p.hits)
			d.droppedPayloads++
			d.droppedSpans += p.hits
			if first == nil {
				first = err
			}
		}
		d.bufs.put(p.body)
		lastErr = err
	}
	if r.fallback != nil {
		if last && lastErr != nil {
			// The final flag, and what was just dropped, on the header
			// alone, within what is left of the report's patience.
			_ = d.write(part{body: r.fallback}, writer.FlagFinal, &patience)
		}
		d.bufs.put(r.fallback)
	}
	if r.done != nil {
		r.done <- first
	}
}

// write sends one part, dialing first if needed. The envelope goes into the
// room the consumer left before the payload; the sequence advances only
// when the datagram is written, so the relay's gaps count what the network
// lost and the envelope what this sender dropped, never both.
func (d *datagramOut) write(p part, flags uint8, patience *time.Duration) error {
	if d.conn == nil {
		if err := d.dial(); err != nil {
			return err
		}
	}
	// What the consumer dropped (a full send queue) is told as well.
	d.droppedPayloads += d.ctr.unannouncedPayloads.Swap(0)
	d.droppedSpans += d.ctr.unannouncedSpans.Swap(0)
	writer.AppendEnvelope(p.body[:0], writer.Envelope{
		Flags:           flags,
		Sequence:        d.seq + 1,
		DroppedPayloads: sat32(d.droppedPayloads),
		DroppedSpans:    sat32(d.droppedSpans),
	})
	err := d.conn.Write(p.body)
	// A full socket (the relay's queue: net.unix.max_dgram_qlen, often 10)
	// is retried after short jittered pauses, not waited for in the
	// netpoller: the kernel wakes every waiting sender at each read, and a
	// burst of senders woken together spends its patience in a herd
	// (TestBurstOfThousandSenders).
	for pause := datagramFirstPause; errors.Is(err, dgram.ErrWouldBlock); pause = min(2*pause, datagramBusyPause) {
		if *patience <= 0 || d.ctx.Err() != nil {
			break
		}
		d.sleep(take(patience, pause/2+rand.N(pause/2+1)))
		err = d.conn.Write(p.body)
	}
	if errors.Is(err, dgram.ErrNoRelay) {
		// The relay went away (or restarted on a new socket): dial again
		// on the next attempt.
		d.conn.Close()
		d.conn = nil
	}
	if err != nil {
		return err
	}
	d.seq++
	d.droppedPayloads, d.droppedSpans = 0, 0
	return nil
}

// take spends up to d of the patience left and returns what it spent.
func take(patience *time.Duration, d time.Duration) time.Duration {
	d = min(d, *patience)
	*patience -= d
	return d
}

func sat32(v uint64) uint32 { return uint32(min(v, 1<<32-1)) }
