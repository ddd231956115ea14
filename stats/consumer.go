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

// now is the consumer's clock (consumer.clock); tests give it their own.
var now = time.Now

// graceDivisor sets how long the previous bucket stays open after its end:
// a tenth of the interval (1 s of the default 10 s), at most maxGrace,
// takes the spans that ended just before a boundary but reach the consumer
// just after it (the consumer drains the inbox every drainPeriod; a tracer
// may publish a trace's spans when the whole trace ends), and delays the
// report by no more than that.
const graceDivisor = 10

// maxGrace caps the grace at long intervals, so that the send, drawn
// after the close, stays within min(interval/5, 2 s) of the boundary
// (DefaultSendJitter); a span that comes later counts as late.
const maxGrace = time.Second

// closeGrace is how long the previous bucket of an interval stays open.
func closeGrace(interval time.Duration) time.Duration {
	return min(interval/graceDivisor, maxGrace)
}

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
// so that a stream costs about max(5, rate/4096) wake-ups a second (the
// default inbox), not one per burst (see BenchmarkPaced in bench/peer). The
// mark leaves the producers the rest of the inbox while the consumer gets
// a processor; a period whose drain finds nothing makes the consumer wait
// for the first push instead, so an idle process wakes only at its
// buckets' boundaries and closes, twice an interval (see BenchmarkIdle).
// Each drain first pulls the table back into caches the application has
// used meanwhile, a fixed cost its spans share (BenchmarkConsumerCold in
// bench): the mark is half the inbox, not less, so that a drain takes
// many (BenchmarkPaced, rate=200k), and the period is long enough that a
// slow stream fills most of the mark too (20 k spans/s: 4000 spans a
// drain; BenchmarkPaced, rate=20k). Spans wait for it in the inbox, not for the buckets: a
// bucket's close drains the inbox first.
const (
	drainPeriod  = 200 * time.Millisecond
	wakeFraction = 2
)

