// This file tests that a table fed label values that never repeat stops
// growing once it has plateaued, interval after interval.

package aggregate

import (
	"fmt"
	"runtime"
	"testing"
)

// heapAlloc is the live heap after a full collection.
func heapAlloc() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// TestSoakChurningKeys runs hundreds of intervals in which every label
// value, peer-tag key and IP is new and never comes back: a week of churn
// must leave the table where it plateaued, not growing with the values it
// has seen (budget sets, peer-key sets, quantized tags, caches, entries).
func TestSoakChurningKeys(t *testing.T) {
	const (
		intervals = 300
		spans     = 600
		maxE      = 256
	)
	tb := NewTable(maxE)
	tb.SetLimits(Limits{})
	var settled uint64
	for iv := range intervals {
		for j := range spans {
			s := Record{
				Service: fmt.Sprint("svc-", iv, "-", j%40), Name: fmt.Sprint("op-", iv, "-", j%70),
				Resource: fmt.Sprint("res-", iv, "-", j), Type: fmt.Sprint("t-", iv, "-", j%20),
				SpanKind: "client", HTTPMethod: fmt.Sprint("M", iv, j%20),
				HTTPEndpoint: fmt.Sprint("/e/", iv, "/", j), GRPCStatusCode: fmt.Sprint(iv, j%30),
				ServiceSource: fmt.Sprint("src-", iv, "-", j%20), Duration: int64(1 + j),
				Error: j%7 == 0,
			}
			s.SetPeerTags([]string{
				fmt.Sprint("peer.service:p-", iv, "-", j),
				fmt.Sprint("key", iv, "-", j%100, ":v", j), // new peer-tag keys each interval
				fmt.Sprintf("out.host:10.%d.%d.%d,h%d-%d", iv%256, j/256, j%256, iv, j),
			})
			tb.Add(&s)
		}
		tb.Rotate()
		if iv == 30 {
			settled = heapAlloc()
		}
	}
	end := heapAlloc()
	if tb.Len() > maxE {
		t.Fatalf("%d entries over a cap of %d", tb.Len(), maxE)
	}
	if n := len(tb.budgets.peer); n > maxPeerTagKeys {
		t.Fatalf("%d peer-tag key budgets kept, cap %d", n, maxPeerTagKeys)
	}
	if n := len(tb.quantized); n > maxQuantized {
		t.Fatalf("%d quantized tags kept, cap %d", n, maxQuantized)
	}
	for f, s := range tb.budgets.fields {
		if s.used > s.remember+max(s.limit, 0) {
			t.Fatalf("field %v: %d values held, bound %d", Field(f), s.used, s.remember+s.limit)
		}
	}
	// The plateau wobbles by a few hundred KiB (the quantized tags are
	// dropped in bulk at their cap); keeping what each interval saw would
	// add tens of KiB to MiBs an interval, MiBs by interval 300.
	const slack = 1 << 20
	t.Logf("heap after interval 30: %d KiB, after %d: %d KiB", settled>>10, intervals, end>>10)
	if end > settled+slack {
		t.Fatalf("heap grew from %d KiB (interval 30) to %d KiB (interval %d)", settled>>10, end>>10, intervals)
	}
}
