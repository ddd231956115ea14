// This file tests the consumer's buckets on a clock the test moves: which
// bucket a span's end picks, late spans, Flush and Stop at a boundary, and
// clock steps.

package stats

import (
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/spanstats/spanstats/stats/statstest"
	"github.com/spanstats/spanstats/writer"
)

// driven is an aggregator whose consumer the test runs by hand, on a clock
// it sets: no goroutine, no timer firing, no sleep.
type driven struct {
	t   *testing.T
	a   *Aggregator
	c   *consumer
	now time.Time
}

func newDriven(t *testing.T, interval time.Duration, at time.Time) *driven {
	t.Helper()
	a, err := New(Config{AgentURL: "http://127.0.0.1:1", BucketInterval: interval})
	if err != nil {
		t.Fatal(err)
	}
	d := &driven{t: t, a: a, c: a.cons, now: at}
	d.c.clock = func() time.Time { return d.now }
	d.c.begin(at)
	t.Cleanup(func() { d.c.timer.Stop() })
	return d
}

// publish queues a server span of resource res ending at end (the zero
// time: Start 0).
func (d *driven) publish(res string, end time.Time) {
	d.t.Helper()
	s := Span{Service: "s", Name: "op", Resource: res, SpanKind: "server", Duration: int64(time.Millisecond)}
	if !end.IsZero() {
		s.Start = end.UnixNano() - s.Duration
	}
	if !d.a.Publish(&s) {
		d.t.Fatalf("span %q not queued", res)
	}
}

// at moves the clock to t and runs the consumer's timer work, as the
// timer firing then would (it drains the inbox first).
func (d *driven) at(t time.Time) {
	d.now = t
	d.c.tick()
}

// bucket is a decoded bucket: its start, length and hits per resource.
type bucket struct {
	start, length time.Duration // since the test's epoch
	hits          map[string]uint64
}

func (b bucket) String() string { return fmt.Sprintf("[%s +%s) %v", b.start, b.length, b.hits) }

// reports decodes every report queued for the sender since the last call.
func (d *driven) reports(epoch time.Time) []bucket {
	d.t.Helper()
	var out []bucket
	for {
		select {
		case r, ok := <-d.a.snd.in:
			if !ok { // closed by Stop
				return out
			}
			for _, p := range r.parts {
				pl, err := writer.DecodePayload(p.body)
				if err != nil {
					d.t.Fatal(err)
				}
				for _, b := range pl.Buckets {
					got := bucket{start: time.Duration(int64(b.Start) - epoch.UnixNano()), length: time.Duration(b.Duration), hits: map[string]uint64{}}
					for _, g := range b.Groups {
						got.hits[g.Resource] += g.Hits
					}
					out = append(out, got)
				}
			}
		default:
			return out
		}
	}
}

// epoch is an aligned instant the bucket tests count from.
var epoch = time.Unix(1_800_000_000, 0)

// TestSpanEndPicksBucket: a span that ended 1 s before a boundary but
// reaches the consumer 200 ms after it is counted in the bucket before the
// boundary, which is reported once its grace (a tenth of the interval) has
// passed; a span ending after the boundary, and one with Start 0 seen
// then, are in the next bucket. Nothing is late.
func TestSpanEndPicksBucket(t *testing.T) {
	const iv = 10 * time.Second
	d := newDriven(t, iv, epoch.Add(3*time.Second))
	b := epoch.Add(iv) // the boundary
	d.at(b.Add(200 * time.Millisecond))
	if got := d.reports(epoch); len(got) != 0 {
		t.Fatalf("reported %v before the grace ended", got)
	}
	d.publish("before", b.Add(-time.Second))
	d.publish("after", b.Add(100*time.Millisecond))
	d.publish("now", time.Time{})
	d.at(b.Add(iv / graceDivisor))
	got := d.reports(epoch)
	if len(got) != 1 || got[0].start != 0 || got[0].length != iv || len(got[0].hits) != 1 || got[0].hits["before"] != 1 {
		t.Fatalf("at the grace's end: %v; want [0s +10s) map[before:1]", got)
	}
	d.at(b.Add(iv + iv/graceDivisor))
	got = d.reports(epoch)
	if len(got) != 1 || got[0].start != iv || got[0].length != iv || got[0].hits["after"] != 1 || got[0].hits["now"] != 1 || len(got[0].hits) != 2 {
		t.Fatalf("next bucket: %v; want [10s +10s) map[after:1 now:1]", got)
	}
	if h := d.a.Health(); h.LateSpans != 0 || h.Counted != 3 {
		t.Fatalf("late %d counted %d, want 0 and 3", h.LateSpans, h.Counted)
	}
}

// TestClockAtTheEpoch: on a clock reading 5 s after the Unix epoch (a
// device without a real-time clock), the current bucket's floor is 0, and a
// span ending in it is counted there, not as late.
func TestClockAtTheEpoch(t *testing.T) {
	const iv = 10 * time.Second
	d := newDriven(t, iv, time.Unix(5, 0))
	d.publish("boot", time.Unix(6, 0))
	d.now = time.Unix(7, 0)
	d.c.consume() // read while [0, 10 s) is the current bucket
	d.at(time.Unix(0, 0).Add(iv + iv/graceDivisor))
	got := d.reports(time.Unix(0, 0))
	if len(got) != 1 || got[0].start != 0 || got[0].length != iv || got[0].hits["boot"] != 1 {
		t.Fatalf("reports %v; want [0s +10s) map[boot:1]", got)
	}
	if h := d.a.Health(); h.LateSpans != 0 || h.Counted != 1 {
		t.Fatalf("late %d counted %d, want 0 and 1", h.LateSpans, h.Counted)
	}
}