// consumer is the state of the one goroutine that owns the table. Nothing
// else reads or writes it.
type consumer struct {
	in       *inbox.Ring[aggregate.Record]
	released uint64 // spans taken out of in: progress, wherever consumed
	ctr      *counters
	off      *atomic.Bool              // the agent refuses stats: discard reports
	peerTags *atomic.Pointer[[]string] // the agent's list, from the sender
	flushCh  <-chan flushReq
	clearCh  <-chan struct{}
	stopCh   <-chan struct{}
	out      chan<- *report  // to the sender
	abort    <-chan struct{} // Stop gave up waiting
	bufs     bufPool
	header   writer.Header
	// packer cuts a report into payloads of at most Config.MaxPayloadBytes,
	// or datagrams with room for the envelope before each payload.
	packer writer.Packer
	// twins lays out each report's buckets so that groups differing only
	// in Type reach the agent in separate buckets; laid holds the result.
	twins writer.TypeSplitter
	laid  []writer.Bucket
	done  chan struct{}

	table     *aggregate.Table
	batch     []aggregate.Record
	touched   []*aggregate.Entry
	buckets   [2]writer.Bucket
	seq       uint64
	interval  time.Duration
	start     time.Time // start of the current bucket's report
	boundary  time.Time // the current bucket's aligned end
	timer     *time.Timer
	armed     time.Time           // when the timer fires, on the wall clock (tests read it)
	seen      time.Time           // the latest wall reading, against which steppedBack measures
	poll      *time.Timer         // period, while parked with spans below the mark
	period    time.Duration       // drainPeriod; tests shorten it to reach quiet parks often
	quiet     bool                // the last drainPeriod brought no span
	wakeups   atomic.Uint64       // times the consumer left a park (BenchmarkIdle)
	quietPark atomic.Bool         // parked until the first push, no timer (TestQuietParkWakeRace waits for it)
	peerKeys  *[]string           // the list last given to the table
	batchPtrs []*aggregate.Record // the inbox slots of the batch being aggregated
	stopping  bool                // Stop's reports: wait for the sender
	clearing  bool                // in clear: a bucket a boundary closes is discarded, not reported
	final     bool                // Stop's last report: the relay's final flag
	finalSent bool                // the final report went to the sender

	// halt is set with abort, for AddBatch to look at between spans.
	halt atomic.Bool

	// Buckets by span end: table is the current bucket's, from floor to
	// boundary; prev the previous bucket's while it is open, until
	// graceEnd, and the spare table otherwise (see shift).
	prev      *aggregate.Table
	prevOpen  bool
	prevStart time.Time // start of the previous bucket's report
	prevEnd   time.Time // its aligned end: the current bucket's floor
	prevFloor int64     // its aligned start, unix ns
	prevCeil  int64     // its end, unix ns: after a pause, not the current bucket's start
	late      uint64    // late spans added since the last counted
	below     uint64    // the current bucket's floor - 1, unix ns (see add)
	graceEnd  time.Time
	grace     time.Duration
	clock     func() time.Time
	touched1  []*aggregate.Entry  // touched, for a report's second bucket
	tabs      [2]*aggregate.Table // the tables of the buckets being reported
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
		prev:      aggregate.NewTable(cfg.MaxAggregates),
		batch:     make([]aggregate.Record, drainBatch),
		batchPtrs: make([]*aggregate.Record, drainBatch),
		interval:  cfg.BucketInterval,
		period:    drainPeriod,
	}
	c.grace, c.clock = closeGrace(c.interval), now
	c.packer = writer.Packer{Limit: to.maxPayload(cfg), Reserve: to.reserve(), Alloc: bufs.get, Sequence: c.nextSeq, Halt: c.halt.Load}
	c.twins.Halt = c.halt.Load
	for _, t := range []*aggregate.Table{c.table, c.prev} {
		t.SetLimits(cfg.CardinalityLimits)
		t.SetHalt(&c.halt)
		if len(cfg.PeerTagKeys) > 0 {
			t.SetPeerTagKeys(cfg.PeerTagKeys)
		}
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
	c.begin(c.wall())
	defer c.timer.Stop()
	c.poll = time.NewTimer(c.period)
	defer c.poll.Stop()
	mark := max(1, c.in.Cap()/wakeFraction)
	idle := 0
	// Behind a claimed slot: since when (the first ParkUntil refusal with
	// c.released at stuckAt), and the pause between tries.
	var stuck time.Time
	var stuckAt uint64
	var backoff time.Duration
	for {
		if n := c.consume(); n > 0 {
			idle, stuck, backoff = 0, time.Time{}, 0
			c.quiet = false
			// A steady stream never lets the inbox empty: look at the
			// signals between batches without waiting.
			if c.await(noWait, nil) {
				c.finish()
				return
			}
			continue
		}
		if c.halt.Load() {
			// Stop gave up while a batch was under way: the spans left stay
			// unread, and parking cannot work while they fill the inbox past
			// the mark (ParkUntil refuses), so finish now; a Clear made
			// before Stop first (TestClearBeforeHaltedStop).
			c.clearPending()
			c.finish()
			return
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
		// Quiet only with nothing queued: behind a slot a panicked Publish
		// left claimed, a quiet park would wake on each push and never look
		// at the slot between them (TestQuietParkBehindAbandonedSlot).
		if c.quiet && c.in.Len() == 0 {
			wake, poll = 1, nil
		}
		if !c.in.ParkUntil(wake) {
			// The mark was reached (or the ring closed) while parking, or
			// the head slot is claimed and unwritten with the mark's worth
			// published behind it (a Publish that panicked leaves it so):
			// the signals are looked at between tries, so ticks, Flush
			// and Stop are served (TestTickPastAnAbandonedSlot/behind=7).
			// Refused for stuckSpin with nothing consumed, it is the
			// slot: a producer descheduled mid-copy (retried at once, the
			// yields let it run) or one that panicked, for which tries
			// back off to one per slotWait rather than spin a core
			// (TestAbandonedSlotDoesNotSpin).
			var wait <-chan struct{} = noWait
			var poll <-chan time.Time
			parked := false
			if stuck.IsZero() || c.released != stuckAt {
				// Spans were consumed since (a Flush, tick or Clear
				// drains too): stuck anew, not still
				// (TestBackoffEndsWithTheSlot).
				stuck, stuckAt, backoff = time.Now(), c.released, 0
			} else if time.Since(stuck) > stuckSpin {
				backoff = min(max(2*backoff, time.Millisecond), slotWait)
				c.poll.Reset(backoff)
				poll = c.poll.C
				c.wakeups.Add(1)
				// The slot's commit ends the wait, not the next try
				// (TestStalledSlotReadOnItsCommit).
				if parked = c.in.ParkHead(); parked {
					wait = c.in.Wake()
				}
			}
			stopped := c.await(wait, poll)
			if parked {
				c.in.Unpark()
			}
			if stopped {
				c.finish()
				return
			}
			continue
		}
		if poll != nil {
			c.poll.Reset(c.period)
		} else {
			c.quietPark.Store(true)
		}
		stopped := c.await(c.in.Wake(), poll)
		c.quietPark.Store(false)
		c.in.Unpark()
		if stopped {
			c.finish()
			return
		}
		c.wakeups.Add(1)
	}
}

// noWait is closed, so always ready: as await's wake it makes await look
// at the signals without waiting. A signal that is ready too may then wait
// for the next batch (select picks at random), as one a moment later would.
var noWait = func() chan struct{} {
	ch := make(chan struct{})
	close(ch)
	return ch
}()

// await waits for wake, poll (nil: never) or one of the consumer's
// signals, handles it, and reports whether it was Stop's, which the caller
// finishes on.
func (c *consumer) await(wake <-chan struct{}, poll <-chan time.Time) (stop bool) {
	select {
	case <-wake:
	case <-poll:
		c.quiet = c.in.Len() == 0
	case <-c.timer.C:
		c.fired()
	case req := <-c.flushCh:
		c.clearPending()
		c.flushUntil(req.done, req.until)
	case <-c.clearCh:
		c.clear()
	case <-c.stopCh:
		c.clearPending()
		return true
	}
	return false
}

// fired handles the timer's firing.
func (c *consumer) fired() {
	// A clock that did not step has reached armed, though no span made the
	// consumer read it since the last tick (TestIdleStepBackSeen).
	if c.armed.After(c.seen) {
		c.seen = c.armed
	}
	// A Clear ready at once goes first: the select picks either, and the
	// bucket the tick closes holds spans published before it
	// (TestClearBeforeBucketClose).
	c.clearPending()
	c.tick()
}

// clearPending carries out a Clear made before the Flush or Stop that
// select picked, reporting whether there was one: when both are ready it
// picks either, and a Clear that returned before Stop was called must not
// be skipped (TestClearBeforeStopIsCarriedOut).
func (c *consumer) clearPending() bool {
	select {
	case <-c.clearCh:
		c.clear()
		return true
	default:
		return false
	}
}

// consume aggregates up to one batch of spans in place in the inbox. Once
// Stop has given up waiting (halt), AddBatch stops before its next costly
// span and the rest of the batch stays in the inbox.
func (c *consumer) consume() int {
	c.syncPeerTags()
	// In place: the batch is the inbox's own slots.
	in := c.in
	n := in.Ready(drainBatch)
	if n == 0 {
		return 0
	}
	// Every span in the batch was published before this reading, so a
	// boundary it has reached is one they may have ended after: crossed
	// first, they go to the bucket of their end, not the one ending, even
	// when the timer has not been handled yet. One clock read per batch.
	t := c.wall()
	stepped := c.steppedBack(t)
	if !c.clearing && (stepped || c.prevOpen && !t.Before(c.boundary)) && c.clearPending() {
		// A clock step back (realign) or, after a pause, the crossing
		// would report open buckets, though a Clear made meanwhile must
		// discard them: the Clear took this batch too
		// (TestPausedConsumeTakesPendingClear, TestSteppedBackConsumeTakesPendingClear).
		return 0
	}
	if stepped {
		c.realign(t)
	}
	c.crossBoundaries(t)
	batch := c.batchPtrs[:n]
	for i := range batch {
		batch[i] = in.At(i)
	}
	n = c.add(batch)
	in.Release(n)
	c.released += uint64(n)
	if n > 0 {
		c.counted(n)
	}
	return n
}

// add aggregates a batch into the buckets of the spans' ends and returns
// how many spans from its start it added (fewer on a halt, as AddBatch, or
// at a clock step back: see route).
func (c *consumer) add(batch []*aggregate.Record) int {
	for _, s := range batch {
		// End 0 ("now") wraps to the largest value: one comparison tells
		// a span of an earlier bucket.
		if uint64(s.End-1) < c.below {
			return c.route(batch)
		}
	}
	return c.table.AddBatch(batch)
}

// Where route sends a span.
const (
	toCurrent = iota
	toPrevious
	toLate // ended before every open bucket: into the oldest, counted
)

// syncPeerTags gives the table the agent's peer-tag list if it arrived or
// changed since the last batch.
func (c *consumer) syncPeerTags() {
	if k := c.peerTags.Load(); k != c.peerKeys {
		c.peerKeys = k
		c.table.SetPeerTagKeys(*k)
		c.prev.SetPeerTagKeys(*k)
	}
}

// counted publishes the table's counters after a batch of n spans.
func (c *consumer) counted(n int) {
	ac, t, p := c.ctr, c.table, c.prev
	ac.counted.Add(uint64(n))
	// The parts after the whole (see Health); rarely any late ones.
	if c.late != 0 {
		ac.late.Add(c.late)
		c.late = 0
	}
	ac.overflowed.Store(t.Overflowed() + p.Overflowed())
	ac.recycled.Store(t.Recycled() + p.Recycled())
	ac.entries.Store(uint64(t.Len() + p.Len()))
	ac.collapsedSpans.Store(t.CollapsedSpans() + p.CollapsedSpans())
	for f := range aggregate.NumFields {
		ac.collapsed[f].Store(t.Collapsed(f) + p.Collapsed(f))
	}
}

// drainQueued aggregates the spans queued when it is called, so a Flush
// reports every span published before it was called; no more, so that
// producers as fast as the consumer cannot hold it there, away from its
// timer and from Stop (TestFlushUnderSteadyLoadReturns). A slot claimed by
// a Publish still writing it is waited for: the spans queued behind it
// were published before the call (TestFlushWaitsForAClaimedSlot). Not past
// slotWait, for a tick or a Clear: a slot whose Publish panicked is never
// written, and the tick must still close and report the buckets counted
// before it (TestTickPastAnAbandonedSlot).
func (c *consumer) drainQueued() { c.drainUntil(nil) }

// drainUntil is drainQueued waiting for a claimed slot until until is
// closed (a Flush's ctx), or for slotWait if until is nil. A Flush waits
// as the run loop does: at once for stuckSpin, then backing off to a try
// per slotWait, closing the buckets meanwhile, and no longer once Stop is
// called (TestStopDuringFlushBehindAbandonedSlot). It returns how many of
// the spans queued at the call it left unread (spans queued since do not
// count: TestFlushNotCutBySpansAfterIt).
func (c *consumer) drainUntil(until <-chan struct{}) (unread int) {
	var waiting time.Time
	var backoff time.Duration
	// Read once c.released reaches target, whoever consumed them: a tick
	// handled while a Flush waits drains too (TestFlushReturnsAfterTickDrained).
	target := c.released + uint64(c.in.Len())
	left := func() int {
		if c.released >= target {
			return 0
		}
		return int(target - c.released)
	}
	defer func() { unread = left() }()
	for left() > 0 && !c.halt.Load() {
		if c.consume() > 0 {
			waiting, backoff = time.Time{}, 0
			continue
		}
		if waiting.IsZero() {
			waiting = time.Now()
		}
		waited := time.Since(waiting)
		if until == nil && waited > slotWait {
			return
		}
		// For stuckSpin: look at the signals, then yield. Then sleep,
		// backing off, until the slot's commit wakes the consumer: a tick
		// behind an abandoned slot must not spin a core for slotWait
		// (TestTicksBehindAbandonedSlotDoNotSpin).
		var pause <-chan time.Time = yieldNow
		var head <-chan struct{}
		if waited > stuckSpin {
			backoff = min(max(2*backoff, time.Millisecond), slotWait)
			if until == nil {
				backoff = min(backoff, slotWait-waited+time.Millisecond) // not long past slotWait
			}
			c.poll.Reset(backoff)
			pause = c.poll.C
			switch {
			case c.in.ParkHead():
				head = c.in.Wake()
			case c.in.Ready(1) > 0:
				continue // written meanwhile
			}
			// Refused on a closed ring (a Clear inside finish): the pause
			// alone, not a spin until slotWait
			// (TestClearDuringStopBehindAbandonedSlotDoesNotSpin).
		}
		if !c.pauseDrain(until, pause, head) {
			return
		}
	}
	return
}

// pauseDrain is drainUntil's wait for a claimed slot: until pause, the
// head's commit (head, after ParkHead) or, for a Flush (until not nil),
// its end, Stop or a tick. It reports whether to try again.
func (c *consumer) pauseDrain(until <-chan struct{}, pause <-chan time.Time, head <-chan struct{}) bool {
	if head != nil {
		defer c.in.Unpark()
	}
	if until == nil {
		// A tick or a Clear: the signals wait (slotWait at most).
		select {
		case <-head:
		case <-pause:
		}
	} else {
		select {
		case <-until:
			return false
		case <-c.stopCh: // still ready for the run loop, which finishes
			return false
		case <-c.timer.C:
			// A Flush without a deadline behind a slot no Publish
			// will write must not stop the buckets closing
			// (TestFlushBehindAbandonedSlotKeepsTicking).
			c.fired()
		case <-head:
		case <-pause:
		}
	}
	if pause == yieldNow {
		runtime.Gosched() // the write is only moments away
	}
	return true
}

// yieldNow is closed, so always ready: drainUntil's pause while it retries
// at once.
var yieldNow = func() chan time.Time {
	ch := make(chan time.Time)
	close(ch)
	return ch
}()

// slotWait is how long a tick or a Clear waits for a claimed slot to be
// written: a producer descheduled in the middle of its copy is almost
// always back long before; one that panicked never is. What it leaves
// waits for the next drain (counted late if its bucket closed meanwhile).
const slotWait = 100 * time.Millisecond

// stuckSpin is how long the consumer retries at once behind a claimed
// slot it cannot park past before it backs off: a producer preempted in
// its copy is usually back within it, and under overload a sleep would
// let the inbox fill meanwhile.
const stuckSpin = time.Millisecond

// stopSlotWait is how long Stop waits for a slot claimed before it to be
// written: longer than slotWait, since a span waited for there is not
// reported later but dropped.
const stopSlotWait = time.Second

// flushReq is a Flush: done takes its answer; until is its ctx's Done
// (forever for a ctx that never ends), how long it waits for a claimed slot.
type flushReq struct {
	done  chan error
	until <-chan struct{}
}

// forever is never closed: the until of a Flush whose ctx never ends.
var forever = make(chan struct{})

// flush is flushUntil waiting slotWait for a claimed slot (tests drive it).
func (c *consumer) flush(done chan error) { c.flushUntil(done, nil) }

// flushUntil reports every open bucket with what is queued now, answering
// done once the report is sent.
func (c *consumer) flushUntil(done chan error, until <-chan struct{}) {
	// Realigned and past any boundary reached before the spans are read:
	// those stamped on the new time must not go to an earlier bucket.
	c.crossBoundaries(c.now())
	unread := c.drainUntil(until)
	// Stop (its deadline, or its call while the Flush waited for a slot)
	// ended the wait with spans published before the Flush unread: it
	// did not report everything, whatever it reports.
	var cut error
	if unread > 0 {
		select {
		case <-c.stopCh:
			cut = ErrStopped
		default:
		}
		if c.halt.Load() {
			cut = errStopDeadline
		}
	}
	t := c.now()
	c.closeDue(t)
	if cut != nil {
		c.reportAll(t, nil)
		c.queue(&report{done: done, answer: cut})
	} else {
		c.reportAll(t, done)
	}
	c.arm(t)
}

func (c *consumer) clear() {
	// What waits in the inbox was published before the signal too: a
	// parked consumer holds up to drainPeriod of spans there. A boundary
	// its drain crosses after a pause closes a bucket of spans published
	// before the signal as well (TestClearAfterPauseDiscardsOpenBucket).
	c.clearing = true
	c.drainQueued()
	c.clearing = false
	// Kept as report keeps them, so a Clear reuses what it grew.
	c.touched = c.table.Touched(c.touched[:0])
	c.touched1 = c.prev.Touched(c.touched1[:0])
	c.discard(c.touched)
	c.discard(c.touched1)
	c.table.Clear()
	c.prev.Clear()
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
	// Every report from here waits for the sender, or is dropped once
	// Stop gives up; only the last is final.
	c.stopping = true
	c.in.Close()
	// Boundaries the timer has not handled yet are crossed before the
	// spans are read, as tick does, so that a span lands in the bucket of
	// its end and no bucket spans a boundary (or outlasts what a relay
	// takes).
	t := c.now()
	c.crossBoundaries(t)
	// A slot claimed before Close and never written (a Publish that
	// panicked) is waited for stopSlotWait at most, even by a Stop
	// without a deadline: then it and what follows it are counted
	// undrained (TestStopWithoutDeadlinePastAnAbandonedSlot).
	giveUp := time.AfterFunc(stopSlotWait, c.in.GiveUp)
	defer giveUp.Stop()
	for !c.halt.Load() {
		if c.consume() > 0 {
			continue
		}
		// Nothing ready: the inbox is empty, or a push claimed before Close
		// is still writing its slot; DrainClosed waits for it.
		if c.in.DrainClosed(c.batch[:1]) == 0 {
			break
		}
		c.batchPtrs[0] = &c.batch[0]
		if c.add(c.batchPtrs[:1]) == 1 {
			c.counted(1)
		} else {
			c.ctr.stopUndrained.Add(1)
		}
		c.batch[0] = aggregate.Record{} // do not pin the span's strings
	}
	c.ctr.stopUndrained.Add(uint64(c.in.DiscardClosed()))
	t = c.now()
	c.closeDue(t)
	c.final = true
	c.reportAll(t, nil)
	if c.packer.Reserve > 0 && !c.finalSent && !c.halt.Load() {
		c.sendFinal() // to a relay: the final flag goes out all the same
	}
	close(c.out)
}
