// This file tests that Health snapshots stay consistent while the consumer
// and the sender update them: no part exceeds its whole.

package stats

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/spanstats/spanstats/aggregate"
	"github.com/spanstats/spanstats/internal/sockdir"
	"github.com/spanstats/spanstats/stats/statstest"
)

// TestHealthPartsNeverExceedWhole: a snapshot taken while the consumer
// aggregates never shows more collapsed, late or overflowed spans than
// counted, nor more spans collapsed in a field than collapsed spans: the
// Health doc says each is part of the other, and Counted − CollapsedSpans
// must not wrap around.
func TestHealthPartsNeverExceedWhole(t *testing.T) {
	ag := statstest.New()
	defer ag.Close()
	a := newStarted(t, Config{AgentURL: ag.URL(), MaxAggregates: 1, InboxSize: 1024,
		CardinalityLimits: aggregate.Limits{Resource: 1, PeerTag: 1}})
	var done atomic.Bool
	var wg sync.WaitGroup
	for p := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; !done.Load(); i++ {
				// Every third span of each producer ended long ago: late,
				// in the oldest bucket (both make them: either may find the
				// inbox full whenever it runs). Every other span is a
				// client's with three peer tags over their budget: a span,
				// not a tag, per collapse.
				s := Span{Service: "s", Name: "op", Resource: fmt.Sprint(p, i), SpanKind: "server", Duration: 100}
				if i%3 == 2 {
					s.Start = 1
				}
				if i%2 == 1 {
					s.SpanKind = "client"
					s.PeerTags = []string{fmt.Sprint("peer.service:s", i), fmt.Sprint("peer.hostname:h", i), fmt.Sprint("db.instance:d", i)}
				}
				a.Publish(&s)
			}
		}()
	}
	// At least a second, and on until every part has been seen (or 10 s):
	// the parts are what the snapshots are checked against.
	start := time.Now()
	var bad string
	for bad == "" {
		h := a.Health()
		if seen := h.CollapsedSpans > 0 && h.LateSpans > 0 && h.Overflowed > 0 && h.Collapsed[aggregate.FieldPeerTags] > 0; seen && time.Since(start) > time.Second || time.Since(start) > 10*time.Second {
			break
		}
		switch {
		case h.CollapsedSpans > h.Counted:
			bad = fmt.Sprintf("CollapsedSpans %d > Counted %d", h.CollapsedSpans, h.Counted)
		case h.LateSpans > h.Counted:
			bad = fmt.Sprintf("LateSpans %d > Counted %d", h.LateSpans, h.Counted)
		case h.Overflowed > h.Counted:
			bad = fmt.Sprintf("Overflowed %d > Counted %d", h.Overflowed, h.Counted)
		}
		for f, n := range h.Collapsed {
			if n > h.CollapsedSpans && bad == "" {
				bad = fmt.Sprintf("Collapsed[%v] %d > CollapsedSpans %d", aggregate.Field(f), n, h.CollapsedSpans)
			}
		}
	}
	done.Store(true)
	wg.Wait()
	stop(t, a)
	if bad != "" {
		t.Fatal(bad)
	}
	if h := a.Health(); h.CollapsedSpans == 0 || h.LateSpans == 0 || h.Overflowed == 0 || h.Collapsed[aggregate.FieldPeerTags] == 0 {
		t.Fatalf("collapsed %d (peer tags %d), late %d, overflowed %d: want each > 0 for the test to mean anything",
			h.CollapsedSpans, h.Collapsed[aggregate.FieldPeerTags], h.LateSpans, h.Overflowed)
	}
}

// TestHealthRetriedNeverExceedsFailed: every retry follows a failed
// attempt, so a snapshot taken while a sender retries toward a missing
// relay never shows more PayloadsRetried than PayloadsFailed (a monitor
// computing the attempts given up, Failed − Retried, must not wrap).
func TestHealthRetriedNeverExceedsFailed(t *testing.T) {
	a := newStarted(t, Config{AgentURL: "unixgram://" + sockdir.Path(t, "none.sock"), SendJitter: -1}, func(a *Aggregator) {
		a.snd.out.(*datagramOut).sleep = func(time.Duration) {} // retry as fast as the dial fails
	})
	var done atomic.Bool
	var wg sync.WaitGroup
	wg.Go(func() {
		for !done.Load() {
			publishN(a, 1, "r")
			_ = a.Flush(t.Context()) // ErrNoRelay: that is the point
		}
	})
	var bad atomic.Pointer[string]
	var polls sync.WaitGroup
	for range 4 { // more snapshots, more chances to straddle a retry
		polls.Go(func() {
			for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline) && bad.Load() == nil; {
				if h := a.Health(); h.PayloadsRetried > h.PayloadsFailed {
					msg := fmt.Sprintf("PayloadsRetried %d > PayloadsFailed %d", h.PayloadsRetried, h.PayloadsFailed)
					bad.Store(&msg)
				}
			}
		})
	}
	polls.Wait()
	done.Store(true)
	wg.Wait()
	stop(t, a)
	if msg := bad.Load(); msg != nil {
		t.Fatal(*msg)
	}
	if h := a.Health(); h.PayloadsRetried == 0 {
		t.Fatal("no retry: the test means nothing")
	}
}

// TestLastSendErrorKeepsTheLater: the consumer and the sender both note
// send errors; one that read the clock before the other but stores after
// it must not take LastSendErrorAt back.
func TestLastSendErrorKeepsTheLater(t *testing.T) {
	var c counters
	t0 := time.Now()
	later, earlier := errors.New("later"), errors.New("earlier")
	c.noteErrorAt(later, t0.Add(time.Millisecond))
	c.noteErrorAt(earlier, t0)
	if e := c.lastErr.Load(); e.err != later || !e.at.Equal(t0.Add(time.Millisecond)) {
		t.Fatalf("last send error %v at %v; want the later one", e.err, e.at)
	}
	c.noteErrorAt(earlier, t0.Add(2*time.Millisecond))
	if e := c.lastErr.Load(); e.err != earlier {
		t.Fatalf("last send error %v; want the newest", e.err)
	}
}

// TestStripedCellsSpread: goroutines started together, whose 2 KiB stacks
// lie side by side, add to different cells of a striped counter (with
// addresses above 8 KiB, 16 of them shared 4–5 cells), and the cells sum
// to what was added.
func TestStripedCellsSpread(t *testing.T) {
	var c striped
	var wg sync.WaitGroup
	start := make(chan struct{})
	for range 16 {
		wg.Go(func() {
			<-start
			c.Add(3)
		})
	}
	close(start)
	wg.Wait()
	if c.Load() != 48 {
		t.Fatalf("16 goroutines added %d; want 48", c.Load())
	}
	// Where the runtime puts the goroutines' stacks varies from run to run,
	// so the spread is checked on the stacks' likely layout: side by side,
	// 2 to 8 KiB apart.
	for _, size := range []uintptr{2 << 10, 4 << 10, 8 << 10} {
		cells := map[uint64]bool{}
		for k := range uintptr(16) {
			cells[stripeOf(0x40400000+k*size)] = true
		}
		if len(cells) < 8 {
			t.Errorf("16 stacks %d bytes apart share %d of %d cells; want at least 8", size, len(cells), stripes)
		}
	}
}
