// This file tests Stop, Flush and Clear against a busy consumer: Stop's
// deadline with a costly inbox, and the order in which their signals are
// carried out.

package stats

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/spanstats/spanstats/aggregate"
	"github.com/spanstats/spanstats/stats/statstest"
)

// costlyAggregator returns an aggregator, not started, with an inbox of n
// spans filled by costlyInbox, reporting to a loopback agent; the test
// fails if a goroutine outlives it.
func costlyAggregator(t *testing.T, n int) *Aggregator {
	t.Helper()
	ag := statstest.New()
	leaks := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, leaks) })
	t.Cleanup(ag.Close) // first: cleanups run last in, first out
	// Its own keys: the fake agent's default list would leave them out,
	// and the spans cheap.
	a, err := New(Config{AgentURL: ag.URL(), SendJitter: -1, MaxAggregates: 1, CardinalityLimits: unlimited,
		InboxSize: n, PeerTagKeys: costlyKeys()})
	if err != nil {
		t.Fatal(err)
	}
	costlyInbox(t, a, n)
	return a
}

// costlyInbox fills a's inbox (not started) with n spans that each cost the
// consumer a long time: a new key of MaxPeerTags peer tags of MaxTagLen
// bytes (the most Publish keeps; the strings shared, so not copied), which
// it encodes and hashes whole (with every budget off and a cap of one
// entry, the spans after the first fold into the overflow entry, so the
// test needs no memory for their keys). A full inbox of them takes the
// consumer a few hundred ms here, seconds under the race detector.
func costlyInbox(t *testing.T, a *Aggregator, n int) {
	t.Helper()
	tags := costlyKeys()
	for j := range tags {
		tags[j] += ":" + strings.Repeat("v", MaxTagLen-4)
	}
	for i := range n {
		if !a.Publish(&Span{Service: "s", Name: "op", Resource: fmt.Sprintf("r%d", i), SpanKind: "client", Duration: 5, PeerTags: tags}) {
			t.Fatalf("span %d not queued", i)
		}
	}
}

// costlyKeys are the MaxPeerTags peer-tag keys of costlyInbox's spans, which
// its aggregator keeps.
func costlyKeys() []string {
	keys := make([]string, MaxPeerTags)
	for j := range keys {
		keys[j] = fmt.Sprintf("k%02d", j)
	}
	return keys
}

// unlimited turns every cardinality budget off.
var unlimited = aggregate.Limits{Resource: -1, Service: -1, Operation: -1, Type: -1, SpanKind: -1,
	HTTPMethod: -1, HTTPEndpoint: -1, GRPCStatusCode: -1, ServiceSource: -1, PeerTag: -1}

// TestStopDeadlineWithCostlyInbox: with a full inbox of spans that take the
// consumer ~10× its deadline to aggregate, Stop returns by that deadline with
// its error, the spans it left in the inbox are counted in StopUndrained,
// and both identities of Health hold.
func TestStopDeadlineWithCostlyInbox(t *testing.T) {
	const n = MaxInboxSize
	a := costlyAggregator(t, n)
	a.Start()
	const deadline = 20 * time.Millisecond
	took, err := stopWithin(a, deadline)
	t.Logf("Stop took %s", took)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Stop = %v, want the deadline's error", err)
	}
	// Promptness is judged by the work done, not by the wall clock: load
	// stretches Stop's time past any fixed slack, but it slows the
	// consumer as much, so within the deadline it counts fewer spans,
	// never more; a consumer that went on past it counts most of the
	// inbox. The wall-clock bound only catches a Stop that hangs.
	if took > deadline+5*time.Second {
		t.Fatalf("Stop took %s on a %s deadline", took, deadline)
	}
	h := a.Health()
	if h.Published != n || h.Pending != 0 || h.StopUndrained == 0 || h.StopUndrained == n && h.Counted != 0 {
		t.Fatalf("published %d pending %d undrained %d counted %d", h.Published, h.Pending, h.StopUndrained, h.Counted)
	}
	// About a tenth here; half leaves room for a host several times faster.
	if h.Counted > n/2 {
		t.Fatalf("counted %d of %d spans on a %s deadline: the consumer went on past it", h.Counted, n, deadline)
	}
	if h.Counted+h.StopUndrained != n {
		t.Fatalf("counted %d + undrained %d != %d", h.Counted, h.StopUndrained, n)
	}
	checkConservation(t, h)
}