// TestLateSpanInOldestOpenBucket: a span that ended two intervals ago is
// counted late in the oldest open bucket: the previous one during its
// grace, the current one after.
func TestLateSpanInOldestOpenBucket(t *testing.T) {
	const iv = 10 * time.Second
	d := newDriven(t, iv, epoch.Add(3*time.Second))
	b := epoch.Add(iv)
	d.at(b.Add(200 * time.Millisecond)) // [0, 10 s) is open for its grace
	d.publish("old", b.Add(-2*iv))
	d.at(b.Add(iv / graceDivisor))
	got := d.reports(epoch)
	if len(got) != 1 || got[0].start != 0 || got[0].hits["old"] != 1 {
		t.Fatalf("during the grace: %v; want the late span in [0s +10s)", got)
	}
	d.publish("older", b.Add(-2*iv)) // now only [10 s, 20 s) is open
	d.at(b.Add(iv + iv/graceDivisor))
	got = d.reports(epoch)
	if len(got) != 1 || got[0].start != iv || got[0].hits["older"] != 1 {
		t.Fatalf("after the grace: %v; want the late span in [10s +10s)", got)
	}
	if h := d.a.Health(); h.LateSpans != 2 || h.Counted != 2 {
		t.Fatalf("late %d counted %d, want 2 and 2", h.LateSpans, h.Counted)
	}
}

// TestSpanEndedDuringPauseIsLate: after a pause past several boundaries
// the current bucket realigns on now, and a span that ended in the gap
// (here at 25 s, read at 35 s) has no open bucket: it is counted late in
// the oldest open one, [0 s, 10 s), not as if it had ended in it; a span
// that did end in it is not late.
func TestSpanEndedDuringPauseIsLate(t *testing.T) {
	const iv = 10 * time.Second
	d := newDriven(t, iv, epoch.Add(3*time.Second))
	d.publish("early", epoch.Add(4*time.Second))
	d.publish("gap", epoch.Add(25*time.Second))
	d.at(epoch.Add(35 * time.Second)) // paused past three boundaries
	got := d.reports(epoch)
	if h := d.a.Health(); h.Counted != 2 || h.LateSpans != 1 {
		t.Fatalf("counted %d late %d, want 2 and 1 (reports %v)", h.Counted, h.LateSpans, got)
	}
	if len(got) != 1 || got[0].start != 0 || got[0].hits["early"] != 1 || got[0].hits["gap"] != 1 {
		t.Fatalf("%v; want [0s +10s) with early and gap", got)
	}
}

// TestSpanEndingAtPreviousEndIsLate: buckets hold the spans that end in
// [start, end): after a pause, a span ending exactly at the previous
// bucket's end belongs to the gap before the realigned current bucket, so
// it is late (counted in the previous bucket, as every late span is), while
// one ending a nanosecond before is not.
func TestSpanEndingAtPreviousEndIsLate(t *testing.T) {
	const iv = 10 * time.Second
	d := newDriven(t, iv, epoch.Add(3*time.Second))
	d.publish("inside", epoch.Add(iv-1))
	d.publish("edge", epoch.Add(iv))
	d.at(epoch.Add(35 * time.Second)) // paused past three boundaries
	got := d.reports(epoch)
	if h := d.a.Health(); h.Counted != 2 || h.LateSpans != 1 {
		t.Fatalf("counted %d late %d, want 2 and 1 (reports %v)", h.Counted, h.LateSpans, got)
	}
	if len(got) != 1 || got[0].start != 0 || got[0].hits["inside"] != 1 || got[0].hits["edge"] != 1 {
		t.Fatalf("%v; want [0s +10s) with inside and edge", got)
	}
}

// TestStartZeroIsNow: a span with Start 0 is counted in the bucket of the
// consumer's clock when it reads it (after a pause that realigned the
// buckets, and after a boundary it was published before); a span ending an
// hour ahead is counted in the current bucket, not late.
func TestStartZeroIsNow(t *testing.T) {
	const iv = 10 * time.Second
	d := newDriven(t, iv, epoch.Add(3*time.Second))
	d.at(epoch.Add(25 * time.Second)) // paused past two boundaries: realigned on [20 s, 30 s)
	d.reports(epoch)
	d.publish("now", time.Time{})
	d.publish("future", epoch.Add(time.Hour))
	d.c.consume() // read at 25 s
	d.publish("later", time.Time{})
	d.at(epoch.Add(30*time.Second + iv/graceDivisor)) // read at 31 s
	if h := d.a.Health(); h.Counted != 3 {
		t.Fatalf("counted %d, want 3", h.Counted)
	}
	got := d.reports(epoch)
	if len(got) != 1 || got[0].start != 20*time.Second || got[0].length != iv || got[0].hits["now"] != 1 || got[0].hits["future"] != 1 {
		t.Fatalf("%v; want [20s +10s) map[future:1 now:1]", got)
	}
	d.at(epoch.Add(40*time.Second + iv/graceDivisor))
	if got = d.reports(epoch); len(got) != 1 || got[0].start != 30*time.Second || got[0].hits["later"] != 1 {
		t.Fatalf("%v; want [30s +10s) map[later:1]", got)
	}
	if h := d.a.Health(); h.LateSpans != 0 {
		t.Fatalf("late %d, want 0", h.LateSpans)
	}
}

