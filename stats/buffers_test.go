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
	if b := p.get(10); &b[:1][0] != &small[0] {
		t.Fatal("a spare too small for one request was not kept for the next")
	}
	p.put(make([]byte, 0, maxSpareBuf+1))
	if n := len(p); n != 0 {
		t.Fatalf("%d spare buffers after returning one larger than maxSpareBuf", n)
	}
	if b := p.get(3 << 20); cap(b) < 3<<20 {
		t.Fatalf("getBuf(3 MiB) has cap %d", cap(b))
	}
}