// TestStopGivesUpWhileEncoding: Stop's deadline passing while the last
// report is encoded (a full table of long resources: ~130 MB, a third of
// a second to lay out and pack) ends the encoding within a thousand groups:
// Stop returns soon after its deadline, the report dropped and counted
// whole. Wall-clock, so not under -race, which stretches both sides.
func TestStopGivesUpWhileEncoding(t *testing.T) {
	if raceEnabled {
		t.Skip("timed against a deadline; the race detector stretches the encoding tenfold")
	}
	const n = MaxMaxAggregates
	a := costlyToEncode(t, n)
	const deadline = 20 * time.Millisecond
	took, err := stopWithin(a, deadline)
	// Encoding it all takes ~15× the deadline here: a bound of 7× still
	// tells an encoding cut short from one run to its end.
	if !errors.Is(err, context.DeadlineExceeded) || took > deadline+120*time.Millisecond {
		t.Fatalf("Stop = %v after %s; want the deadline's error soon after %s", err, took, deadline)
	}
	h := a.Health()
	if h.SpansSent != 0 || h.SpansUnsent != n || !errors.Is(h.LastSendError, errStopDeadline) {
		t.Fatalf("sent %d, unsent %d of %d spans, last error %v; want all unsent for Stop's deadline", h.SpansSent, h.SpansUnsent, n, h.LastSendError)
	}
	checkConservation(t, h)
}

// stopWithin stops a with a context of the given deadline and returns
// how long Stop took and its error.
func stopWithin(a *Aggregator, deadline time.Duration) (time.Duration, error) {
	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	defer cancel()
	start := time.Now()
	err := a.Stop(ctx)
	return time.Since(start), err
}

// costlyToEncode returns a started aggregator holding n groups of 2 KB
// resources, all counted: ~130 MB, a third of a second to encode.
func costlyToEncode(t *testing.T, n int) *Aggregator {
	t.Helper()
	ag := statstest.New()
	t.Cleanup(ag.Close)
	a := newStarted(t, Config{AgentURL: ag.URL(), SendJitter: -1, BucketInterval: time.Hour,
		MaxAggregates: n, CardinalityLimits: unlimited, InboxSize: MaxInboxSize, Logger: slog.New(slog.DiscardHandler)})
	long := strings.Repeat("x", 2000)
	for i := 0; i < n; {
		s := Span{Service: "s", Name: "op", Resource: long + strconv.Itoa(i), SpanKind: "server", Duration: int64(1 + i%5000)}
		if a.Publish(&s) {
			i++
		} else {
			time.Sleep(time.Millisecond)
		}
	}
	waitLong(t, "all counted", func() bool { return a.Health().Counted == uint64(n) })
	return a
}

// TestFlushCutShortByStopSaysSo: a Flush whose report Stop's deadline cuts
// short while it is encoded answers with the cause, not nil, and its
// spans are counted unsent.
func TestFlushCutShortByStopSaysSo(t *testing.T) {
	if raceEnabled {
		t.Skip("timed against a deadline; the race detector stretches the encoding tenfold")
	}
	const n = MaxMaxAggregates
	a := costlyToEncode(t, n)
	flushed := make(chan error, 1)
	go func() { flushed <- a.Flush(context.Background()) }()
	time.Sleep(5 * time.Millisecond) // the consumer takes the Flush and encodes
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if err := a.Stop(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Stop = %v, want the deadline's error", err)
	}
	if err := <-flushed; !errors.Is(err, errStopDeadline) {
		t.Fatalf("Flush = %v, want errStopDeadline", err)
	}
	h := a.Health()
	if h.SpansSent != 0 || h.SpansUnsent != n {
		t.Fatalf("sent %d, unsent %d of %d spans; want all unsent", h.SpansSent, h.SpansUnsent, n)
	}
	checkConservation(t, h)
}