// TestFlushReportsBothOpenBuckets: a Flush during the grace reports the
// previous bucket and the current one up to the flush, in one report, and
// a span of the previous interval seen after it is late.
func TestFlushReportsBothOpenBuckets(t *testing.T) {
	const iv = 10 * time.Second
	d := newDriven(t, iv, epoch.Add(3*time.Second))
	b := epoch.Add(iv)
	d.at(b.Add(100 * time.Millisecond))
	d.publish("prev", b.Add(-time.Second))
	d.publish("cur", b.Add(50*time.Millisecond))
	d.now = b.Add(300 * time.Millisecond)
	done := make(chan error, 1)
	d.c.flush(done)
	got := d.reports(epoch)
	if len(got) != 2 || got[0].start != 0 || got[0].length != iv || got[0].hits["prev"] != 1 ||
		got[1].start != iv || got[1].length != 300*time.Millisecond || got[1].hits["cur"] != 1 {
		t.Fatalf("flush: %v; want [0s +10s) prev, [10s +300ms) cur", got)
	}
	d.publish("prev2", b.Add(-time.Second))
	d.at(b.Add(iv + iv/graceDivisor))
	got = d.reports(epoch)
	if len(got) != 1 || got[0].start != iv+300*time.Millisecond || got[0].hits["prev2"] != 1 {
		t.Fatalf("after the flush: %v; want the late span in [10.3s ...)", got)
	}
	if h := d.a.Health(); h.LateSpans != 1 {
		t.Fatalf("late %d, want 1", h.LateSpans)
	}
}

// TestBucketBySpanEndOnTheWire: through the real consumer, its timer and
// the fake agent, with 1 s buckets: spans published just after a boundary
// that ended before it (one 0.5 s before, one 2.5 s before: late) arrive in
// the bucket that starts 1 s before the boundary, and a span with Start 0
// published half a second later in the bucket that starts at it.
func TestBucketBySpanEndOnTheWire(t *testing.T) {
	ag := statstest.New()
	defer ag.Close()
	const iv = time.Second
	a := newStarted(t, Config{AgentURL: ag.URL(), BucketInterval: iv, SendJitter: -1})
	span := func(res string, end time.Time) *Span {
		s := &Span{Service: "s", Name: "op", Resource: res, SpanKind: "server", Duration: int64(time.Millisecond)}
		if !end.IsZero() {
			s.Start = end.UnixNano() - s.Duration
		}
		return s
	}
	var b time.Time
	for try := 0; ; try++ {
		// Just after a boundary, well within the grace (iv/10), or retry.
		b = time.Now().Truncate(iv).Add(iv)
		time.Sleep(time.Until(b.Add(10 * time.Millisecond)))
		a.Publish(span("prev", b.Add(-iv/2)))
		a.Publish(span("late", b.Add(-5*iv/2)))
		if time.Since(b) < iv/graceDivisor-20*time.Millisecond {
			break
		}
		if try == 5 {
			t.Fatal("could not publish within the grace in 6 tries")
		}
	}
	time.Sleep(time.Until(b.Add(iv / 2)))
	a.Publish(span("now", time.Time{}))
	stop(t, a)
	buckets := map[uint64]map[string]uint64{}
	for _, r := range statstest.Accepted(ag.Requests()) {
		for _, bk := range r.Payload.Buckets {
			if buckets[bk.Start] == nil {
				buckets[bk.Start] = map[string]uint64{}
			}
			for _, g := range bk.Groups {
				buckets[bk.Start][g.Resource] += g.Hits
			}
		}
	}
	prev, cur := buckets[uint64(b.Add(-iv).UnixNano())], buckets[uint64(b.UnixNano())]
	if prev["prev"] != 1 || prev["late"] != 1 || cur["now"] != 1 {
		t.Fatalf("bucket before the boundary %v, after it %v; want prev and late before, now after (all: %v)", prev, cur, buckets)
	}
	h := a.Health()
	if h.LateSpans != 1 {
		t.Fatalf("LateSpans %d, want 1", h.LateSpans)
	}
	checkConservation(t, h)
}

// TestSpanEndValues: Start 0 is "now" (0); an end that overflows is the far
// future, not the past; an end at or before 1970 is 1 (late), never 0.
func TestSpanEndValues(t *testing.T) {
	for _, c := range []struct{ start, dur, want int64 }{
		{0, 5, 0},
		{100, 5, 105},
		{math.MaxInt64 - 1, 5, math.MaxInt64},
		{-10, 5, 1},
		{-5, 5, 1},
		{math.MinInt64, 1, 1},
	} {
		if got := spanEnd(c.start, c.dur); got != c.want {
			t.Errorf("spanEnd(%d, %d) = %d, want %d", c.start, c.dur, got, c.want)
		}
	}
}

