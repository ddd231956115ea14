// This file tests that the payload buffers kept for reuse stay bounded.

package stats

import "testing"

// Payload buffers: small ones are reused, a large one (a burst's report) is
// left to the GC instead of being kept for good.
func TestPayloadBufferReuseIsBounded(t *testing.T) {
	p := newBufPool()
	small := make([]byte, 100, 1<<10)
	p.put(small)
	b := p.get(512)
	if len(b) != 0 || cap(b) != 1<<10 || &b[:1][0] != &small[0] {
		t.Fatalf("getBuf(512) = len %d cap %d, want the spare of 1 KiB back, emptied", len(b), cap(b))
	}
	p.put(small)
	if b := p.get(4 << 10); cap(b) < 4<<10 {
		t.Fatalf("getBuf(4 KiB) has cap %d", cap(b))
	}
	if n := len(p); n != 0 {
		t.Fatalf("%d spares after a request none fits: the small one must give way", n)
	}
	// Reports of one size after a quiet interval's small ones: the pool
	// turns to that size, and the steady state (one encoded, one sent)
	// allocates nothing more.
	p.put(make([]byte, 0, 4<<10))
	p.put(make([]byte, 0, 4<<10))
	report := func() {
		enc := p.get(16 << 10)
		sent := p.get(16 << 10)
		p.put(sent)
		p.put(enc)
	}
	report()
	if n := testing.AllocsPerRun(100, report); n != 0 {
		t.Fatalf("%v allocations per report of 16 KiB once the pool turned to that size, want 0", n)
	}
	// A report over maxSpareBuf (whose buffer is never kept) leaves the
	// small spare for the next small one.
	if n := testing.AllocsPerRun(100, func() {
		p.put(p.get(4 << 10))
		p.put(p.get(maxSpareBuf + 1))
	}); n != 1 {
		t.Fatalf("%v allocations per pair of a 4 KiB and a %d B report, want 1 (the large one)", n, maxSpareBuf+1)
	}
	sizes := []int{}
	for len(p) > 0 {
		sizes = append(sizes, cap(<-p))
	}
	if len(sizes) != 2 || sizes[0] < 16<<10 || sizes[1] < 16<<10 {
		t.Fatalf("spares after 100 reports of 16 KiB: %v, want two of 16 KiB", sizes)
	}
	p.put(make([]byte, 0, maxSpareBuf+1))
	if n := len(p); n != 0 {
		t.Fatalf("%d spare buffers after returning one larger than maxSpareBuf", n)
	}
	if b := p.get(3 << 20); cap(b) < 3<<20 {
		t.Fatalf("getBuf(3 MiB) has cap %d", cap(b))
	}
}
