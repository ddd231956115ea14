// This file holds the consumer: the one goroutine that owns the table,
// drains the inbox into it and turns each interval into payloads.

package stats

import (
	"runtime"
	"sync/atomic"
	"time"

	"github.com/spanstats/spanstats/aggregate"
	"github.com/spanstats/spanstats/inbox"
	"github.com/spanstats/spanstats/writer"
)

// drainBatch is how many spans the consumer takes from the inbox at a time:
// large enough to amortise the signal check, small enough to stay in L2.
const drainBatch = 256

// now is the clock; a variable so tests can check bucket alignment.
var now = time.Now

// newInbox returns the inbox of n spans. Its slots are cleared with
// aggregate.Record.Reset, which writes only the fields a producer can have
// set, not the whole slot: zeroing it all pulls the slot's last cache lines
// in only to write zeros over zeros (see BenchmarkSteadyState).
func newInbox(n int) *inbox.Ring[aggregate.Record] {
	r := inbox.New[aggregate.Record](n)
	r.SetClear((*aggregate.Record).Reset)
	return r
}

// idleYields is how many times the consumer yields on an empty inbox before
// parking: enough to ride out the gaps of a saturating stream, few enough
// that a paced one parks within microseconds.
const idleYields = 4

// The consumer is not woken per span: parked, it drains the inbox every
// drainPeriod, or when a push fills it to 1/wakeFraction of its capacity,
// so that a stream of any rate costs a few wake-ups a second, not one per
// burst (see BenchmarkPaced in bench/peer). The mark leaves the producers
// the rest of the inbox while the consumer gets a processor; a period whose
// drain finds nothing makes the consumer wait for the first push instead,
// so an idle process does not wake at all (see BenchmarkIdle).
const (
	drainPeriod  = 50 * time.Millisecond
	wakeFraction = 4
)

// consumer is the state of the one goroutine that owns the table. Nothing
// else reads or writes it.
type consumer struct {
	in       *inbox.Ring[aggregate.Record]
	ctr      *counters
	off      *atomic.Bool              // the agent refuses stats: discard reports
	peerTags *atomic.Pointer[[]string] // the agent's list, from the sender
	flushCh  <-chan chan error
	clearCh  <-chan struct{}
	stopCh   <-chan struct{}
	out      chan<- *report  // to the sender
	abort    <-chan struct{} // Stop gave up waiting
	bufs     bufPool
	header   writer.Header
	// packer cuts a report into payloads of at most Config.MaxPayloadBytes,
	// or datagrams with room for the envelope before each payload.
	packer writer.Packer
	done   chan struct{}

	table     *aggregate.Table
	batch     []aggregate.Record
	touched   []*aggregate.Entry
	buckets   [1]writer.Bucket
	seq       uint64
	interval  time.Duration
	start     time.Time // start of the current interval
	boundary  time.Time // the aligned end the timer is armed for
	timer     *time.Timer
	poll      *time.Timer         // drainPeriod, while parked with spans below the mark
	quiet     bool                // the last drainPeriod brought no span
	wakeups   atomic.Uint64       // times the consumer left a park (BenchmarkIdle)
	peerKeys  *[]string           // the list last given to the table
	batchPtrs []*aggregate.Record // the inbox slots of the batch being aggregated
	stopping  bool                // Stop's final report: wait for the sender

	// halt is set with abort, for AddBatch to look at between spans.
	halt atomic.Bool
}

func newConsumer(a *Aggregator, cfg *Config, to target, out chan<- *report, bufs bufPool, abort <-chan struct{}) *consumer {
	c := &consumer{
		in:        a.inbox,
		ctr:       &a.c,
		off:       &a.off,
		peerTags:  &a.snd.peerTags,
		flushCh:   a.flushCh,
		clearCh:   a.clearCh,
		stopCh:    a.stopCh,
		out:       out,
		abort:     abort,
		bufs:      bufs,
		header:    headerOf(cfg),
		done:      make(chan struct{}),
		table:     aggregate.NewTable(cfg.MaxAggregates),
		batch:     make([]aggregate.Record, drainBatch),
		batchPtrs: make([]*aggregate.Record, drainBatch),
		interval:  cfg.BucketInterval,
	}
	c.packer = writer.Packer{Limit: to.maxPayload(cfg), Reserve: to.reserve(), Alloc: bufs.get, Sequence: c.nextSeq}
	c.table.SetLimits(cfg.CardinalityLimits)
	c.table.SetHalt(&c.halt)
	if len(cfg.PeerTagKeys) > 0 {
		c.table.SetPeerTagKeys(cfg.PeerTagKeys)
	}
	return c
}

