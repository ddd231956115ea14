// This file is -demo: a fake agent, the relay and four SDK aggregators (two
// on the Unix socket, two on UDP) publishing synthetic spans for a few
// intervals, printing what the agent receives and the relay's counters.

package main

import (
	"context"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/spanstats/spanstats/internal/relay"
	"github.com/spanstats/spanstats/internal/sockdir"
	"github.com/spanstats/spanstats/stats"
	"github.com/spanstats/spanstats/stats/statstest"
)

// demoRate is the spans per second each demo aggregator publishes.
const demoRate = 20_000

// runDemo runs the demo for the given number of intervals.
func runDemo(ctx context.Context, out io.Writer, demoInterval time.Duration, demoIntervals int) error {
	ag := statstest.New()
	defer ag.Close()
	// $TMPDIR, unless too long for the socket's path (macOS's is ~50
	// bytes of the 103 a path holds; some CI runners' longer): then /tmp.
	dir, err := sockdir.MkdirTemp("statsrelay-demo")
	if err != nil {
		return fmt.Errorf("-demo: a directory for its socket in $TMPDIR (%s): %w", os.TempDir(), err)
	}
	defer os.RemoveAll(dir)
	defer atForcedExit(func() { _ = os.RemoveAll(dir) })() // a second Ctrl-C too
	// statsrelay's own default grace: the senders' jitter (up to a fifth
	// of the interval) and a margin, so that no sender's report misses
	// its window's forward and a bucket shows in two requests.
	srv, err := relay.NewServer(relay.ServerConfig{
		UnixPath: filepath.Join(dir, "relay.sock"), UDPAddr: "127.0.0.1:0",
		AgentURL: ag.URL(), Interval: demoInterval, Grace: defaultGrace(demoInterval),
	})
	if err != nil {
		return err
	}
	relayCtx, stopRelay := context.WithCancel(context.Background())
	defer stopRelay()
	relayDone := make(chan error, 1)
	go func() { relayDone <- srv.Run(relayCtx, 5*time.Second) }()
	fmt.Fprintf(out, "fake agent %s; relay on unixgram://%s and udp://%s; %d aggregators (in this process) offering %d spans/s each for %d intervals of %s\n",
		ag.URL(), srv.Addr(relay.Unix), srv.Addr(relay.UDP), 4, demoRate, demoIntervals, demoInterval)

	urls := []string{"unixgram://" + srv.Addr(relay.Unix), "unixgram://" + srv.Addr(relay.Unix),
		"udp://" + srv.Addr(relay.UDP), "udp://" + srv.Addr(relay.UDP)}
	pubCtx, stopPub := context.WithTimeout(ctx, time.Duration(demoIntervals)*demoInterval)
	defer stopPub()
	var wg sync.WaitGroup
	var published [4]uint64
	began := time.Now()
	aggs := make([]*stats.Aggregator, len(urls))
	for i, u := range urls {
		a, err := stats.New(stats.Config{AgentURL: u, Env: "demo", Service: "web-store", Version: "1.0",
			TracerVersion: "statsrelay-demo", BucketInterval: demoInterval})
		if err != nil {
			return err
		}
		a.Start()
		aggs[i] = a
		wg.Go(func() { published[i] = publishDemo(pubCtx, a, i) })
	}

	printed := 0
	tick := time.NewTicker(demoInterval / 4)
	defer tick.Stop()
	show := func() {
		reqs := ag.Requests()
		if printed == len(reqs) {
			return
		}
		for ; printed < len(reqs); printed++ {
			statstest.WriteTop(out, reqs[printed], 6)
		}
		printCounters(out, srv.Relay().Stats())
	}
	for pubCtx.Err() == nil {
		select {
		case <-pubCtx.Done():
		case <-tick.C:
			show()
		}
	}
	wg.Wait()
	took := time.Since(began)
	// The last window closed while publishing is forwarded a grace after
	// its boundary: shown before the aggregators stop, it gets a counter
	// line of its own, apart from the partial bucket Stop sends.
	settle := time.Now().Truncate(demoInterval).Add(defaultGrace(demoInterval) + demoInterval/4)
	for ctx.Err() == nil && time.Now().Before(settle) {
		select {
		case <-ctx.Done():
		case <-tick.C:
		}
	}
	show()
	var total uint64
	var sdk stats.Health // summed over the aggregators
	var stopErr error
	for i, a := range aggs {
		if err := a.Stop(context.Background()); err != nil {
			fmt.Fprintf(out, "aggregator %d: stop: %v\n", i, err)
			stopErr = err
		}
		total += published[i]
		h := a.Health()
		sdk.Published += h.Published
		sdk.Counted += h.Counted
		sdk.InboxFull += h.InboxFull
		sdk.SpansSent += h.SpansSent
		sdk.SpansUnsent += h.SpansUnsent
	}
	stopRelay()
	if err := <-relayDone; err != nil {
		return err
	}
	show()
	st := srv.Relay().Stats()
	_, hits := statstest.Sum(ag.Requests())
	var dropped uint64
	for _, v := range st.SpansDropped {
		dropped += v
	}
	fmt.Fprintf(out, "\n4 aggregators: Publish called %d times in %s (%.0f spans/s; offered %d/s), counted %d, inbox full %d; sent to the relay %d, unsent %d\n",
		total, took.Round(time.Millisecond), float64(total)/took.Seconds(), 4*demoRate,
		sdk.Counted, sdk.InboxFull, sdk.SpansSent, sdk.SpansUnsent)
	fmt.Fprintf(out, "sent %d spans; relay received %d = forwarded %d + dropped %d + pending %d; agent decoded %d hits in %d requests (from %d datagrams)\n",
		sdk.SpansSent, st.SpansReceived, st.SpansForwarded, dropped, st.SpansPending, hits, len(ag.Requests()),
		st.Datagrams[relay.Unix]+st.Datagrams[relay.UDP])
	// The demo's claim is that nothing is lost: it fails when anything was.
	switch {
	case stopErr != nil:
		return fmt.Errorf("demo: an aggregator did not stop cleanly: %w", stopErr)
	case sdk.Published != total || sdk.Counted+sdk.InboxFull != total:
		return fmt.Errorf("demo: %d Publish calls, the aggregators say published %d = counted %d + inbox full %d",
			total, sdk.Published, sdk.Counted, sdk.InboxFull)
	case sdk.SpansUnsent != 0 || sdk.SpansSent != sdk.Counted:
		return fmt.Errorf("demo: the aggregators counted %d spans but sent %d (unsent %d)", sdk.Counted, sdk.SpansSent, sdk.SpansUnsent)
	case st.SpansReceived != sdk.SpansSent || dropped != 0 || st.SpansPending != 0:
		return fmt.Errorf("demo: sent %d spans, the relay received %d, dropped %d, holds %d", sdk.SpansSent, st.SpansReceived, dropped, st.SpansPending)
	case hits != st.SpansForwarded:
		return fmt.Errorf("demo: the relay forwarded %d spans, the agent decoded %d", st.SpansForwarded, hits)
	}
	return nil
}