// TestStopHaltedBeforeStopSeen: Stop's deadline can pass while the consumer
// is inside a batch, before it has taken Stop's signal; AddBatch then stops
// early and leaves a full inbox, which ParkUntil refuses to park on. The
// consumer must still finish rather than spin. Halt is set before Start to
// make that order certain.
func TestStopHaltedBeforeStopSeen(t *testing.T) {
	const n = 1024
	a := costlyAggregator(t, n)
	a.cons.halt.Store(true)
	a.Start()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	stopped := make(chan error, 1)
	go func() { stopped <- a.Stop(ctx) }()
	var err error
	select {
	case err = <-stopped:
	case <-time.After(10 * time.Second):
		t.Fatal("Stop did not return: the halted consumer never finished")
	}
	// Halted by hand, the consumer can finish before the deadline.
	if err != nil && !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Stop = %v, want nil or the deadline's error", err)
	}
	h := a.Health()
	if h.Published != n || h.Counted != 0 || h.StopUndrained != n {
		t.Fatalf("published %d counted %d undrained %d, want %d 0 %d", h.Published, h.Counted, h.StopUndrained, n, n)
	}
	checkConservation(t, h)
}

// TestFlushWaitsForAClaimedSlot: Flush reports everything published before
// it was called, also spans queued behind a slot that a Publish still
// writing has claimed (here a claim held open by the test for longer
// than a tick would wait: Flush waits within its ctx).
func TestFlushWaitsForAClaimedSlot(t *testing.T) {
	ag := statstest.New()
	defer ag.Close()
	a := newStarted(t, Config{AgentURL: ag.URL(), SendJitter: -1})
	c, ok := a.inbox.Claim() // a producer in the middle of Publish
	if !ok {
		t.Fatal("claim refused")
	}
	if !a.Publish(&Span{Service: "s", Name: "op", Resource: "r", SpanKind: "server", Duration: 5}) {
		t.Fatal("publish refused")
	}
	flushed := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		flushed <- a.Flush(ctx)
	}()
	time.Sleep(slotWait + 50*time.Millisecond) // Flush waits for the claimed slot within its ctx, past a tick's wait
	s := Span{Service: "s", Name: "op", Resource: "claimed", SpanKind: "server", Duration: 5}
	s.snapshot(c.Value())
	c.Commit()
	if err := <-flushed; err != nil {
		t.Fatal(err)
	}
	if _, hits := statstest.Sum(ag.Requests()); hits != 2 {
		t.Fatalf("%d spans at the agent after Flush, want 2: the claimed one and the one published behind it", hits)
	}
	stop(t, a)
}

// TestClearBeforeStopIsCarriedOut: a Clear that returned before Stop was
// called discards what was counted, even when the consumer is busy and
// Stop's signal and the Clear are both pending when it next looks.
func TestClearBeforeStopIsCarriedOut(t *testing.T) {
	const trials = 20
	skipped := 0
	for range trials {
		ag := statstest.New()
		a := newStarted(t, Config{AgentURL: ag.URL(), SendJitter: -1})
		var quit atomic.Bool
		var wg sync.WaitGroup
		wg.Add(1)
		go func() { // keeps the consumer busy
			defer wg.Done()
			for !quit.Load() {
				a.Publish(&Span{Service: "s", Name: "op", Resource: "r", SpanKind: "server", Duration: 5})
			}
		}()
		waitFor(t, "spans counted", func() bool { return a.Health().Counted > 1000 })
		a.Clear()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err := a.Stop(ctx)
		cancel()
		quit.Store(true)
		wg.Wait()
		if err != nil {
			t.Fatal(err)
		}
		if a.Health().Cleared == 0 {
			skipped++
		}
		ag.Close()
	}
	if skipped > 0 {
		t.Fatalf("%d of %d Clears made before Stop were not carried out (Health.Cleared 0)", skipped, trials)
	}
}