// nextSeq numbers the payloads.
func (c *consumer) nextSeq() uint64 {
	c.seq++
	return c.seq
}

// headerOf is the payload identity cfg describes.
func headerOf(cfg *Config) writer.Header {
	return writer.Header{
		Hostname: cfg.Hostname, Env: cfg.Env, Version: cfg.Version,
		Lang: cfg.Lang, TracerVersion: cfg.TracerVersion, RuntimeID: cfg.RuntimeID,
		Service: cfg.Service, ContainerID: cfg.ContainerID, Tags: cfg.Tags,
		GitCommitSha: cfg.GitCommitSha, ImageTag: cfg.ImageTag, ProcessTags: cfg.ProcessTags,
	}
}

func (c *consumer) run() {
	defer close(c.done)
	t := now()
	c.start = t.Truncate(c.interval)
	c.boundary = c.start.Add(c.interval)
	c.timer = time.NewTimer(c.boundary.Sub(t))
	defer c.timer.Stop()
	c.poll = time.NewTimer(drainPeriod)
	defer c.poll.Stop()
	mark := max(1, c.in.Cap()/wakeFraction)
	idle := 0
	for {
		if n := c.consume(); n > 0 {
			idle = 0
			c.quiet = false
			// A steady stream never lets the inbox empty: look at the
			// signals between batches without waiting.
			select {
			case <-c.timer.C:
				c.tick()
			case done := <-c.flushCh:
				c.flush(done)
			case <-c.clearCh:
				c.clear()
			case <-c.stopCh:
				c.finish()
				return
			default:
			}
			continue
		}
		if idle < idleYields {
			// Under overload the inbox empties only for a moment: yielding
			// keeps the consumer runnable instead of parking until the mark.
			idle++
			runtime.Gosched()
			continue
		}
		idle = 0
		wake, poll := mark, c.poll.C
		if c.quiet {
			wake, poll = 1, nil
		}
		if !c.in.ParkUntil(wake) {
			continue // the mark was reached (or the ring closed) while parking
		}
		if poll != nil {
			c.poll.Reset(drainPeriod)
		}
		select {
		case <-c.in.Wake():
		case <-poll:
			c.quiet = c.in.Len() == 0
		case <-c.timer.C:
			c.tick()
		case done := <-c.flushCh:
			c.flush(done)
		case <-c.clearCh:
			c.clear()
		case <-c.stopCh:
			c.in.Unpark()
			c.finish()
			return
		}
		c.in.Unpark()
		c.wakeups.Add(1)
	}
}

func (c *consumer) aggregate(spans []aggregate.Record) {
	for i := range spans {
		c.table.Add(&spans[i])
	}
	c.counted(len(spans))
}

// consume aggregates up to one batch of spans in place in the inbox. Once
// Stop has given up waiting (halt), AddBatch stops before its next costly
// span and the rest of the batch stays in the inbox.
func (c *consumer) consume() int {
	c.syncPeerTags()
	// In place: the batch is the inbox's own slots.
	in := c.in
	n := in.Ready(drainBatch)
	batch := c.batchPtrs[:n]
	for i := range batch {
		batch[i] = in.At(i)
	}
	n = c.table.AddBatch(batch)
	in.Release(n)
	if n > 0 {
		c.counted(n)
	}
	return n
}

// syncPeerTags gives the table the agent's peer-tag list if it arrived or
// changed since the last batch.
func (c *consumer) syncPeerTags() {
	if k := c.peerTags.Load(); k != c.peerKeys {
		c.peerKeys = k
		c.table.SetPeerTagKeys(*k)
	}
}

// counted publishes the table's counters after a batch of n spans.
func (c *consumer) counted(n int) {
	ac := c.ctr
	ac.counted.Add(uint64(n))
	ac.overflowed.Store(c.table.Overflowed())
	ac.recycled.Store(c.table.Recycled())
	ac.entries.Store(uint64(c.table.Len()))
	ac.collapsedSpans.Store(c.table.CollapsedSpans())
	for f := range aggregate.NumFields {
		ac.collapsed[f].Store(c.table.Collapsed(f))
	}
}

// drainAll aggregates everything already in the inbox, so a Flush reports
// every span published before it was called.
func (c *consumer) drainAll() {
	for c.consume() > 0 {
	}
}

// tick runs when the timer fires: it ends the interval at the armed boundary
// and arms the timer for the next one.
func (c *consumer) tick() {
	t := now()
	c.closeDue(t)
	c.timer.Reset(c.boundary.Sub(t))
}

