// This file holds BenchmarkPublishLatencyOverload: the latency of single
// Publish calls under overload, with each candidate policy for shedding.

package stats

import (
	"log/slog"
	"math/bits"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"
)

// nanotime is the runtime's monotonic clock: one vDSO read, about half of
// time.Now, which reads the wall clock too.
//
//go:linkname nanotime runtime.nanotime
func nanotime() int64

// Overload shape of BenchmarkPublishLatencyOverload: the report.
const (
	overloadPublishers = 4
	overloadPollers    = 4
)

// shedPolicy is one candidate for what a Publish that finds the inbox full
// does besides dropping: set installs it on a (and on the package's yield
// hook) and returns the function that restores the hook.
type shedPolicy struct {
	name string
	set  func(a *Aggregator) (restore func())
}

func yieldEveryPolicy(name string, every uint64) shedPolicy {
	return shedPolicy{name, func(a *Aggregator) func() {
		a.yieldEvery = every
		return func() {}
	}}
}

// budgetPolicy yields on a shed call only once the calling goroutine has
// run for at least budget since it last came back from a yield. The
// goroutine is told apart by its stack, like the striped counters.
func budgetPolicy(name string, budget time.Duration) shedPolicy {
	return shedPolicy{name, func(a *Aggregator) func() {
		var resumed [stripes]struct {
			atomic.Int64
			_ [56]byte
		}
		a.yieldEvery = 1
		saved := yield
		yield = func() {
			var marker byte
			r := &resumed[(uintptr(unsafe.Pointer(&marker))>>13)%stripes]
			t := nanotime()
			last := r.Load()
			if last == 0 {
				r.Store(t)
				return
			}
			if t-last < int64(budget) {
				return
			}
			runtime.Gosched()
			r.Store(nanotime())
		}
		return func() { yield = saved }
	}}
}

// BenchmarkPublishLatencyOverload is the latency of single Publish calls
// under overload: 4 goroutines publish in a tight loop while 4 others poll
// Health, whatever GOMAXPROCS is (the report was on 2 cores), with
// the default Config but for the shed policy each sub-benchmark installs.
// Every call is timed with the runtime's monotonic clock, so a call whose
// goroutine the scheduler preempted mid-call counts the time it waited;
// the "floor" sub-benchmark times a call of an empty function the same
// way under the same load (4 pollers, 4 timed loops), so what is above
// it is what Publish adds. An op is one call; the percentiles are the
// upper edges of log-linear histogram buckets (at most 1/16 wide), and
// over-1ms/op the fraction of calls that took 1 ms or more. It also
// reports spans counted per second (from Health.Counted) and the
// fraction of calls shed. Candidates are sub-benchmarks of one run, so
// read them side by side (-count >= 6, benchstat).
func BenchmarkPublishLatencyOverload(b *testing.B) {
	b.Run("policy=floor", func(b *testing.B) { benchOverload(b, nil) })
	for _, p := range []shedPolicy{
		yieldEveryPolicy("yield-every-8", 8),
		yieldEveryPolicy("no-yield", 0),
		yieldEveryPolicy("yield-every-1024", 1024),
		yieldEveryPolicy("yield-every-4096", 4096),
		budgetPolicy("yield-after-200us", 200*time.Microsecond),
	} {
		b.Run("policy="+p.name, func(b *testing.B) { benchOverload(b, &p) })
	}
}

// benchOverload runs the overload against an aggregator with policy p, or
// times an empty call instead when p is nil.
func benchOverload(b *testing.B, p *shedPolicy) {
	a, done := benchAggregator(b, Config{Logger: slog.New(slog.DiscardHandler)})
	defer done()
	if p != nil {
		defer p.set(a)()
	}
	spans := benchSpans(200)
	call := a.Publish
	if p == nil {
		call = emptyPublish
	}
	stop := make(chan struct{})
	var polls sync.WaitGroup
	for range overloadPollers {
		polls.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				sinkHealth = a.Health()
			}
		})
	}
	hists := make([]latencyHist, overloadPublishers)
	per := max(1, b.N/overloadPublishers)
	var pubs sync.WaitGroup
	h0 := a.Health()
	b.ResetTimer()
	for g := range overloadPublishers {
		pubs.Go(func() {
			h := &hists[g]
			ok := false
			for i := range per {
				t0 := nanotime()
				ok = call(&spans[i%len(spans)])
				h.add(nanotime() - t0)
			}
			sinkBool = ok
		})
	}
	pubs.Wait()
	b.StopTimer()
	h1 := a.Health()
	close(stop)
	polls.Wait()

	var all latencyHist
	for i := range hists {
		all.merge(&hists[i])
	}
	for _, q := range []struct {
		unit string
		q    float64
	}{{"p50-ns", 0.5}, {"p99-ns", 0.99}, {"p99.9-ns", 0.999}, {"p99.99-ns", 0.9999}} {
		b.ReportMetric(float64(all.quantile(q.q)), q.unit)
	}
	b.ReportMetric(float64(all.max), "max-ns")
	b.ReportMetric(float64(all.slow)/float64(all.n), "over-1ms/op")
	if p != nil {
		b.ReportMetric(float64(h1.Counted-h0.Counted)/b.Elapsed().Seconds(), "counted/s")
		if n := h1.Published - h0.Published; n > 0 {
			b.ReportMetric(float64(h1.InboxFull-h0.InboxFull)/float64(n), "shed/op")
		}
	}
}

var sinkHealth Health

//go:noinline
func emptyPublish(*Span) bool { return false }

// latencyHist is a log-linear histogram of nanoseconds: exact below 16,
// then 16 buckets per power of two. slow counts samples of 1 ms or more.
type latencyHist struct {
	n, max, slow int64
	buckets      [16 * 64]int64
}

func (h *latencyHist) add(d int64) {
	v := uint64(max(d, 0))
	i := v
	if v >= 16 {
		s := bits.Len64(v) - 5 // v>>s is in [16, 32)
		i = uint64(s)*16 + v>>s
	}
	h.buckets[i]++
	h.n++
	h.max = max(h.max, d)
	if d >= int64(time.Millisecond) {
		h.slow++
	}
}

func (h *latencyHist) merge(o *latencyHist) {
	for i, c := range o.buckets {
		h.buckets[i] += c
	}
	h.n += o.n
	h.max = max(h.max, o.max)
	h.slow += o.slow
}

// quantile is the upper edge of the bucket holding the q-quantile.
func (h *latencyHist) quantile(q float64) int64 {
	rank := int64(q * float64(h.n))
	var seen int64
	for i, c := range h.buckets {
		seen += c
		if seen > rank {
			if i < 16 {
				return int64(i)
			}
			s := i/16 - 1
			return int64((i&15|16)+1)<<s - 1
		}
	}
	return h.max
}