// TestClearBeforeBucketClose: a Clear and the timer that closes the
// previous bucket ready together (the consumer was busy past the grace):
// the select in await picks either, and the Clear goes first whichever it
// picks, so the bucket's spans, all published before the Clear, are
// cleared, never reported. The timer's case used to close the bucket
// first, half the time.
func TestClearBeforeBucketClose(t *testing.T) {
	const iv = 10 * time.Second // grace: 1 s
	for try := range 24 {
		d := newDriven(t, iv, epoch.Add(3*time.Second))
		d.publish("a", epoch.Add(4*time.Second))
		d.at(epoch.Add(10*time.Second + 100*time.Millisecond))   // [0, 10 s) is the previous bucket, in its grace
		d.now = epoch.Add(11*time.Second + 500*time.Millisecond) // the grace is over
		d.a.Clear()
		d.c.timer.Reset(0)
		if d.c.await(nil, nil) { // the one it picks
			t.Fatal("await saw a Stop")
		}
		d.at(d.now) // the timer's work, if await picked the Clear
		h := d.a.Health()
		for _, b := range d.reports(epoch) {
			if b.hits["a"] != 0 {
				t.Fatalf("try %d: the span published before Clear was reported in %v (cleared %d)", try, b, h.Cleared)
			}
		}
		if h.Cleared != 1 {
			t.Fatalf("try %d: cleared %d, want the 1 span published before Clear", try, h.Cleared)
		}
	}
}

// clearAfterPause drives a consumer holding "a" in the previous bucket's
// grace, paused past the next boundary with "b" in the inbox, then
// asks for a Clear.
func clearAfterPause(t *testing.T) *driven {
	const iv = 10 * time.Second
	d := newDriven(t, iv, epoch.Add(3*time.Second))
	d.publish("a", epoch.Add(4*time.Second))
	d.at(epoch.Add(10*time.Second + 100*time.Millisecond)) // [0, 10 s), holding "a", in its grace
	d.now = epoch.Add(25 * time.Second)
	d.publish("b", epoch.Add(24*time.Second)) // in the inbox
	d.a.Clear()
	return d
}

// noneBeforeClear fails t if any of reports counts "a" or "b", the spans
// these tests publish before their Clear.
func noneBeforeClear(t *testing.T, reports []bucket) {
	t.Helper()
	for _, b := range reports {
		if b.hits["a"] != 0 || b.hits["b"] != 0 {
			t.Fatalf("a span published before Clear was reported in %v", b)
		}
	}
}

// TestClearAfterPauseDiscardsOpenBucket: after a pause from the previous
// bucket's grace past the next boundary, a Clear that the consumer takes
// before its timer drains the inbox first, and the boundary that drain
// crosses closes the previous bucket: it is cleared with the rest, not
// reported (its span was published before the Clear).
func TestClearAfterPauseDiscardsOpenBucket(t *testing.T) {
	d := clearAfterPause(t)
	<-d.c.clearCh // the consumer takes the Clear before its timer
	d.c.clear()
	d.at(d.now)
	noneBeforeClear(t, d.reports(epoch))
	if h := d.a.Health(); h.Cleared != 2 {
		t.Fatalf("cleared %d, want the 2 spans published before Clear", h.Cleared)
	}
}

// TestPausedConsumeTakesPendingClear: as TestClearAfterPauseDiscardsOpenBucket,
// with the consumer reading a batch before it takes the Clear (select
// picked the inbox's wake-up): the boundary the batch crosses would report
// the bucket the Clear must discard, so the Clear is taken first.
func TestPausedConsumeTakesPendingClear(t *testing.T) {
	d := clearAfterPause(t)
	d.c.consume()
	d.publish("c", epoch.Add(25*time.Second)) // after the Clear was taken
	d.at(epoch.Add(45 * time.Second))
	reports := d.reports(epoch)
	noneBeforeClear(t, reports)
	var c uint64
	for _, b := range reports {
		c += b.hits["c"]
	}
	if h := d.a.Health(); h.Cleared != 2 || c != 1 {
		t.Fatalf("cleared %d, reported c %d times; want the 2 spans published before Clear cleared, c once", h.Cleared, c)
	}
}

