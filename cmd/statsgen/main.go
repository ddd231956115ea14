// This file holds statsgen's flags, its producers and the report it
// prints after each interval.

package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/spanstats/spanstats/stats"
	"github.com/spanstats/spanstats/stats/statstest"
)

type options struct {
	rate      float64
	keys      int
	errRatio  float64
	dist      string
	minDur    time.Duration
	maxDur    time.Duration
	producers int
	run       time.Duration
	interval  time.Duration
	agent     string
	top       int
}

func main() {
	var o options
	flag.Float64Var(&o.rate, "rate", 200_000, "spans per second over all producers (0: as fast as possible)")
	flag.IntVar(&o.keys, "keys", 200, "number of distinct span keys (service × resource)")
	flag.Float64Var(&o.errRatio, "errors", 0.2, "fraction of spans that are errors")
	flag.StringVar(&o.dist, "dist", "loguniform", "duration distribution: loguniform, uniform or fixed (-min)")
	flag.DurationVar(&o.minDur, "min", 50*time.Microsecond, "smallest span duration")
	flag.DurationVar(&o.maxDur, "max", 2*time.Second, "largest span duration")
	flag.IntVar(&o.producers, "producers", 8, "publishing goroutines")
	flag.DurationVar(&o.run, "run", 8*time.Second, "how long to publish")
	flag.DurationVar(&o.interval, "interval", 2*time.Second, "stats bucket interval")
	flag.StringVar(&o.agent, "agent", "", "agent URL (http://host:port or unix:///path), or a statsrelay's (unixgram:///path or udp://host:port); empty starts an embedded fake agent")
	flag.IntVar(&o.top, "top", 8, "keys shown per interval")
	flag.Parse()
	if flag.NArg() > 0 {
		// The flag package stops at the first word that is not a flag: the
		// flags after it would be silently ignored.
		fmt.Fprintf(os.Stderr, "statsgen: unexpected arguments %q: statsgen takes flags only (the flags after the first other word are not read)\n", flag.Args())
		os.Exit(2)
	}
	if err := o.validate(); err != nil {
		// 2, as for a flag the flag package refuses: 1 says the run lost spans.
		fmt.Fprintln(os.Stderr, "statsgen:", err)
		os.Exit(2)
	}
	if err := run(o, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "statsgen:", err)
		if errors.Is(err, stats.ErrBadConfig) {
			os.Exit(2) // a setting refused before any span was published
		}
		os.Exit(1)
	}
}

func (o options) validate() error {
	switch {
	case o.keys <= 0:
		return fmt.Errorf("-keys must be > 0, got %d", o.keys)
	case o.keys > maxKeys:
		return fmt.Errorf("-keys must be at most %d, got %d", maxKeys, o.keys)
	case o.producers <= 0:
		return fmt.Errorf("-producers must be > 0, got %d", o.producers)
	case o.producers > maxProducers:
		return fmt.Errorf("-producers must be at most %d, got %d", maxProducers, o.producers)
	case o.run <= 0:
		return fmt.Errorf("-run must be > 0, got %s", o.run)
	case o.top <= 0:
		return fmt.Errorf("-top must be > 0, got %d", o.top)
	case !(o.errRatio >= 0 && o.errRatio <= 1): // NaN too
		return fmt.Errorf("-errors must be in [0, 1], got %g", o.errRatio)
	case o.minDur <= 0:
		return fmt.Errorf("-min must be > 0, got %s", o.minDur)
	case o.dist != "fixed" && o.maxDur < o.minDur: // fixed uses -min alone
		return fmt.Errorf("need -min <= -max, got -min %s -max %s", o.minDur, o.maxDur)
	case !(o.rate == 0 || o.rate >= minRate && o.rate <= maxRate):
		// NaN fails every test; past maxRate the pacing's per-step budget
		// would no longer count down (1e30 - 1 == 1e30).
		return fmt.Errorf("-rate must be 0 (as fast as possible) or in [%g, %g]", minRate, maxRate)
	case o.interval < stats.MinBucketInterval || o.interval > stats.MaxBucketInterval:
		return fmt.Errorf("-interval %s: want %s..%s", o.interval, stats.MinBucketInterval, stats.MaxBucketInterval)
	case o.dist != "loguniform" && o.dist != "uniform" && o.dist != "fixed":
		return fmt.Errorf("unknown -dist %q", o.dist)
	}
	return nil
}

// stopTimeout bounds Stop: the wait for the last interval's send.
const stopTimeout = 10 * time.Second

