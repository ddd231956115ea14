// This file holds the consumer's reports: the buckets of an interval
// packed into payloads and handed to the sender, never waiting for it but
// at Stop.

package stats

import (
	"cmp"
	"time"

	"github.com/spanstats/spanstats/writer"
)

// report encodes c.buckets[:n], whose groups are the entries of c.tabs[:n]
// hit in them, into payloads no larger than the packer's limit, resets
// those tables for their next interval and queues the payloads for the
// sender. It never waits for the sender, but for Stop's reports: the
// consumer has nothing else left to do, and a send queue full for a moment
// (the sender finishing a request) must not lose the last interval. That
// wait ends when the sender takes the report or when Stop's context gives
// up (abort), and the report is then counted as dropped.
func (c *consumer) report(n int, done chan error) {
	c.touched = c.tabs[0].Touched(c.touched[:0])
	c.buckets[0].Groups = c.touched
	if n > 1 {
		c.touched1 = c.tabs[1].Touched(c.touched1[:0])
		c.buckets[1].Groups = c.touched1
	}
	// Empty buckets are left out of the payload.
	m := 0
	for i := range n {
		if len(c.buckets[i].Groups) > 0 {
			c.buckets[m] = c.buckets[i]
			m++
		}
	}
	defer func() {
		for i := range n {
			c.tabs[i].Rotate()
			c.tabs[i] = nil
		}
		c.buckets = [2]writer.Bucket{}
		clear(c.touched) // do not pin entries the table may discard
		clear(c.touched1)
	}()
	var err error
	switch {
	case m == 0:
	case c.off.Load(): // the agent would refuse it
		for _, b := range c.buckets[:m] {
			c.discard(b.Groups)
		}
		err = ErrAgentOff
	case c.stopping && c.halt.Load(): // no time left to encode it
		c.dropUnencoded(m, nil)
		err = errStopDeadline
	default:
		if c.send(m, done) {
			return
		}
		err = errStopDeadline // a Flush's report, cut short by Stop
	}
	if done != nil {
		// Through the sender, not answered here: it may hold an earlier
		// report for its jitter, and Flush returns only once that is sent.
		c.queue(&report{done: done, answer: err})
	}
}

// dropUnencoded counts c.buckets[:m] dropped: Stop gave up before they
// were encoded, or while, with parts of them packed: PayloadsDropped counts
// those, and one more for the groups Pack had not finished (or the report,
// when none was packed).
func (c *consumer) dropUnencoded(m int, parts []part) {
	var hits, packed uint64
	for _, b := range c.buckets[:m] {
		for _, e := range b.Groups {
			hits += e.Hits
		}
	}
	for _, p := range parts {
		packed += p.hits
	}
	payloads := uint64(len(parts))
	if payloads == 0 || packed < hits {
		payloads++
	}
	c.ctr.noteError(errStopDeadline) // the log line and Health say why
	c.ctr.droppedReport(payloads, hits)
}

// send packs c.buckets[:m] and queues the payloads for the sender; it
// reports false, having dropped and counted them, when Stop gave up while
// they were being encoded (a table of many long keys takes a good part of
// a second: TestStopGivesUpWhileEncoding).
func (c *consumer) send(m int, done chan error) bool {
	r := &report{done: done, final: c.final}
	c.laid = c.twins.Split(c.laid[:0], c.buckets[:m])
	if !c.halt.Load() {
		c.packer.Pack(&c.header, c.laid, func(body []byte, hits uint64) {
			r.parts = append(r.parts, part{body: body, hits: hits})
		})
	}
	c.twins.Release()
	clear(c.laid) // do not pin entries the table may discard
	if c.halt.Load() {
		for _, p := range r.parts {
			c.bufs.put(p.body)
		}
		c.dropUnencoded(m, r.parts)
		return false
	}
	c.finalSent = c.finalSent || c.final
	if c.final && c.packer.Reserve > 0 {
		// To a relay: should the last part not be written (one group over
		// the limit, the relay gone), the final flag and the drops go out
		// on the header alone.
		r.fallback = c.headerOnly()
	}
	c.queue(r)
	return true
}

// sendFinal queues, when Stop found nothing left to report, a payload of
// the header alone for a relay: its datagram carries the envelope's final
// flag (the relay forgets this sender at once rather than after it idles)
// and the drops no earlier envelope told.
func (c *consumer) sendFinal() {
	c.queue(&report{parts: []part{{body: c.headerOnly()}}, final: true, headerOnly: true})
}

// headerOnly is a payload of the header alone, with room for the envelope.
func (c *consumer) headerOnly() []byte {
	h := c.header
	h.Sequence = c.nextSeq()
	body := c.bufs.get(c.packer.Reserve + writer.HeaderSize(&h))
	return writer.AppendPayload(body[:c.packer.Reserve], &h, nil)
}

// queue hands r to the sender, or drops it, counted, when the send queue
// is full (at Stop, after waiting until Stop gives up).
func (c *consumer) queue(r *report) {
	done := r.done
	r.queued = time.Now()
	select {
	case c.out <- r:
		return
	default:
	}
	if c.stopping {
		select {
		case c.out <- r:
			return
		case <-c.abort:
		}
	}
	if r.fallback != nil {
		c.bufs.put(r.fallback)
	}
	if r.headerOnly {
		c.bufs.put(r.parts[0].body) // no span in it, nothing to count
		return
	}
	if len(r.parts) == 0 {
		// A Flush with nothing new: nothing dropped, but the reports before
		// it are not handed over yet, so it cannot answer nil.
		if done != nil {
			done <- cmp.Or(r.answer, ErrSendQueueFull)
		}
		return
	}
	c.ctr.noteError(ErrSendQueueFull) // the log line and Health say why
	for _, p := range r.parts {
		c.ctr.droppedReport(1, p.hits)
		c.bufs.put(p.body)
	}
	if done != nil {
		done <- ErrSendQueueFull
	}
}