// closeDue reports the interval ending at the armed boundary if that has
// passed. A Flush may run after the boundary but before the timer is
// handled; it calls this first so no bucket ever spans a boundary.
func (c *consumer) closeDue(t time.Time) {
	if t.Before(c.boundary) {
		return
	}
	end := c.boundary
	if t.Sub(end) >= c.interval { // the process was paused: realign on now
		end = t.Truncate(c.interval)
	}
	c.report(end, nil)
	c.boundary = end.Add(c.interval)
}

func (c *consumer) flush(done chan error) {
	c.drainAll()
	t := now()
	if !t.Before(c.boundary) {
		c.closeDue(t)
		c.timer.Reset(c.boundary.Sub(t))
	}
	c.report(t, done)
}

// unsent counts the spans in entries as one payload dropped unsent.
func (c *consumer) unsent(entries []*aggregate.Entry) {
	var hits uint64
	for _, e := range entries {
		hits += e.Hits
	}
	clear(entries) // do not pin entries the table may discard
	c.ctr.payloadsDropped.Add(1)
	c.ctr.spansUnsent.Add(hits)
}

func (c *consumer) clear() {
	c.discard(c.table.Touched(c.touched[:0]))
	c.table.Clear()
	c.ctr.entries.Store(0)
}

// discard counts the spans in entries as cleared: they are dropped from
// the report on purpose (Clear, or the agent refusing stats).
func (c *consumer) discard(entries []*aggregate.Entry) {
	var hits uint64
	for _, e := range entries {
		hits += e.Hits
	}
	clear(entries) // do not pin entries the table may discard
	c.ctr.cleared.Add(hits)
}

// finish runs at Stop: it takes every span pushed before the inbox closed,
// reports them and hands the sender its last report. If Stop's context ends
// first, the spans still in the inbox are dropped unread and counted
// (StopUndrained), and so is the last report unless it is already encoded.
func (c *consumer) finish() {
	c.in.Close()
	for !c.halt.Load() {
		if c.consume() > 0 {
			continue
		}
		// Nothing ready: the inbox is empty, or a push claimed before Close
		// is still writing its slot; DrainClosed waits for it.
		n := c.in.DrainClosed(c.batch[:1])
		if n == 0 {
			break
		}
		c.aggregate(c.batch[:n])
		c.batch[0] = aggregate.Record{} // do not pin the span's strings
	}
	for {
		n := c.in.DrainClosed(c.batch)
		if n == 0 {
			break
		}
		c.ctr.stopUndrained.Add(uint64(n))
		clear(c.batch[:n])
	}
	c.stopping = true
	c.report(now(), nil)
	close(c.out)
}

// report encodes the interval [c.start, end) into payloads no larger than
// the packer's limit, resets the table for the next interval and queues the
// payloads for the sender. It never waits for the sender, but for Stop's
// final report: the consumer has nothing else left to do, and a send queue
// full for a moment (the sender finishing a request) must not lose the
// last interval. That wait ends when the sender takes the report or when
// Stop's context gives up (abort), and the report is then counted as
// dropped.
func (c *consumer) report(end time.Time, done chan error) {
	entries := c.table.Touched(c.touched[:0])
	c.touched = entries
	start := c.start
	var length time.Duration
	if end.After(start) {
		length = end.Sub(start)
		c.start = end
	}
	if len(entries) == 0 {
		c.table.Rotate()
		if done != nil {
			done <- nil
		}
		return
	}
	if c.off.Load() { // the agent would refuse it
		c.discard(entries)
		c.table.Rotate()
		if done != nil {
			done <- ErrAgentOff
		}
		return
	}
	if c.stopping && c.halt.Load() { // no time left to encode it
		c.unsent(entries)
		c.table.Rotate()
		return
	}
	r := &report{done: done}
	c.buckets[0] = writer.Bucket{
		Start:    uint64(start.UnixNano()),
		Duration: uint64(length),
	}
	c.buckets[0].Groups = entries
	c.packer.Pack(&c.header, c.buckets[:], func(body []byte, hits uint64) {
		r.parts = append(r.parts, part{body: body, hits: hits})
	})
	c.buckets[0].Groups = nil
	clear(c.touched) // do not pin entries the table may discard
	c.table.Rotate()
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
	for _, p := range r.parts {
		c.ctr.payloadsDropped.Add(1)
		c.ctr.spansUnsent.Add(p.hits)
		c.bufs.put(p.body)
	}
	if done != nil {
		done <- ErrSendQueueFull
	}
}
