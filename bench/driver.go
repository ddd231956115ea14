// This file holds Driver, an implementation under test set up for one
// workload, and Run, which measures drivers at saturation.

package bench

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/spanstats/spanstats/internal/cputime"
	"github.com/spanstats/spanstats/stats"
)

// Driver is one implementation under test, set up for one workload.
// Publish is called from many goroutines at once; Counts at any time; Stop
// and Close once each, in that order, after every Publish returned.
type Driver interface {
	// Publish hands s, the span at position i of the workload, to the
	// implementation the way a tracer does when a one-span trace finishes.
	// s is valid only during the call.
	Publish(i int, s *stats.Span)
	// Stop drains what is still queued and does the final flush.
	Stop() error
	// Counts is the fate of the spans published so far; after Stop, of
	// every span.
	Counts() Counts
	// Close releases what the driver set up around the implementation.
	Close()
}

// Counts says what became of the published spans.
type Counts struct {
	Published  uint64 // spans handed to Publish, as far as the driver knows
	Counted    uint64 // aggregated into an entry (including overflow)
	Shed       uint64 // dropped because the queue to the aggregator was full
	Ineligible uint64 // not counted by rule
	Collapsed  uint64 // counted with a label replaced by tracer_blocked_value
	Overflowed uint64 // counted in the overflow entry at the table cap
	Lost       uint64 // anything else: must stay 0
}

// OpenFunc sets up a driver for w.
type OpenFunc func(w *Workload) (Driver, error)

// Accounted is the number of spans whose fate is known.
func (c Counts) Accounted() uint64 { return c.Counted + c.Shed + c.Ineligible + c.Lost }

// Sub is c minus the earlier counts o.
func (c Counts) Sub(o Counts) Counts {
	return Counts{
		Published: c.Published - o.Published, Counted: c.Counted - o.Counted, Shed: c.Shed - o.Shed,
		Ineligible: c.Ineligible - o.Ineligible, Collapsed: c.Collapsed - o.Collapsed,
		Overflowed: c.Overflowed - o.Overflowed, Lost: c.Lost - o.Lost,
	}
}

// WarmupSpans is how many spans Run publishes (from one goroutine, untimed)
// before measuring, like JMH's warm-up iterations on the same aggregator: the
// benchmarks measure the steady state — keys already in the table, sketches
// grown, the table at its cap under high cardinality — not the first
// seconds of a process.
const WarmupSpans = 1 << 16

// warmUp publishes the first WarmupSpans spans of w and waits until d has
// dealt with all of them. It publishes warmChunk spans at a time and waits
// for d to take them before the next: published flat out from one
// goroutine, most of them were shed at a full inbox, and the warm-up then
// left the table short of what it was there to fill.
func warmUp(tb testing.TB, w *Workload, d Driver) Counts {
	n := min(w.Len(), WarmupSpans)
	p := w.Producer(0)
	for done := 0; done < n; {
		k := min(warmChunk, n-done)
		for range k {
			d.Publish(p.Next())
		}
		tell(d, uint64(k))
		done += k
		awaitAccounted(tb, d, uint64(done), backoff())
	}
	c := d.Counts()
	if a := c.Accounted(); a != uint64(n) {
		tb.Fatalf("published %d warm-up spans, the driver accounts for %d: %+v", n, a, c)
	}
	return c
}

// warmChunk is how many spans warmUp publishes before it waits: three
// quarters of the SDK's default inbox, so that it fits, and past the
// inbox's mark at which the consumer is woken (half), so that the wait is
// short.
const warmChunk = stats.DefaultInboxSize * 3 / 4

