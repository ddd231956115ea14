// This file tests that the consumer fed label values that never repeat
// stops growing, interval after interval.

package stats

import (
	"fmt"
	"testing"
	"time"
)

// TestSoakChurningLabels drives the consumer through hundreds of intervals
// whose resources, services, endpoints and peer tags are all new and never
// come back, each reported: both tables, their budgets and caches, the
// packer and the type splitter must plateau, not keep what they saw.
func TestSoakChurningLabels(t *testing.T) {
	const (
		iv        = 10 * time.Second
		intervals = 220
	)
	spans := 1000
	if raceEnabled {
		spans = 150 // still new keys each interval, peer-tag keys past their cap
	}
	d := newDriven(t, iv, epoch.Add(3*time.Second))
	var settled uint64
	for i := range intervals {
		for j := range spans {
			s := Span{Service: fmt.Sprint("svc-", i, "-", j%50), Name: fmt.Sprint("op-", i, "-", j%80),
				Resource: fmt.Sprint("res-", i, "-", j), Type: fmt.Sprint("t-", i, "-", j%20), SpanKind: "client",
				HTTPMethod: "GET", HTTPEndpoint: fmt.Sprint("/e/", i, "/", j),
				PeerTags: []string{fmt.Sprint("peer.service:p-", i, "-", j), fmt.Sprint("k", i, "-", j%100, ":v", j),
					fmt.Sprintf("out.host:10.0.%d.%d", i%256, j%256)},
				Duration: int64(time.Millisecond), Start: d.now.UnixNano()}
			if !d.a.Publish(&s) {
				t.Fatal("span not queued")
			}
			if j%256 == 255 {
				d.c.consume() // the inbox holds a few thousand
			}
		}
		d.at(d.now.Add(iv))
		d.reports(epoch)
		if i == 20 {
			settled = liveHeap()
		}
	}
	end := liveHeap()
	t.Logf("heap after interval 20: %d KiB, after %d: %d KiB", settled>>10, intervals, end>>10)
	if h := d.a.Health(); h.Counted != uint64(intervals*spans) || h.Entries > 2*uint64(d.c.table.MaxEntries()) {
		t.Fatalf("counted %d of %d, %d entries", h.Counted, intervals*spans, h.Entries)
	}
	// Measured flat within ~100 KiB; keeping each interval's labels would
	// add about a hundred KiB an interval.
	const slack = 1 << 20
	if end > settled+slack {
		t.Fatalf("heap grew from %d KiB (interval 20) to %d KiB (interval %d)", settled>>10, end>>10, intervals)
	}
}