// TestClockStepBack: the wall clock going back an hour (a step, as an NTP
// correction or a restored VM makes) does not stall reports for that hour.
// The first of the consumer's timer, a Flush, a drain of a span stamped on
// the new time, or Stop to see it reports the open buckets as they stand,
// stamped as ending now (a relay on the new clock refuses buckets from its
// future), restarts the buckets on the new time and arms the timer within
// an interval. Nothing is lost or late; ClockStepsBack counts the step; a
// relay on the new clock accepts every report.
func TestClockStepBack(t *testing.T) {
	const iv = 10 * time.Second
	for _, seen := range []string{"tick", "flush", "drain", "stop"} {
		d := newDriven(t, iv, epoch.Add(3*time.Second))
		d.publish("before", epoch.Add(4*time.Second))
		d.at(epoch.Add(6 * time.Second))
		back := epoch.Add(-time.Hour + 7*time.Second)
		d.now = back
		d.publish("after", back)
		switch seen {
		case "tick":
			d.at(back)
		case "flush":
			d.c.flush(make(chan error, 1))
		case "drain": // the run loop's drain, before the timer fires
			d.c.drainQueued()
		case "stop":
			d.c.finish()
		}
		got := d.relayed(back)
		if len(got) == 0 || got[0].start != -time.Hour-3*time.Second || got[0].length != iv || len(got[0].hits) != 1 || got[0].hits["before"] != 1 {
			t.Fatalf("%s: at the step back: %v; want [-1h3s +10s) map[before:1] first", seen, got)
		}
		switch seen {
		case "flush", "stop": // they report the new bucket up to now too
			if len(got) != 2 || got[1].start != -time.Hour || got[1].length != 7*time.Second || got[1].hits["after"] != 1 {
				t.Fatalf("%s: %v; want [-1h3s +10s) map[before:1], [-1h +7s) map[after:1]", seen, got)
			}
		default:
			if len(got) != 1 {
				t.Fatalf("%s: at the step back: %v; want only [-1h3s +10s)", seen, got)
			}
		}
		if h := d.a.Health(); h.ClockStepsBack != 1 || h.Counted != 2 || h.LateSpans != 0 {
			t.Fatalf("%s: clock steps %d, counted %d, late %d; want 1, 2, 0", seen, h.ClockStepsBack, h.Counted, h.LateSpans)
		}
		if seen == "stop" {
			continue
		}
		if wait := d.c.armed.Sub(d.now); wait <= 0 || wait > iv || !d.c.armed.Equal(d.c.due()) {
			t.Fatalf("%s: timer armed for %v after the step (due in %v), want at most %v", seen, wait, d.c.due().Sub(d.now), iv)
		}
		d.at(back.Truncate(iv).Add(iv + iv/graceDivisor))
		got = d.relayed(d.now)
		switch {
		case seen == "flush" && len(got) != 0:
			t.Fatalf("flush: an interval later: %v; want nothing more", got)
		case seen != "flush" && (len(got) != 1 || got[0].start != -time.Hour || got[0].length != iv || len(got[0].hits) != 1 || got[0].hits["after"] != 1):
			t.Fatalf("%s: an interval later: %v; want [-1h +10s) map[after:1]", seen, got)
		}
	}
}

// relayed is reports, failing the test on a bucket a relay on a clock
// reading now would refuse: one of length 0, or starting in its future
// (the relay allows a minute's skew; this asks that every bucket end by
// now).
func (d *driven) relayed(now time.Time) []bucket {
	d.t.Helper()
	got := d.reports(epoch)
	for _, b := range got {
		if b.length <= 0 || epoch.Add(b.start+b.length).After(now) {
			d.t.Fatalf("bucket %v: a relay on the clock (%v) would refuse it", b, now.Sub(epoch))
		}
	}
	return got
}

// TestSmallStepBackKeepsBuckets: once the previous bucket has closed, the
// timer is armed most of an interval ahead; a step back of 1 s (more than
// the grace, less than an interval) is not a step for the buckets: the span
// that ended in [10 s, 20 s) is reported there at the next close, a span
// stamped on the stepped clock before 10 s counts there as late, and
// ClockStepsBack stays 0.
func TestSmallStepBackKeepsBuckets(t *testing.T) {
	const iv = 10 * time.Second
	d := newDriven(t, iv, epoch.Add(3*time.Second))
	d.publish("first", epoch.Add(4*time.Second))
	d.at(epoch.Add(iv + iv/graceDivisor)) // [0, 10 s) closes
	if got := d.reports(epoch); len(got) != 1 || got[0].start != 0 {
		t.Fatalf("first close: %v", got)
	}
	d.publish("cur", epoch.Add(iv+500*time.Millisecond))
	d.c.consume()
	d.now = epoch.Add(iv + iv/graceDivisor - time.Second - 2*time.Millisecond) // back 1.002 s
	d.publish("stepped", d.now)
	d.at(d.now)
	if got := d.reports(epoch); len(got) != 0 {
		t.Fatalf("a 1 s step back reported %v at once", got)
	}
	d.at(epoch.Add(2*iv + iv/graceDivisor))
	got := d.reports(epoch)
	if len(got) != 1 || got[0].start != iv || got[0].length != iv || got[0].hits["cur"] != 1 || got[0].hits["stepped"] != 1 {
		t.Fatalf("after the step: %v; want [10s +10s) map[cur:1 stepped:1]", got)
	}
	if h := d.a.Health(); h.ClockStepsBack != 0 || h.LateSpans != 1 {
		t.Fatalf("ClockStepsBack %d LateSpans %d, want 0 and 1", h.ClockStepsBack, h.LateSpans)
	}
}

