// This file tests that a relay fed senders, identities and groups that
// never repeat stops growing, interval after interval.

package relay

import (
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/spanstats/spanstats/aggregate"
)

// heapAlloc is the live heap after a full collection.
func heapAlloc() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// TestSoakChurningSenders runs hundreds of intervals in which every sender
// (RuntimeID), identity (hostname, container) and group is new and never
// comes back: harvested each interval, the relay must hold no group or
// identity after it, remember senders only for SenderIdle, and plateau.
func TestSoakChurningSenders(t *testing.T) {
	const (
		intervals = 300
		senders   = 40 // new ones each interval
		groups    = 4
	)
	now := t0
	r := newTestRelay(Config{Now: func() time.Time { return now }})
	r.SetPeerTagKeys([]string{"peer.service", "out.host"})
	idle := int(SenderIdle/DefaultInterval) + 1 // intervals a silent sender is kept
	var settled uint64
	for i := range intervals {
		ws := uint64(now.UnixNano()) - uint64(now.UnixNano())%uint64(DefaultInterval)
		for j := range senders {
			h := header(fmt.Sprint("rt-", i, "-", j))
			h.Hostname, h.ContainerID = fmt.Sprint("host-", i, "-", j%10), fmt.Sprint("c-", i, "-", j%20)
			es := make([]*aggregate.Entry, groups)
			for k := range es {
				kk := key(fmt.Sprint("res-", i, "-", j, "-", k))
				kk.SpanKind = "client"
				kk.PeerTags = []string{fmt.Sprint("peer.service:p-", i, "-", k), fmt.Sprint("x", i, ":y")}
				es[k] = entry(kk, 2, 1, 1, 2)
			}
			mustAccept(t, r, datagram(1, h, bucket(ws, 10*sec, es...)), 0, UDP)
		}
		now = now.Add(DefaultInterval)
		for _, b := range r.Harvest(now) {
			r.Forwarded(b.Hits)
			r.Release(&b)
		}
		s := checkAccounting(t, r)
		if s.Groups != 0 || len(r.st.ids) != 0 || s.Senders > idle*senders {
			t.Fatalf("interval %d: %d groups, %d identities, %d senders held after the harvest (senders bound %d)",
				i, s.Groups, len(r.st.ids), s.Senders, idle*senders)
		}
		if i == 2*idle {
			settled = heapAlloc()
		}
	}
	end := heapAlloc()
	t.Logf("heap after interval %d: %d KiB, after %d: %d KiB", 2*idle, settled>>10, intervals, end>>10)
	// Measured flat to a few KiB; a sender or identity kept for good
	// would add tens of KiB an interval.
	const slack = 512 << 10
	if end > settled+slack {
		t.Fatalf("heap grew from %d KiB (interval %d) to %d KiB (interval %d)", settled>>10, 2*idle, end>>10, intervals)
	}
}