// TestSteppedBackConsumeTakesPendingClear: as TestPausedConsumeTakesPendingClear,
// with the wall clock stepped back past an interval instead of a pause:
// the realignment the batch's clock read makes would report the open
// buckets, so a pending Clear is taken first.
func TestSteppedBackConsumeTakesPendingClear(t *testing.T) {
	const iv = 10 * time.Second
	d := newDriven(t, iv, epoch.Add(3*time.Second))
	d.publish("a", epoch.Add(4*time.Second))
	d.c.consume()                        // "a" in [0, 10 s)
	d.now = epoch.Add(-60 * time.Second) // an NTP step back
	d.publish("b", epoch.Add(-60*time.Second))
	d.a.Clear()
	d.c.consume()
	d.at(epoch.Add(-30 * time.Second))
	noneBeforeClear(t, d.reports(epoch.Add(-2*time.Minute)))
	if h := d.a.Health(); h.Cleared != 2 || h.ClockStepsBack != 1 {
		t.Fatalf("cleared %d, clock steps back %d; want the 2 spans published before Clear, 1 step", h.Cleared, h.ClockStepsBack)
	}
}

// TestStopStepBackWithPendingClear: at Stop, a clock step back that only
// route's read sees, with a Clear pending, must not make route leave the
// span to a next batch: finish's one-span reads never give it one, and the
// span would count undrained though Stop's ctx never ended. It is
// aggregated.
func TestStopStepBackWithPendingClear(t *testing.T) {
	const iv = 10 * time.Second
	d := newDriven(t, iv, epoch.Add(3*time.Second))
	d.publish("late", epoch.Add(-5*time.Minute)) // late for every open bucket
	d.a.Clear()                                  // pending, not taken by the run loop
	reads := 0
	d.c.clock = func() time.Time {
		if reads++; reads <= 2 { // finish's, then consume's
			return epoch.Add(4 * time.Second)
		}
		return epoch.Add(-60 * time.Second) // route's: stepped back
	}
	d.c.finish()
	if h := d.a.Health(); h.StopUndrained != 0 || h.Counted != 1 || h.ClockStepsBack != 1 {
		t.Fatalf("undrained %d, counted %d, steps back %d; want 0, 1, 1", h.StopUndrained, h.Counted, h.ClockStepsBack)
	}
}

// TestClearDuringClockStepDiscards: as TestClearAfterPauseDiscardsOpenBucket,
// with the wall clock stepped back past an interval when the Clear's drain
// reads it: the realignment reports the open buckets outside a Clear, and
// in one leaves them to be discarded with the rest.
func TestClearDuringClockStepDiscards(t *testing.T) {
	const iv = 10 * time.Second
	d := newDriven(t, iv, epoch.Add(3*time.Second))
	d.publish("a", epoch.Add(4*time.Second))
	d.at(epoch.Add(5 * time.Second)) // "a" in the current bucket
	d.now = epoch.Add(-20 * time.Second)
	d.publish("b", time.Time{}) // in the inbox: the Clear's drain reads the clock
	d.a.Clear()
	<-d.c.clearCh
	d.c.clear()
	noneBeforeClear(t, d.reports(epoch))
	if h := d.a.Health(); h.Cleared != 2 || h.ClockStepsBack != 1 {
		t.Fatalf("cleared %d, clock steps back %d; want the 2 spans published before Clear, 1 step", h.Cleared, h.ClockStepsBack)
	}
}