// settleWait bounds how long a report waits for the SDK to count the
// answers to the requests the embedded agent has received.
const settleWait = 500 * time.Millisecond

// maxRate bounds -rate: far beyond what any machine publishes, and low
// enough that the pacing counts its spans one by one. minRate (a span
// every eleven days) keeps the pacing's times finite: below about
// 1e-308 producers/rate is +Inf, and the next span's wait NaN.
const (
	maxRate = 1e9
	minRate = 1e-6
)

// maxKeys and maxProducers bound what the run allocates up front (a
// resource string per key, a goroutine per producer): a mistyped count
// must not end in an out-of-memory kill. maxKeys is far past the table
// cap and the resource budget, past which more keys only collapse alike.
const (
	maxKeys      = 1_000_000
	maxProducers = 10_000
)

func run(o options, out io.Writer) error {
	if err := o.validate(); err != nil {
		return err
	}
	url := o.agent
	var fake *statstest.Agent
	if url == "" {
		fake = statstest.New()
		defer fake.Close()
		url = fake.URL()
		fmt.Fprintf(out, "embedded fake agent on %s\n", url)
	}
	agg, err := stats.New(stats.Config{
		AgentURL: url, Env: "statsgen", Service: "statsgen", Version: "dev",
		TracerVersion: "statsgen", BucketInterval: o.interval,
	})
	if err != nil {
		// New names the Config field (its documented contract); the
		// operator gave -agent, not AgentURL. The value is New's to quote:
		// it hides a password the URL holds.
		if o.agent != "" && strings.Contains(err.Error(), "AgentURL") {
			err = fmt.Errorf("-agent: %w", err)
		}
		return err
	}
	agg.Start()

	// From the first signal on, and once publishing is over, a signal ends
	// the process at once (exit status 1), without waiting for Stop. That
	// is a Notify of its own, not the handling NotifyContext's stop leaves:
	// for a process started with SIGINT ignored (a script's background
	// job), that is "ignore", and a kill -INT while Stop waits on a silent
	// agent was swallowed, though the first one stopped publishing.
	halt, halted := make(chan os.Signal, 1), make(chan struct{})
	defer close(halted)
	defer signal.Stop(halt)
	haltOnSignal := sync.OnceFunc(func() {
		signal.Notify(halt, os.Interrupt, syscall.SIGTERM)
		go func() {
			select {
			case s := <-halt:
				fmt.Fprintf(os.Stderr, "statsgen: %v while stopping: exiting without waiting for the last interval's send\n", s)
				os.Exit(1)
			case <-halted:
			}
		}()
	})
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	// Watched before NotifyContext lets go: no signal falls between.
	context.AfterFunc(ctx, func() { haltOnSignal(); cancel() })
	ctx, cancelRun := context.WithTimeout(ctx, o.run)
	defer cancelRun()
	// %.4g: -errors 0.001 is "0.1%", not "0%"; 0.07 is "7%", not its float's 7.000000000000001.
	durations := fmt.Sprintf("%s durations %s..%s", o.dist, o.minDur, o.maxDur)
	if o.dist == "fixed" {
		durations = fmt.Sprintf("durations all %s", o.minDur)
	}
	fmt.Fprintf(out, "publishing for %s: %d producers, %d keys, %.4g%% errors, %s, rate %s\n",
		o.run, o.producers, o.keys, 100*o.errRatio, durations, rateString(o.rate))
	fmt.Fprintf(out, "interval %s: stats are aggregated per %s bucket and sent once each bucket closes\n", o.interval, o.interval)
	st := &status{out: out, last: time.Now()}

	resources := resourceNames(o.keys) // built once: the producers share it, read-only
	var wg sync.WaitGroup
	begin := time.Now() // the producers' common schedule starts here
	for p := range o.producers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			produce(ctx, agg, o, p, begin, resources)
		}()
	}
	printed := 0
	report := func() {
		if fake == nil {
			st.line(agg.Health())
			return
		}
		// The fake agent holds a request before its answer reaches the
		// SDK: give the SDK a moment to count what is about to be shown,
		// or the line above "payload #1" says "payloads sent 0".
		reqs := fake.Requests()
		h := agg.Health()
		for deadline := time.Now().Add(settleWait); h.PayloadsSent+h.PayloadsFailed < uint64(len(reqs)) && time.Now().Before(deadline); h = agg.Health() {
			time.Sleep(time.Millisecond)
		}
		st.line(h)
		for ; printed < len(reqs); printed++ {
			statstest.WriteTop(out, reqs[printed], o.top)
		}
	}
	var notify <-chan struct{}
	if fake != nil {
		notify = fake.Notify()
	}
	ticker := time.NewTicker(o.interval)
	defer ticker.Stop()