// TestIdleStepBackSeen: with no span since the close, the consumer reads
// the clock only when its timer fires; the unstepped clock would read the
// boundary (20 s) then, so a clock that reads 5 s has stepped back 15 s,
// more than an interval: the buckets realign, and the timer is armed
// within an interval, not 15 s ahead.
func TestIdleStepBackSeen(t *testing.T) {
	const iv = 10 * time.Second
	d := newDriven(t, iv, epoch.Add(3*time.Second))
	d.publish("first", epoch.Add(4*time.Second))
	d.at(epoch.Add(iv))
	d.at(epoch.Add(iv + iv/graceDivisor)) // [0, 10 s) closes; armed for 20 s
	d.reports(epoch)
	d.now = epoch.Add(5 * time.Second)
	d.c.fired()
	if h := d.a.Health(); h.ClockStepsBack != 1 || d.c.armed.Sub(d.now) > iv {
		t.Fatalf("a 15 s step back seen when the timer fired: ClockStepsBack %d, next tick in %v; want 1 and at most %v",
			h.ClockStepsBack, d.c.armed.Sub(d.now), iv)
	}
}

// TestFlushAfterSmallStepBack: a Flush that finds the clock gone back
// behind the current bucket's start, by less than an interval, reports
// that bucket a nanosecond long, never with Duration 0 (which the relay
// and the agent refuse) however many spans it holds, nor to its nominal
// end (time to come, which the next report would cover again).
func TestFlushAfterSmallStepBack(t *testing.T) {
	const iv = 10 * time.Second
	d := newDriven(t, iv, epoch.Add(3*time.Second))
	d.at(epoch.Add(iv + 200*time.Millisecond)) // the current bucket starts at 10 s
	d.publish("x", epoch.Add(iv+300*time.Millisecond))
	d.at(epoch.Add(iv + 400*time.Millisecond))
	d.now = epoch.Add(iv - 100*time.Millisecond) // the clock steps back 0.5 s
	d.c.flush(make(chan error, 1))
	got := d.reports(epoch)
	if len(got) != 1 || got[0].start != iv || got[0].length != time.Nanosecond || got[0].hits["x"] != 1 {
		t.Fatalf("flush: %v; want [10s +1ns) map[x:1]", got)
	}
	// The clock back past the bucket's start: the next report starts
	// after the first, not over it again.
	d.publish("y", time.Time{})
	d.now = epoch.Add(iv + 4*time.Second)
	d.c.flush(make(chan error, 1))
	got = d.reports(epoch)
	if len(got) != 1 || got[0].start != iv+time.Nanosecond || got[0].length != 4*time.Second-time.Nanosecond || got[0].hits["y"] != 1 {
		t.Fatalf("next flush: %v; want [10.000000001s +3.999999999s) map[y:1]", got)
	}
}

// TestFlushesAtOneInstantDoNotOverlap: Flushes at one clock reading
// report disjoint buckets, each a nanosecond past the one before, and the
// bucket's close goes on from the last: no time is reported twice.
func TestFlushesAtOneInstantDoNotOverlap(t *testing.T) {
	const iv = 10 * time.Second
	d := newDriven(t, iv, epoch.Add(3*time.Second))
	d.at(epoch.Add(iv + iv/graceDivisor)) // the previous bucket closed
	d.reports(epoch)
	d.now = epoch.Add(iv + 5*time.Second)
	var all []bucket
	for _, res := range []string{"a", "b", "c"} {
		d.publish(res, time.Time{})
		d.c.flush(make(chan error, 1))
		all = append(all, d.reports(epoch)...)
	}
	d.publish("d", epoch.Add(17*time.Second)) // ended before the boundary: the bucket's close
	d.at(epoch.Add(2*iv + 100*time.Millisecond))
	d.at(epoch.Add(2*iv + iv/graceDivisor))
	all = append(all, d.reports(epoch)...)
	if len(all) < 4 {
		t.Fatalf("reports %v; want at least 4", all)
	}
	for i := 1; i < len(all); i++ {
		if all[i].start < all[i-1].start+all[i-1].length {
			t.Errorf("%v overlaps %v", all[i], all[i-1])
		}
	}
	if all[0].start != iv || all[0].length != 5*time.Second || all[1].length != time.Nanosecond || all[2].length != time.Nanosecond {
		t.Errorf("reports %v; want [10s +5s), then two of a nanosecond", all)
	}
}

// TestFlushAfterStepBackOnLongInterval: with an hour's interval, a Flush
// at 30 min starts the current bucket there; the clock then steps back 10
// min, less than the interval, and another Flush reports. The bucket must
// not go out starting 10 min after the clock that reports it: a relay
// refuses a bucket starting more than a minute in its future
// (relay.MaxClockSkew), and with it the whole datagram. Such a step is
// taken as one, as a step of more than an interval is.
func TestFlushAfterStepBackOnLongInterval(t *testing.T) {
	const iv = time.Hour
	d := newDriven(t, iv, epoch.Add(3*time.Second))
	d.publish("x", epoch.Add(30*time.Minute))
	d.now = epoch.Add(30 * time.Minute)
	d.c.flush(make(chan error, 1))
	if got := d.reports(epoch); len(got) != 1 || got[0].hits["x"] != 1 {
		t.Fatalf("first flush: %v", got)
	}
	d.publish("y", time.Time{})
	d.now = epoch.Add(20 * time.Minute)
	d.c.flush(make(chan error, 1))
	got := d.reports(epoch)
	hits := 0
	for _, b := range got {
		if b.start+b.length > 20*time.Minute {
			t.Errorf("bucket [%v +%v) ends after the clock (20m) that reports it", b.start, b.length)
		}
		hits += int(b.hits["y"])
	}
	if hits != 1 {
		t.Fatalf("second flush: %v; want y counted once", got)
	}
	if h := d.a.Health(); h.ClockStepsBack != 1 {
		t.Fatalf("ClockStepsBack %d, want 1", h.ClockStepsBack)
	}
}