// Run publishes w through the driver open returns from Producers goroutines
// (b.SetParallelism(ceil(Producers/GOMAXPROCS)) and b.RunParallel), one span
// per b.N, after an untimed warm-up (see WarmupSpans), then stops it inside
// the timed region. Besides ns/op and allocs/op it reports:
//
//	counted/s       spans counted per second of wall time
//	cpu-ns/counted  process user+sys CPU over the timed region per counted span
//	cpu-ns/op       the same CPU per published span (shed ones included)
//	allocs/counted  heap allocations over the timed region per counted span
//	shed/op         fraction of published spans shed at the inbox
//	collapsed/op    fraction counted with a label over its cardinality budget
//	overflow/op     fraction counted in the overflow entry
func Run(b *testing.B, w *Workload, open OpenFunc) {
	d, err := open(w)
	if err != nil {
		b.Fatal(err)
	}
	defer d.Close()
	procs := runtime.GOMAXPROCS(0)
	// RunParallel starts parallelism × GOMAXPROCS goroutines: exactly
	// Producers only where GOMAXPROCS divides it; elsewhere the extra
	// goroutines would replay other producers' walks in lockstep.
	if par := (Producers + procs - 1) / procs; par*procs != Producers {
		b.Fatalf("GOMAXPROCS %d: RunParallel would start %d producers, not %d; run with -cpu 1, 2, 4 or 8", procs, par*procs, Producers)
	}
	b.SetParallelism(Producers / procs)
	b.ReportAllocs()

	c0 := warmUp(b, w, d)
	var next atomic.Int64
	var ms0, ms1 runtime.MemStats
	runtime.GC() // do not charge the setup's garbage to the run
	runtime.ReadMemStats(&ms0)
	cpu0 := cputime.Process()
	b.ResetTimer()
	start := time.Now()
	b.RunParallel(func(pb *testing.PB) {
		p := w.Producer(int(next.Add(1) - 1))
		for pb.Next() {
			d.Publish(p.Next())
		}
	})
	stopErr := d.Stop()
	elapsed := time.Since(start)
	cpu := cputime.Process() - cpu0
	b.StopTimer()
	runtime.ReadMemStats(&ms1)
	if stopErr != nil {
		b.Fatalf("stop: %v", stopErr)
	}

	c := d.Counts().Sub(c0)
	if c.Accounted() != uint64(b.N) || c.Lost != 0 {
		b.Errorf("published b.N = %d spans; the driver accounts for %d, lost %d: %+v", b.N, c.Accounted(), c.Lost, c)
	}
	if c.Counted > 0 {
		b.ReportMetric(float64(c.Counted)/elapsed.Seconds(), "counted/s")
		b.ReportMetric(float64(cpu.Nanoseconds())/float64(c.Counted), "cpu-ns/counted")
		b.ReportMetric(float64(ms1.Mallocs-ms0.Mallocs)/float64(c.Counted), "allocs/counted")
	}
	if b.N > 0 {
		p := float64(b.N)
		b.ReportMetric(float64(cpu.Nanoseconds())/p, "cpu-ns/op")
		b.ReportMetric(float64(c.Shed)/p, "shed/op")
		b.ReportMetric(float64(c.Collapsed)/p, "collapsed/op")
		b.ReportMetric(float64(c.Overflowed)/p, "overflow/op")
	}
}

// abRounds is how many rounds runAB alternates its implementations.
const abRounds = 6

// abSide is one implementation runAB compares: its name in the metrics,
// and how to open it.
type abSide struct {
	name string
	open OpenFunc
}

// runAB publishes b.N spans of w through each of two drivers, first's and
// second's, in abRounds alternating rounds of b.N/abRounds spans from
// Producers goroutines; each round ends when its driver has accounted for
// every span (the inbox drained), so a round's wall time is what its spans
// cost. It reports, for each, "counted/s-<name>" and "ns/call-<name>" (wall
// time per Publish call over its rounds), and "counted-ratio" (first's
// counted/s ÷ second's). Alternating rounds in one process is what makes a
// ratio of two saturated runs trustworthy on a host whose speed drifts.
func runAB(b *testing.B, w *Workload, first, second abSide) {
	type side struct {
		abSide
		d       Driver
		walks   []*Producer
		base    Counts
		elapsed time.Duration
		calls   int
	}
	b.ReportAllocs()
	sides := []*side{{abSide: first}, {abSide: second}}
	for _, s := range sides {
		d, err := s.open(w)
		if err != nil {
			b.Fatal(err)
		}
		defer d.Close()
		s.d = d
		s.base = warmUp(b, w, d)
		s.walks = allWalks(w)
	}
	b.ResetTimer()
	for r := range abRounds {
		n := share(b.N, abRounds, r)
		for _, s := range sides {
			s.elapsed += publishRound(b, s.d, s.walks, n)
			s.calls += n
		}
	}
	b.StopTimer()
	rate := make([]float64, len(sides))
	for i, s := range sides {
		if err := s.d.Stop(); err != nil {
			b.Fatalf("%s: stop: %v", s.name, err)
		}
		cnt := s.d.Counts().Sub(s.base)
		if cnt.Accounted() != uint64(s.calls) || cnt.Lost != 0 {
			b.Errorf("%s: published %d spans; the driver accounts for %d, lost %d: %+v", s.name, s.calls, cnt.Accounted(), cnt.Lost, cnt)
		}
		if s.elapsed > 0 && s.calls > 0 {
			rate[i] = float64(cnt.Counted) / s.elapsed.Seconds()
			b.ReportMetric(rate[i], "counted/s-"+s.name)
			b.ReportMetric(float64(s.elapsed.Nanoseconds())/float64(s.calls), "ns/call-"+s.name)
		}
	}
	if rate[1] > 0 {
		b.ReportMetric(rate[0]/rate[1], "counted-ratio")
	}
}

// publishRound publishes n spans through d from one goroutine per walk and
// returns the wall time until d accounted for all of them.
func publishRound(b *testing.B, d Driver, walks []*Producer, n int) time.Duration {
	before := d.Counts().Accounted()
	start := time.Now()
	var wg sync.WaitGroup
	for i, p := range walks {
		k := share(n, len(walks), i)
		wg.Go(func() {
			for range k {
				d.Publish(p.Next())
			}
		})
	}
	wg.Wait()
	awaitAccounted(b, d, before+uint64(n), runtime.Gosched)
	return time.Since(start)
}