loop:
	for {
		select {
		case <-ctx.Done():
			break loop
		case <-notify:
			report()
		case <-ticker.C:
			if fake == nil {
				report()
			}
		}
	}
	wg.Wait()
	st.stopped = time.Now() // the rate of the last line ends here, not after Stop
	// Publishing is over, by -run or by a signal: the graceful stop is
	// under way, so from here a signal ends the process at once. Without
	// this, a Ctrl-C while Stop waits (up to 10 s) on an agent that does
	// not answer was taken as the first signal and silently swallowed.
	haltOnSignal()
	cancel()
	fmt.Fprintf(out, "\nstopping: sending the last interval (at most %s; a signal ends the wait)\n", stopTimeout)
	stopCtx, cancelStop := context.WithTimeout(context.Background(), stopTimeout)
	defer cancelStop()
	stopErr := agg.Stop(stopCtx)
	report()
	h := agg.Health()
	fmt.Fprintf(out, "\ndone: published %d = counted %d + ineligible %d + inbox-full %d + after-stop %d + agent-off %d + aggregate-dropped %d + stop-undrained %d\n",
		h.Published, h.Counted, h.Ineligible, h.InboxFull, h.AfterStop, h.AgentOffSpans, h.AggregateDropped, h.StopUndrained)
	fmt.Fprintf(out, "      counted %d = sent %d + unsent %d + cleared %d; payloads sent %d failed %d dropped %d, %d bytes\n",
		h.Counted, h.SpansSent, h.SpansUnsent, h.Cleared, h.PayloadsSent, h.PayloadsFailed, h.PayloadsDropped, h.BytesSent)
	if h.LastSendError != nil {
		fmt.Fprintf(out, "last send error (%s): %v\n", h.LastSendErrorAt.Format("15:04:05.000"), h.LastSendError)
	}
	if in := h.Counted + h.Ineligible + h.InboxFull + h.AfterStop + h.AgentOffSpans + h.AggregateDropped + h.StopUndrained; in != h.Published {
		return fmt.Errorf("published %d spans, accounted for %d", h.Published, in)
	}
	if out := h.SpansSent + h.SpansUnsent + h.Cleared; out != h.Counted && stopErr == nil {
		return fmt.Errorf("counted %d spans, sent, unsent or cleared %d", h.Counted, out)
	}
	switch {
	case h.AgentOffSpans > 0:
		return fmt.Errorf("the agent does not accept client stats: %d spans not aggregated", h.AgentOffSpans)
	case h.SpansUnsent > 0:
		return fmt.Errorf("%d of %d counted spans were not delivered (last error: %v)", h.SpansUnsent, h.Counted, h.LastSendError)
	}
	if fake != nil {
		_, hits := statstest.Sum(fake.Requests())
		fmt.Fprintf(out, "agent decoded %d hits (counted %d)\n", hits, h.Counted)
		if hits != h.Counted {
			return fmt.Errorf("agent decoded %d hits but %d were counted", hits, h.Counted)
		}
	}
	return stopErr
}

// status prints one line per report: the rate since the previous line,
// the counters, why sends fail, and a one-line legend the first time
// something that needs one appears.
type status struct {
	out                          io.Writer
	last                         time.Time
	stopped                      time.Time // publishing ended (zero: not yet)
	published                    uint64
	toldInboxFull, toldCollapsed bool
}

