// This file tests that every span is accounted for while the wall clock
// slews and steps at random, on a hand-driven and on the running consumer.

package stats

import (
	"context"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/spanstats/spanstats/stats/statstest"
)

// TestClockChaosConservation drives the consumer by hand through random
// clock moves (slews, steps of an interval or a thousand, either way), spans
// ending far in the past or future or "now", and ticks, flushes and drains
// in any order: every span is counted and reported exactly once, and every
// bucket has a length in (0, interval] and starts no more than a minute
// after the clock that reported it (what a relay accepts).
func TestClockChaosConservation(t *testing.T) {
	const iv = 10 * time.Second
	for seed := range uint64(100) {
		rng := rand.New(rand.NewPCG(seed, 1))
		d := newDriven(t, iv, epoch.Add(3*time.Second))
		var total uint64
		var published uint64
		moves := []time.Duration{time.Millisecond, 300 * time.Millisecond, iv / 10, iv - 1, iv, iv + 1, 3 * iv, 1000 * iv, -time.Millisecond, -iv / 2, -iv, -iv - 1, -3 * iv, -1000 * iv, 0}
		ends := []time.Duration{0, -1, -iv / 20, -iv, -2 * iv, -100 * iv, iv / 20, iv, 100 * iv}
		for range 40 {
			d.now = d.now.Add(moves[rng.IntN(len(moves))])
			for range rng.IntN(3) {
				e := ends[rng.IntN(len(ends))]
				end := d.now.Add(e)
				if e == 0 && rng.IntN(2) == 0 {
					end = time.Time{}
				}
				d.publish("x", end)
				published++
			}
			switch rng.IntN(4) {
			case 0:
				d.c.tick()
			case 1:
				d.c.flush(make(chan error, 1))
			case 2:
				d.c.consume()
			case 3:
				d.c.drainQueued()
			}
			for _, b := range d.reports(epoch) {
				// A relay refuses a bucket starting over a minute after its
				// clock, which reads what this one does.
				if b.length <= 0 || b.length > iv || epoch.Add(b.start).After(d.now.Add(time.Minute)) {
					t.Fatalf("seed %d: bucket %v reported at %v", seed, b, d.now.Sub(epoch))
				}
				total += b.hits["x"]
			}
		}
		d.c.finish()
		for _, b := range d.reports(epoch) {
			if b.length <= 0 || b.length > iv {
				t.Fatalf("seed %d: bucket %v", seed, b)
			}
			total += b.hits["x"]
		}
		h := d.a.Health()
		if h.Counted != published || total != published || h.Pending != 0 {
			t.Fatalf("seed %d: published %d counted %d reported %d pending %d", seed, published, h.Counted, total, h.Pending)
		}
	}
}

// TestLiveClockStepsConservation: the running consumer, on a wall clock
// stepped back and forth by random amounts while producers publish spans
// with random ends and Flush races the timer, still accounts for every span
// (Health's identities after Stop, the agent's hits equal to SpansSent) and
// sends no bucket of length 0 or over the interval.
func TestLiveClockStepsConservation(t *testing.T) {
	ag := statstest.New()
	defer ag.Close()
	var off atomic.Int64
	a := newStarted(t, Config{AgentURL: ag.URL(), SendJitter: -1, BucketInterval: 20 * time.Millisecond, InboxSize: 256, SendQueue: 64},
		func(a *Aggregator) {
			a.cons.clock = func() time.Time { return time.Now().Add(time.Duration(off.Load())) }
		})
	steps := []time.Duration{0, time.Hour, -time.Hour, 25 * time.Millisecond, -25 * time.Millisecond, -5 * time.Millisecond, 1000 * time.Hour, -1000 * time.Hour}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		rng := rand.New(rand.NewPCG(1, 2))
		for {
			select {
			case <-done:
				return
			case <-time.After(3 * time.Millisecond):
				off.Add(int64(steps[rng.IntN(len(steps))]))
				switch rng.IntN(4) {
				case 0:
					ctx, cancel := context.WithTimeout(context.Background(), 5*time.Millisecond)
					_ = a.Flush(ctx)
					cancel()
				}
			}
		}
	})
	var pub sync.WaitGroup
	for p := range 6 {
		pub.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(p), 3))
			for i := range 20000 {
				s := Span{Service: "s", Name: "op", Resource: "r", SpanKind: "server", Duration: 1000}
				switch rng.IntN(4) {
				case 0:
				case 1:
					s.Start = time.Now().Add(time.Duration(off.Load())).UnixNano()
				case 2:
					s.Start = time.Now().UnixNano() + rng.Int64N(int64(time.Hour)) - int64(time.Hour/2)
				case 3:
					s.Start = rng.Int64()
				}
				a.Publish(&s)
				if i%64 == 0 {
					time.Sleep(100 * time.Microsecond)
				}
			}
		})
	}
	pub.Wait()
	close(done)
	wg.Wait()
	stop(t, a)
	h := a.Health()
	checkConservation(t, h)
	_, hits := statstest.Sum(ag.Requests())
	if hits != h.SpansSent {
		t.Fatalf("agent accepted %d hits, Health.SpansSent %d", hits, h.SpansSent)
	}
	for _, r := range ag.Requests() {
		for _, b := range r.Payload.Buckets {
			if b.Duration == 0 || b.Duration > uint64(20*time.Millisecond) {
				t.Errorf("bucket at %d of length %d", b.Start, b.Duration)
			}
		}
	}
	if h.ClockStepsBack == 0 {
		t.Fatal("no step back was seen: the test proves little")
	}
}
