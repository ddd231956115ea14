// This file holds the consumer's two open buckets: which one a span goes
// to by its end, the boundary and its grace, and the reports they become.

package stats

import (
	"time"

	"github.com/spanstats/spanstats/aggregate"
	"github.com/spanstats/spanstats/writer"
)

// begin opens the bucket of t and arms the timer for its end.
func (c *consumer) begin(t time.Time) {
	c.start = writer.AlignStart(t, c.interval)
	c.setFloor(c.start)
	c.seen = t
	c.timer = time.NewTimer(c.due().Sub(t))
	c.armed = c.due()
}

// arm sets the timer for the next due time, t being now.
func (c *consumer) arm(t time.Time) {
	c.armed = c.due()
	c.timer.Reset(c.armed.Sub(t))
}

// setFloor makes the current bucket the aligned interval from floor. A
// floor at or before the Unix epoch (a device booted with no real-time
// clock) takes every span as current: below would wrap otherwise, and
// every span count as late (TestClockAtTheEpoch).
func (c *consumer) setFloor(floor time.Time) {
	c.boundary = floor.Add(c.interval)
	c.below = uint64(max(floor.UnixNano(), 1) - 1)
}

// due is when the timer must next fire: the previous bucket's close while
// it is open, else the current bucket's end.
func (c *consumer) due() time.Time {
	if c.prevOpen {
		return c.graceEnd
	}
	return c.boundary
}

// dest is the bucket of a span by its end. A span that ended between the
// previous bucket's end and the current one's start (the process was
// paused past a boundary, and the current bucket realigned on now) has no
// open bucket: it is late.
func (c *consumer) dest(s *aggregate.Record) int {
	switch {
	case uint64(s.End-1) >= c.below:
		return toCurrent
	case c.prevOpen && s.End >= c.prevFloor && s.End < c.prevCeil:
		return toPrevious
	}
	return toLate
}

// route is add for a batch that holds spans of earlier buckets: it adds
// them in runs of one bucket.
func (c *consumer) route(batch []*aggregate.Record) int {
	done := 0
	checked := false // the clock, once per batch that holds a late span
	for done < len(batch) {
		d := c.dest(batch[done])
		if d == toLate && !checked {
			// Spans stamped on a clock stepped back are late by the
			// buckets of before: realigned, they are current.
			checked = true
			// One read decides: a second one, stepped back after the
			// first, would realign with the spans added so far.
			if t := c.wall(); c.steppedBack(t) {
				if done > 0 || !c.clearing && !c.stopping && len(c.clearCh) > 0 {
					// realign would report the spans added so far before
					// consume counts them, or what a pending Clear must
					// discard: leave the rest to the next batch, whose
					// first clock read takes the Clear, then realigns,
					// before it adds any. Not at Stop: finish's one-span
					// reads would count the span undrained
					// (TestStopStepBackWithPendingClear).
					return done
				}
				c.realign(t)
			}
			d = c.dest(batch[done])
		}
		end := done + 1
		for end < len(batch) && c.dest(batch[end]) == d {
			end++
		}
		t := c.table
		if d == toPrevious || d == toLate && c.prevOpen {
			t = c.prev
		}
		k := t.AddBatch(batch[done:end])
		if d == toLate {
			c.late += uint64(k) // published by counted, after Counted
		}
		if done += k; done < end {
			break // halted
		}
	}
	return done
}

// tick runs when the timer fires. At a boundary it opens the next bucket
// first, so the spans queued across the boundary find both; then it
// aggregates what is queued (up to the spans queued now, so a steady
// stream cannot hold it) before it closes the previous bucket if its grace
// is over, and arms the timer for the next close.
func (c *consumer) tick() {
	t := c.now()
	c.crossBoundaries(t)
	c.drainQueued()
	// Read again: a step back seen while draining realigned the buckets
	// on a later clock than t, which closeDue must not undo.
	t = c.now()
	c.closeDue(t)
	c.arm(t)
}

// steppedBack reports whether the wall clock has gone back by more than an
// interval behind the latest reading the consumer acted on, or behind the
// current bucket's start by more than maxStartAhead: a step, as an NTP
// correction or a restored VM makes, not a slew. The buckets follow the
// wall clock, so without realign the timer would wait until the clock is
// back where it was, and no report would go out. A smaller step is left
// to the buckets as they are: it delays the next close by at most the step,
// and the spans stamped before the current bucket count as late
// (TestSmallStepBackKeepsBuckets). Not a step, t becomes the latest reading.
func (c *consumer) steppedBack(t time.Time) bool {
	if c.seen.Sub(t) > c.interval || c.start.Sub(t) > maxStartAhead {
		return true
	}
	if t.After(c.seen) {
		c.seen = t
	}
	return false
}

// maxStartAhead is how far behind the current bucket's start the clock may
// step back and the bucket still go out as it is: half the minute a relay
// lets a bucket start in its future (relay.MaxClockSkew), the other half
// left to hosts whose clocks differ. Within an interval of at most this,
// the interval test above is the stricter (TestFlushAfterStepBackOnLongInterval).
const maxStartAhead = 30 * time.Second