// reading is a clock reading as time.Now gives it: wall time wall, and a
// monotonic reading mono past base's (base from time.Now), which runs on
// at its own rate while NTP slews or steps the wall clock. time.Time keeps
// the monotonic reading in its second word; the test skips if it moved.
func reading(t *testing.T, base, wall time.Time, mono time.Duration) time.Time {
	t.Helper()
	r := base.Add(wall.Sub(base)) // both readings moved by the wall's offset
	*(*int64)(unsafe.Add(unsafe.Pointer(&r), 8)) += int64(mono - wall.Sub(base))
	if r.UnixNano() != wall.UnixNano() || r.Sub(base) != mono {
		t.Skip("time.Time no longer keeps its monotonic reading where reading expects it")
	}
	return r
}

// TestNanosecondReportsStayInTheirWindow: Flushes at a nanosecond before
// the boundary, each reporting a nanosecond, never move the bucket's start
// onto the boundary: every report has a length and starts in the window
// its spans ended in, the bucket's close included.
func TestNanosecondReportsStayInTheirWindow(t *testing.T) {
	const iv = 10 * time.Second
	d := newDriven(t, iv, epoch.Add(3*time.Second))
	d.at(epoch.Add(iv + iv/graceDivisor)) // [0, 10s) closed
	d.reports(epoch)
	b := epoch.Add(2 * iv)
	d.now = b.Add(-time.Nanosecond)
	var all []bucket
	for _, res := range []string{"a", "b", "c"} {
		d.publish(res, b.Add(-2*time.Nanosecond))
		d.c.flush(make(chan error, 1))
		all = append(all, d.reports(epoch)...)
	}
	d.publish("d", b.Add(-2*time.Nanosecond))
	d.at(b.Add(100 * time.Millisecond))
	d.at(b.Add(iv / graceDivisor))
	all = append(all, d.reports(epoch)...)
	if len(all) != 4 {
		t.Fatalf("reports %v; want 4", all)
	}
	for _, x := range all {
		if x.length <= 0 || x.start >= 2*iv || x.start+x.length > 2*iv {
			t.Errorf("report %v: want a length, within [10s, 20s)", x)
		}
	}
}

// TestFlushBucketsOnTheWallClock: buckets between two Flushes are measured
// on the wall clock, as their Start is, not by the monotonic readings
// time.Now also carries: while NTP slews the wall clock, a Start on one
// clock and a Duration on the other made consecutive buckets overlap or
// leave gaps, and after a small step back the next bucket started before
// the one just reported (TestFlushAfterSmallStepBack, on a real clock).
func TestFlushBucketsOnTheWallClock(t *testing.T) {
	const iv = 10 * time.Second
	base := time.Now()
	d := newDriven(t, iv, epoch.Add(3*time.Second))
	d.at(epoch.Add(iv + 200*time.Millisecond))
	d.reports(epoch)
	d.publish("x", epoch.Add(iv+300*time.Millisecond))
	d.now = reading(t, base, epoch.Add(iv+400*time.Millisecond), time.Hour)
	d.c.flush(make(chan error, 1))
	d.reports(epoch)
	// The wall clock slewed 1 ms slower than the monotonic one.
	d.publish("y", epoch.Add(iv+500*time.Millisecond))
	d.now = reading(t, base, epoch.Add(iv+1400*time.Millisecond), time.Hour+1001*time.Millisecond)
	d.c.flush(make(chan error, 1))
	got := d.reports(epoch)
	if len(got) != 1 || got[0].start != iv+400*time.Millisecond || got[0].length != time.Second || got[0].hits["y"] != 1 {
		t.Fatalf("slewed: %v; want [10.4s +1s) map[y:1], ending where the next begins", got)
	}
	// A step back of 0.3 s: the bucket runs a nanosecond, and the next
	// one starts after it, not before.
	d.publish("z", epoch.Add(iv+1300*time.Millisecond))
	d.now = reading(t, base, epoch.Add(iv+1100*time.Millisecond), time.Hour+1100*time.Millisecond)
	d.c.flush(make(chan error, 1))
	got = d.reports(epoch)
	if len(got) != 1 || got[0].start != iv+1400*time.Millisecond || got[0].length != time.Nanosecond || got[0].hits["z"] != 1 {
		t.Fatalf("stepped back: %v; want [11.4s +1ns) map[z:1]", got)
	}
	if s := d.c.start.Sub(epoch); s != iv+1400*time.Millisecond+time.Nanosecond {
		t.Fatalf("after the step back the next bucket starts at %v, want 11.400000001s", s)
	}
}