// share is the i-th of parts near-equal shares of n (the first n%parts
// get one more).
func share(n, parts, i int) int {
	k := n / parts
	if i < n%parts {
		k++
	}
	return k
}

// allWalks returns the walks of w of all Producers.
func allWalks(w *Workload) []*Producer {
	p := make([]*Producer, Producers)
	for i := range p {
		p[i] = w.Producer(i)
	}
	return p
}

// awaitAccounted waits, calling pause between looks, until d accounts for
// want spans in all; it fails the benchmark after a minute.
func awaitAccounted(tb testing.TB, d Driver, want uint64, pause func()) {
	deadline := time.Now().Add(time.Minute)
	for d.Counts().Accounted() < want {
		if time.Now().After(deadline) {
			tb.Fatalf("spans still not accounted for after a minute: %+v", d.Counts())
		}
		pause()
	}
}

// SDK drives this module's stats.Aggregator: default configuration (table
// cap, inbox, interval) reporting to a loopback Agent.
type SDK struct {
	agg   *stats.Aggregator
	agent *Agent
	join  *stats.PeerTagJoiner // non-nil: Workload.JoinsPeerTags
}

// OpenSDK returns an OpenFunc for the SDK whose agent advertises
// peerTagKeys (DefaultPeerTagKeys when nil).
func OpenSDK(peerTagKeys []string) OpenFunc {
	return func(w *Workload) (Driver, error) { return NewSDK(w, peerTagKeys) }
}

// DeepInbox is the Config.InboxSize that BenchmarkInboxOverload and
// bench/peer's BenchmarkPacedInbox weigh against the default.
const DeepInbox = 4 * stats.DefaultInboxSize

// OpenSDKConfig is OpenSDK with cfg's knobs instead of the defaults (its
// agent URL and identity are set by the driver).
func OpenSDKConfig(cfg stats.Config, peerTagKeys []string) OpenFunc {
	return func(w *Workload) (Driver, error) {
		d, err := NewSDKConfig(cfg, peerTagKeys)
		if err == nil {
			d.join = w.joiner()
		}
		return d, err
	}
}

// NewSDK starts an aggregator and its loopback agent. Any workload goes;
// for one whose tracer joins its peer tags per span, Publish does too.
func NewSDK(w *Workload, peerTagKeys []string) (*SDK, error) {
	d, err := NewSDKConfig(stats.Config{}, peerTagKeys)
	if err == nil {
		d.join = w.joiner()
	}
	return d, err
}

// NewSDKConfig is NewSDK with cfg's knobs instead of the defaults (its agent
// URL and identity are set here).
func NewSDKConfig(cfg stats.Config, peerTagKeys []string) (*SDK, error) {
	agent := NewAgent(peerTagKeys)
	cfg.AgentURL, cfg.Env, cfg.Service, cfg.Version = agent.URL(), "bench", "bench", "1.0.0"
	cfg.Hostname, cfg.TracerVersion = "bench-host", "bench"
	agg, err := stats.New(cfg)
	if err != nil {
		agent.Close()
		return nil, err
	}
	agg.Start()
	return &SDK{agg: agg, agent: agent}, nil
}

// Publish implements Driver. When the workload's tracer joins its peer
// tags per span, they are joined here, in place (the producer's own), with
// a stats.PeerTagJoiner, as a tracer would.
func (d *SDK) Publish(_ int, s *stats.Span) {
	if d.join != nil {
		JoinPeerTags(d.join, s.PeerTags)
	}
	d.agg.Publish(s)
}

// Aggregator is the aggregator under test.
func (d *SDK) Aggregator() *stats.Aggregator { return d.agg }

// Stop implements Driver: it drains the inbox and sends the final report.
func (d *SDK) Stop() error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := d.agg.Stop(ctx); err != nil {
		return err
	}
	if h := d.agg.Health(); h.PayloadsDropped > 0 {
		return fmt.Errorf("%d payloads (%d spans) not delivered to the loopback agent", h.PayloadsDropped, h.SpansUnsent)
	}
	return nil
}

// Counts implements Driver.
func (d *SDK) Counts() Counts {
	h := d.agg.Health()
	c := Counts{
		Published: h.Published, Counted: h.Counted, Shed: h.InboxFull, Ineligible: h.Ineligible,
		Collapsed: h.CollapsedSpans, Overflowed: h.Overflowed,
	}
	// Every drop of Health's identity but Pending, which is not yet a fate.
	c.Lost = h.AfterStop + h.AggregateDropped + h.AgentOffSpans + h.StopUndrained
	return c
}

// Close implements Driver.
func (d *SDK) Close() { d.agent.Close() }