// wall reads the wall clock alone: buckets are stamped on it, and Sub or
// After between two readings with monotonic parts would measure those
// instead, a bucket's Duration then disagreeing with its Start's clock.
func (c *consumer) wall() time.Time { return c.clock().Round(0) }

// now reads the clock, realigning first if it stepped back.
func (c *consumer) now() time.Time {
	t := c.wall()
	if c.steppedBack(t) {
		c.realign(t)
	}
	return t
}

// realign reports the open buckets as they stand and starts the buckets
// again on t. They go out stamped as if they ended at t, each with its
// nominal length: the clock that stamped them ran ahead (a correction
// steps toward the true time), and a relay on the new clock refuses a
// bucket that starts in its future.
func (c *consumer) realign(t time.Time) {
	n := 0
	curLen := c.boundary.Sub(c.start)
	if c.prevOpen {
		c.tabs[n], c.buckets[n] = c.prev, bucketOf(t.Add(-curLen-c.prevEnd.Sub(c.prevStart)), t.Add(-curLen))
		c.prevOpen = false
		n++
	}
	c.tabs[n], c.buckets[n] = c.table, bucketOf(t.Add(-curLen), t)
	if !c.clearing { // a Clear discards them (TestClearDuringClockStepDiscards)
		c.report(n+1, nil)
	}
	c.start = writer.AlignStart(t, c.interval)
	c.setFloor(c.start)
	c.seen = t
	c.ctr.clockStepsBack.Add(1)
	c.arm(t) // seen by a drain, the step must not wait for the old schedule
}

// closeDue moves on to the next bucket if the current one has ended, and
// reports the previous bucket if its grace has passed.
// A Flush may run after a due time but before the timer is handled; it
// calls this first so that no bucket ever spans a boundary.
func (c *consumer) closeDue(t time.Time) {
	c.crossBoundaries(t)
	if c.prevOpen && !t.Before(c.graceEnd) {
		c.closePrev()
	}
}

// crossBoundaries shifts past every boundary t has reached.
func (c *consumer) crossBoundaries(t time.Time) {
	for !t.Before(c.boundary) {
		c.shift(t)
	}
}

// shift ends the current bucket at its boundary: it becomes the previous
// bucket, open for the grace, and the spare table takes the new current
// bucket. The tables swap rather than copy: each keeps its entries for the
// interval after next.
func (c *consumer) shift(t time.Time) {
	if c.prevOpen { // a pause made the grace and the boundary both due
		c.closePrev()
	}
	end := c.boundary
	c.table, c.prev = c.prev, c.table
	c.prevOpen, c.prevStart, c.prevEnd = true, c.start, end
	c.prevFloor, c.prevCeil = end.Add(-c.interval).UnixNano(), end.UnixNano()
	c.graceEnd = end.Add(c.grace)
	next := end
	if t.Sub(end) >= c.interval { // the process was paused: realign on now
		next = writer.AlignStart(t, c.interval)
	}
	c.start = next
	c.setFloor(next)
}

// closePrev reports the previous bucket; during a Clear it is left to be
// discarded with the rest.
func (c *consumer) closePrev() {
	if c.clearing {
		c.prevOpen = false
		return
	}
	c.tabs[0] = c.prev
	c.buckets[0] = bucketOf(c.prevStart, c.prevEnd)
	c.prevOpen = false
	c.report(1, nil)
}

// reportAll reports every open bucket, the current one up to t (a
// nanosecond from its start when t is not after it), and starts the
// current one's next report where this one ended, unless that is the
// boundary.
func (c *consumer) reportAll(t time.Time, done chan error) {
	n := 0
	if c.prevOpen {
		c.tabs[n], c.buckets[n] = c.prev, bucketOf(c.prevStart, c.prevEnd)
		c.prevOpen = false
		n++
	}
	end := t
	if !t.After(c.start) {
		// The clock went back (by less than steppedBack sees) or did not
		// move since the last report: a bucket of length 0 holding spans
		// would be refused, and one to its nominal end would claim time to
		// come and overlap the next report; it runs a nanosecond, in the
		// same window, and the next starts after it
		// (TestFlushAfterSmallStepBack, TestFlushesAtOneInstantDoNotOverlap).
		end = c.start.Add(time.Nanosecond)
	}
	c.tabs[n], c.buckets[n] = c.table, bucketOf(c.start, end)
	n++
	// The start stays before the boundary (a report from it has a length,
	// in this window): should such reports bring it there, the next
	// overlaps this one by a nanosecond.
	if end.Before(c.boundary) {
		c.start = end
	}
	c.report(n, done)
}

// bucketOf is the bucket [start, end), of length 0 if end is not after
// start.
func bucketOf(start, end time.Time) writer.Bucket {
	b := writer.Bucket{Start: uint64(start.UnixNano())}
	if end.After(start) {
		b.Duration = uint64(end.Sub(start))
	}
	return b
}