// TestStepBackDuringTick: a step back seen by the tick's drain (the tick
// read the clock just before it) realigns once, and the tick's closing
// work, on the clock read again, does not move the buckets back onto the
// old one.
func TestStepBackDuringTick(t *testing.T) {
	const iv = 10 * time.Second
	d := newDriven(t, iv, epoch.Add(3*time.Second))
	d.publish("before", epoch.Add(4*time.Second))
	d.at(epoch.Add(6 * time.Second))
	old := epoch.Add(iv)
	back := old.Add(-time.Hour)
	d.publish("after", back)
	reads := 0
	d.c.clock = func() time.Time {
		if reads++; reads == 1 {
			return old
		}
		return back
	}
	d.c.tick()
	d.now = back.Add(time.Second)
	d.c.clock = func() time.Time { return d.now }
	d.c.now()
	if h := d.a.Health(); h.ClockStepsBack != 1 || h.LateSpans != 0 || d.c.start.Sub(epoch) != -time.Hour+iv {
		t.Fatalf("one step back counted %d times, %d late; buckets at %v, want 1, 0, -59m50s", h.ClockStepsBack, h.LateSpans, d.c.start.Sub(epoch))
	}
}

// TestStopClosesDueBoundary: Stop after a boundary the timer has not
// handled yet (the wall clock jumped ahead, or an hour's interval ended
// as Stop came) reports the bucket that ended at the boundary as it is,
// never one across it, which could outlast what a relay takes (an hour).
func TestStopClosesDueBoundary(t *testing.T) {
	for _, tc := range []struct {
		iv, at time.Duration
	}{{10 * time.Second, 2 * time.Hour}, {time.Hour, time.Hour + time.Second}} {
		d := newDriven(t, tc.iv, epoch.Add(3*time.Second))
		d.publish("x", epoch.Add(4*time.Second))
		d.now = epoch.Add(tc.at)
		d.c.finish()
		got := d.relayed(d.now)
		if len(got) != 1 || got[0].start != 0 || got[0].length != tc.iv || got[0].hits["x"] != 1 {
			t.Fatalf("interval %v, Stop at %v: %v; want [0s +%v) map[x:1]", tc.iv, tc.at, got, tc.iv)
		}
	}
}

// TestStopReportsWaitOrDropOnHalt: every report Stop makes, not only its
// last (the bucket of a boundary the timer had not handled, the report of
// a clock step), waits for a send queue full for a moment, and is dropped
// and counted, not encoded, once Stop's context has given up (halt).
func TestStopReportsWaitOrDropOnHalt(t *testing.T) {
	const iv = 10 * time.Second
	d := newDriven(t, iv, epoch.Add(3*time.Second))
	d.publish("x", epoch.Add(4*time.Second))
	d.now = epoch.Add(iv + iv/graceDivisor + time.Second) // the grace passed, unhandled
	for range cap(d.a.snd.in) {
		d.c.out <- &report{}
	}
	go func() {
		time.Sleep(50 * time.Millisecond)
		for range cap(d.a.snd.in) {
			<-d.a.snd.in
		}
	}()
	d.c.finish()
	if got, h := d.reports(epoch), d.a.Health(); h.SpansUnsent != 0 || len(got) != 1 || got[0].hits["x"] != 1 {
		t.Fatalf("Stop with time left: reported %v, SpansUnsent %d (%v); want x reported, 0 unsent", got, h.SpansUnsent, h.LastSendError)
	}
	for _, at := range []time.Time{epoch.Add(2 * iv), epoch.Add(-time.Hour)} {
		d := newDriven(t, iv, epoch.Add(3*time.Second))
		d.publish("x", epoch.Add(4*time.Second))
		d.c.consume()
		d.now = at
		d.c.halt.Store(true)
		d.c.finish()
		if got, h := d.reports(epoch), d.a.Health(); len(got) != 0 || h.SpansUnsent != 1 {
			t.Fatalf("Stop at %v after halt: queued %v, SpansUnsent %d; want nothing queued, 1 unsent", at.Sub(epoch), got, h.SpansUnsent)
		}
	}
}

// TestStopAfterUnhandledBoundary: Stop half a second after a boundary the
// timer has not handled puts each span still queued in the bucket of its
// end: the boundary is crossed before the inbox is read, as a tick does.
func TestStopAfterUnhandledBoundary(t *testing.T) {
	const iv = 10 * time.Second
	d := newDriven(t, iv, epoch.Add(3*time.Second))
	d.publish("x", epoch.Add(4*time.Second))
	d.publish("y", epoch.Add(iv+300*time.Millisecond))
	d.now = epoch.Add(iv + 500*time.Millisecond)
	d.c.finish()
	got := d.relayed(d.now)
	if len(got) != 2 || got[0].start != 0 || got[0].length != iv || len(got[0].hits) != 1 || got[0].hits["x"] != 1 ||
		got[1].start != iv || got[1].length != 500*time.Millisecond || len(got[1].hits) != 1 || got[1].hits["y"] != 1 {
		t.Fatalf("%v; want [0s +10s) map[x:1], [10s +500ms) map[y:1]", got)
	}
}