func (st *status) line(h stats.Health) {
	now := time.Now()
	end := now
	if !st.stopped.IsZero() && st.stopped.After(st.last) && st.stopped.Before(now) {
		end = st.stopped // the spans since the last line were published by then
	}
	rate := float64(h.Published-st.published) / end.Sub(st.last).Seconds()
	st.last, st.published = now, h.Published
	// Collapsed and overflowed apart: a span over a budget that also finds
	// the table full is in both, and their sum would count it twice.
	fmt.Fprintf(st.out, "\n%.0f spans/s  published %d counted %d inbox-full %d agent-off %d collapsed %d overflowed %d  payloads sent %d failed %d dropped %d\n",
		rate, h.Published, h.Counted, h.InboxFull, h.AgentOffSpans, h.CollapsedSpans, h.Overflowed, h.PayloadsSent, h.PayloadsFailed, h.PayloadsDropped)
	if h.PayloadsFailed+h.PayloadsDropped > 0 && h.LastSendError != nil {
		fmt.Fprintf(st.out, "  last send error (%s): %v\n", h.LastSendErrorAt.Format("15:04:05.000"), h.LastSendError)
	}
	if h.InboxFull > 0 && !st.toldInboxFull {
		st.toldInboxFull = true
		fmt.Fprintln(st.out, "  legend: inbox-full = spans dropped because the aggregating goroutine fell behind; Publish never waits, it counts the drop")
	}
	if h.CollapsedSpans+h.Overflowed > 0 && !st.toldCollapsed {
		st.toldCollapsed = true
		fmt.Fprintln(st.out, "  legend: tracer_blocked_value = a label over its per-interval cardinality budget (or the table full); the span still counts, under that value")
	}
}

func rateString(r float64) string {
	if r == 0 {
		return "unlimited"
	}
	// Every digit it has: %.0f would show -rate 0.5 as "0/s".
	return strconv.FormatFloat(r, 'f', -1, 64) + "/s"
}

// services are the span services; key k is services[k%len(services)]'s.
var services = []string{"web-store", "checkout", "users-api", "search"}

// resourceNames is key k's resource for each of the keys.
func resourceNames(keys int) []string {
	resources := make([]string, keys)
	for i := range resources {
		resources[i] = fmt.Sprintf("GET /api/v1/%s/%d", services[i%len(services)], i)
	}
	return resources
}

// produce publishes spans until ctx ends, pacing itself to its share of the
// rate, waking at most once a millisecond (or as fast as it can with -rate 0).
func produce(ctx context.Context, agg *stats.Aggregator, o options, p int, begin time.Time, resources []string) {
	rng := rand.New(rand.NewPCG(uint64(p), 42))
	kinds := []string{"server", "server", "client", "consumer"}
	peers := make([][]string, len(services))
	for i := range peers {
		peers[i] = []string{"peer.service:" + services[i]}
	}
	lnMin, lnMax := math.Log(float64(o.minDur)), math.Log(float64(o.maxDur))
	var s stats.Span
	publish := func() {
		k := rng.IntN(o.keys)
		kind := kinds[k%len(kinds)]
		s = stats.Span{
			Service: services[k%len(services)], Name: "http.request", Resource: resources[k],
			Type: "web", SpanKind: kind, HTTPStatusCode: 200, HTTPMethod: "GET",
			TopLevel: kind == "server", TraceRoot: kind == "server",
		}
		if kind != "server" {
			s.PeerTags = peers[k%len(peers)]
		}
		if rng.Float64() < o.errRatio {
			s.Error = true
		}
		switch o.dist {
		case "loguniform":
			// Clamped: exp(log(min)) can round to a nanosecond under -min.
			s.Duration = min(max(int64(math.Exp(lnMin+rng.Float64()*(lnMax-lnMin))), int64(o.minDur)), int64(o.maxDur))
		case "uniform":
			s.Duration = int64(o.minDur) + rng.Int64N(int64(o.maxDur-o.minDur)+1)
		default:
			s.Duration = int64(o.minDur)
		}
		agg.Publish(&s)
	}
	if o.rate == 0 {
		for ctx.Err() == nil {
			for range 1024 {
				publish()
			}
		}
		return
	}
	// One schedule for all producers: span i is due at begin + i/rate and
	// is producer i%producers's, so the total published by any time is the
	// rate's, whatever the rate's share per producer (a fraction of a span
	// per second included). A producer that falls behind (its setup, a
	// pause) catches up at once; it wakes at most once a millisecond.
	const step = time.Millisecond
	every := float64(o.producers) / o.rate // seconds between two of this producer's spans
	first := float64(p) / o.rate
	timer := time.NewTimer(0)
	defer timer.Stop()
	for j := 0; ; {
		for now := time.Since(begin).Seconds(); first+float64(j)*every <= now; j++ {
			// A rate it cannot keep up with makes each catch-up longer
			// than the last: the end of the run must not wait for it.
			if j%1024 == 0 && ctx.Err() != nil {
				return
			}
			publish()
		}
		// At most an hour: a wait of days (a rate near minRate) is
		// slept an hour at a time.
		wait := time.Duration(min(first+float64(j)*every-time.Since(begin).Seconds(), 3600) * float64(time.Second))
		timer.Reset(max(wait, step))
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		}
	}
}