// TestClearBeforeHaltedStop: a Clear that returned before Stop was called
// is carried out when Stop's context has already ended and the consumer
// is inside a batch (it leaves its loop by the halt check): the spans are
// counted as cleared, not dropped as an unsent report.
func TestClearBeforeHaltedStop(t *testing.T) {
	ag := statstest.New()
	defer ag.Close()
	var stall atomic.Bool
	held, release := make(chan struct{}), make(chan struct{})
	a := newStarted(t, Config{AgentURL: ag.URL(), SendJitter: -1, BucketInterval: time.Hour},
		func(a *Aggregator) {
			a.cons.period = 20 * time.Microsecond
			a.cons.clock = func() time.Time {
				if stall.CompareAndSwap(true, false) {
					close(held)
					<-release
				}
				return time.Now()
			}
		})
	const k = 10
	for i := range k {
		s := raceSpan(i)
		a.Publish(&s)
	}
	waitFor(t, "spans counted", func() bool { return a.Health().Counted == k })
	stall.Store(true)
	// A new key: AddBatch, halted, stops before it (a cache hit would not).
	a.Publish(&Span{Service: "s", Name: "op", Resource: "new-key", SpanKind: "server", Duration: 5})
	<-held // the consumer is in its batch, at its clock read
	a.Clear()
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // Stop's deadline is over before it starts
	stopped := make(chan error, 1)
	go func() { stopped <- a.Stop(ctx) }()
	waitFor(t, "Stop to halt the consumer", func() bool { return a.cons.halt.Load() })
	close(release)
	<-stopped
	h := a.Health()
	checkConservation(t, h)
	if h.Cleared != k {
		t.Fatalf("cleared %d of the %d spans counted before Clear (unsent %d, undrained %d)", h.Cleared, k, h.SpansUnsent, h.StopUndrained)
	}
}

// TestStopUndrainedIsLogged: spans Stop's deadline left in the inbox are
// logged at Stop, with their number, not only counted in Health.
func TestStopUndrainedIsLogged(t *testing.T) {
	const n = 1024
	ag := statstest.New()
	defer ag.Close()
	log, buf := textLogger()
	a, err := New(Config{AgentURL: ag.URL(), SendJitter: -1, MaxAggregates: 1, CardinalityLimits: unlimited,
		InboxSize: n, Logger: log, PeerTagKeys: costlyKeys()})
	if err != nil {
		t.Fatal(err)
	}
	costlyInbox(t, a, n)
	a.cons.halt.Store(true) // as TestStopHaltedBeforeStopSeen: none aggregated
	a.Start()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	_ = a.Stop(ctx)
	h := a.Health()
	if h.StopUndrained != n {
		t.Fatalf("undrained %d, want %d", h.StopUndrained, n)
	}
	var found []string
	for _, l := range buf.lines() {
		if strings.Contains(l, "Stop's deadline came before the consumer") {
			found = append(found, l)
		}
	}
	if len(found) != 1 || !strings.Contains(found[0], "spans="+strconv.Itoa(n)) {
		t.Fatalf("log lines about the undrained spans: %q, want one with spans=%d", found, n)
	}
}

// TestStopDeadlineDropSaysWhy: a report Stop's deadline leaves no time to
// encode is dropped and counted, and Health.LastSendError (which the
// "payloads dropped" log line quotes) says why, rather than staying nil.
// The spans are aggregated first; halt is then set by hand so the
// consumer takes Stop's signal with the deadline already passed.
func TestStopDeadlineDropSaysWhy(t *testing.T) {
	ag := statstest.New()
	defer ag.Close()
	log, buf := textLogger()
	a := newStarted(t, Config{AgentURL: ag.URL(), Logger: log})
	publishN(a, 10, "r")
	deadline := time.Now().Add(10 * time.Second)
	for a.Health().Counted != 10 {
		if time.Now().After(deadline) {
			t.Fatalf("counted %d, want 10", a.Health().Counted)
		}
		time.Sleep(time.Millisecond)
	}
	a.cons.halt.Store(true)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_ = a.Stop(ctx)
	h := a.Health()
	if h.PayloadsDropped != 1 || h.SpansUnsent != 10 {
		t.Fatalf("dropped %d payloads, %d spans; want 1, 10", h.PayloadsDropped, h.SpansUnsent)
	}
	if !errors.Is(h.LastSendError, errStopDeadline) || h.LastSendErrorAt.IsZero() {
		t.Fatalf("LastSendError = %v at %v, want errStopDeadline", h.LastSendError, h.LastSendErrorAt)
	}
	for _, l := range buf.lines() {
		if strings.Contains(l, "payloads dropped") && strings.Contains(l, "last_error=<nil>") {
			t.Fatalf("log line without a cause: %q", l)
		}
	}
	checkConservation(t, h)
}