// TestFlushAfterBoundaryBeforeTimer: a Flush handled after a boundary but
// before the timer crosses it first, so the spans that ended after it (and
// those stamped "now") go to the new bucket, not the one that ended.
func TestFlushAfterBoundaryBeforeTimer(t *testing.T) {
	const iv = 10 * time.Second
	d := newDriven(t, iv, epoch.Add(3*time.Second))
	b := epoch.Add(iv) // the timer has not fired for it
	d.now = b.Add(500 * time.Millisecond)
	d.publish("before", b.Add(-time.Second))
	d.publish("after", b.Add(200*time.Millisecond))
	d.publish("now", time.Time{})
	d.c.flush(make(chan error, 1))
	got := d.reports(epoch)
	want := []bucket{
		{start: 0, length: iv, hits: map[string]uint64{"before": 1}},
		{start: iv, length: 500 * time.Millisecond, hits: map[string]uint64{"after": 1, "now": 1}},
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("buckets %v, want %v", got, want)
	}
}

// TestDrainAfterBoundaryBeforeTimer: a busy consumer that drains a batch
// after a boundary, before it handles the timer, puts the batch's spans in
// the bucket of their end.
func TestDrainAfterBoundaryBeforeTimer(t *testing.T) {
	const iv = 10 * time.Second
	d := newDriven(t, iv, epoch.Add(3*time.Second))
	b := epoch.Add(iv)
	d.publish("before", b.Add(-time.Second))
	d.now = b.Add(500 * time.Millisecond)
	d.publish("after", b.Add(200*time.Millisecond))
	d.c.drainQueued()
	d.at(b.Add(iv / graceDivisor))
	d.at(b.Add(iv + iv/graceDivisor))
	got := d.reports(epoch)
	want := []bucket{
		{start: 0, length: iv, hits: map[string]uint64{"before": 1}},
		{start: iv, length: iv, hits: map[string]uint64{"after": 1}},
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("buckets %v, want %v", got, want)
	}
}

// TestBucketsAlignOnTheEpoch: buckets start at multiples of the interval
// since the Unix epoch, as the agent and the relay align them, also for an
// interval that does not divide a day (time.Truncate's zero time is 3 s off
// the epoch modulo 7 s).
func TestBucketsAlignOnTheEpoch(t *testing.T) {
	const iv = 7 * time.Second
	at := time.Unix(1_800_000_000, 0)
	d := newDriven(t, iv, at)
	d.publish("a", at)
	d.at(d.c.due())
	d.at(d.c.due())
	got := d.reports(time.Unix(0, 0))
	if len(got) != 1 || got[0].length != iv || got[0].hits["a"] != 1 {
		t.Fatalf("buckets %v, want one of %v holding the span", got, iv)
	}
	if got[0].start%iv != 0 {
		t.Fatalf("bucket starts %v past a multiple of %v since the epoch", got[0].start%iv, iv)
	}
}

// TestClockPast2262: a wall clock past what UnixNano holds (a bad RTC)
// leaves the consumer working: a boundary tick returns.
func TestClockPast2262(t *testing.T) {
	at := time.Date(2300, 1, 1, 0, 0, 0, 0, time.UTC)
	d := newDriven(t, 10*time.Second, at)
	d.publish("a", time.Time{})
	done := make(chan struct{})
	go func() { d.at(at.Add(10 * time.Second)); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("the boundary tick did not return: crossBoundaries never reaches the clock")
	}
}

// TestStepBackMidBatchCountedFirst: a clock step back seen in the middle of
// a batch (at its first late span) reports the open buckets; the spans of
// the batch added before it must be in Counted by then, so that no Health
// snapshot has more spans cleared, sent or unsent than counted. Reports
// are discarded here (the agent is off), which counts them in Cleared at
// once, while a reader takes snapshots. The clock goes back after the
// batch's first read (consume's), or after its second (route's at the late
// span, which found it in place): route must decide on that one read, as a
// second read that realigns would report the spans added so far first.
func TestStepBackMidBatchCountedFirst(t *testing.T) {
	for _, tc := range []struct {
		name      string
		inPlace   int    // reads of the batch before the step back
		wantSteps uint64 // Health.ClockStepsBack; 0: not checked
	}{
		{"at route's read", 1, 2000},
		{"after route's read", 2, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const iv = 10 * time.Second
			d := newDriven(t, iv, epoch.Add(3*time.Second))
			var done atomic.Bool
			var bad atomic.Int64
			var wg sync.WaitGroup
			wg.Go(func() {
				for !done.Load() {
					if h := d.a.Health(); h.SpansSent+h.SpansUnsent+h.Cleared > h.Counted {
						bad.Add(1)
					}
				}
			})
			for i := range 2000 {
				// The batch's first reads are where the last step took
				// the clock, the next ones an hour further back.
				now := epoch.Add(3*time.Second - time.Duration(i)*time.Hour)
				reads := 0
				d.c.clock = func() time.Time {
					if reads++; reads <= tc.inPlace {
						return now
					}
					return now.Add(-time.Hour)
				}
				d.publish("current", time.Time{})
				d.publish("late", now.Add(-2*time.Hour))
				d.a.off.Store(true)
				for d.c.consume() > 0 {
				}
				d.a.off.Store(false)
			}
			done.Store(true)
			wg.Wait()
			h := d.a.Health()
			if bad.Load() > 0 || h.Counted != 4000 || tc.wantSteps > 0 && h.ClockStepsBack != tc.wantSteps {
				t.Fatalf("%d snapshots with more spans out than counted; counted %d, steps back %d, want 0, 4000, %d",
					bad.Load(), h.Counted, h.ClockStepsBack, tc.wantSteps)
			}
		})
	}
}