// publishDemo publishes demoRate spans a second over a few routes until ctx
// ends, and returns how many times it called Publish. Paced on the time
// since it began, not on ticks, which a busy host skips: it catches up on
// up to 100 ms it fell behind.
func publishDemo(ctx context.Context, a *stats.Aggregator, seed int) uint64 {
	rng := rand.New(rand.NewPCG(uint64(seed), 7))
	routes := []string{"GET /", "GET /cart", "POST /cart", "GET /product/:id", "POST /checkout", "GET /search"}
	var n, calls uint64 // spans due so far that were handled; Publish calls
	began := time.Now()
	t := time.NewTicker(time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return calls
		case <-t.C:
		}
		due := uint64(time.Since(began).Seconds() * demoRate)
		if lag := uint64(demoRate / 10); due > n+lag {
			n = due - lag // more than 100 ms behind: that much is given up
		}
		for ; n < due; n++ {
			r := routes[rng.IntN(len(routes))]
			method, _, _ := strings.Cut(r, " ")
			d := int64(float64(200*time.Microsecond) * (1 + rng.ExpFloat64()*5))
			sp := &stats.Span{Service: "web-store", Name: "http.request", Resource: r, SpanKind: "server",
				HTTPMethod: method, HTTPStatusCode: 200, Duration: d, TopLevel: true, Error: rng.IntN(50) == 0}
			a.Publish(sp)
			calls++
		}
	}
}

func printCounters(out io.Writer, st relay.Stats) {
	rejected := map[string]uint64{}
	for r, n := range st.Rejected {
		rejected[relay.Reason(r).String()] = n
	}
	// late: spans that came after their window's forward, sent with the
	// next round's request (a bucket then shows in two requests).
	fmt.Fprintf(out, "relay: datagrams unix %d udp %d, rejected %s, spans received %d forwarded %d (late %d) pending %d dropped %s, groups %d, senders %d\n",
		st.Datagrams[relay.Unix], st.Datagrams[relay.UDP], byReason(rejected), st.SpansReceived, st.SpansForwarded,
		st.LateSpans, st.SpansPending, byReason(st.SpansDropped), st.Groups, st.Senders)
}

// byReason is "none", or the non-zero counts as "reason n, ..." by reason.
func byReason(counts map[string]uint64) string {
	var parts []string
	for _, r := range slices.Sorted(maps.Keys(counts)) {
		if counts[r] > 0 {
			parts = append(parts, fmt.Sprintf("%s %d", r, counts[r]))
		}
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}
