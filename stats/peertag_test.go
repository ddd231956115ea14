// This file tests PeerTagJoiner: joined strings, remembered without an
// allocation, bounded, and safe for concurrent use.

package stats

import (
	"strconv"
	"strings"
	"sync"
	"testing"
	"unsafe"
)

// TestPeerTagJoinerRemembers: a pair joined again, from strings of memory
// of their own (as a tracer reads them from each span), is the same
// string, without an allocation; another pair is its own. The zero value
// works as NewPeerTagJoiner's does.
func TestPeerTagJoinerRemembers(t *testing.T) {
	for name, j := range map[string]*PeerTagJoiner{"NewPeerTagJoiner": NewPeerTagJoiner(), "zero value": new(PeerTagJoiner)} {
		t.Run(name, func(t *testing.T) { testJoinerRemembers(t, j) })
	}
}

func testJoinerRemembers(t *testing.T, j *PeerTagJoiner) {
	fresh := func(s string) string { return string([]byte(s)) }
	a := j.Join(fresh("peer.service"), fresh("billing"))
	b := j.Join(fresh("peer.service"), fresh("billing"))
	if a != "peer.service:billing" || unsafe.StringData(a) != unsafe.StringData(b) {
		t.Fatalf("joined %q at %p then %q at %p; want peer.service:billing, the same string", a, unsafe.StringData(a), b, unsafe.StringData(b))
	}
	for _, c := range [][3]string{
		{"peer.service", "billing2", "peer.service:billing2"},
		{"peer.servic", "e:billing", "peer.servic:e:billing"}, // the same bytes joined, another pair
		{"db.instance", "", "db.instance:"},
		{"", "x", ":x"},
	} {
		if got := j.Join(c[0], c[1]); got != c[2] {
			t.Errorf("Join(%q, %q) = %q, want %q", c[0], c[1], got, c[2])
		}
	}
	k, v := fresh("peer.service"), fresh("billing")
	if n := testing.AllocsPerRun(100, func() { j.Join(k, v) }); n != 0 {
		t.Errorf("Join of a remembered pair: %v allocations, want 0", n)
	}
}

// TestPeerTagJoinerBounded: a tag over MaxTagLen is joined each time, not
// kept; however many pairs pass, at most peerTagSlots tags are kept.
func TestPeerTagJoinerBounded(t *testing.T) {
	j := NewPeerTagJoiner()
	long := strings.Repeat("v", MaxTagLen)
	if a, b := j.Join("k", long), j.Join("k", long); a != "k:"+long || unsafe.StringData(a) == unsafe.StringData(b) {
		t.Fatalf("a %d-byte tag was kept (or joined wrong)", len(a))
	}
	for i := range 3 * peerTagSlots {
		j.Join("peer.service", strconv.Itoa(i))
	}
	kept := 0
	for i := range j.slots {
		if j.slots[i].Load() != nil {
			kept++
		}
	}
	// Each of the 3×4096 pairs was kept where it fell: most slots hold one.
	if kept < peerTagSlots/2 {
		t.Fatalf("%d of %d slots hold a tag after %d pairs, want most", kept, peerTagSlots, 3*peerTagSlots)
	}
}

// TestPeerTagJoinerSpreadsKeys: pairs of one value under keys alike (the
// agent's db.* keys start and end alike) land in slots of their own, not
// one they would take from each other at every span.
func TestPeerTagJoinerSpreadsKeys(t *testing.T) {
	j := NewPeerTagJoiner()
	slots := map[uint64]bool{}
	keys := []string{"db.instance", "db.name", "db.type", "db.hostname", "dns.hostname", "peer.service", "peer.hostname"}
	for _, k := range keys {
		slots[j.slot(k, "orders")] = true
	}
	if len(slots) < len(keys)-1 { // two sharing one (about one run in 200) passes; more, one in 40 000, fails
		t.Fatalf("%d keys with one value fell into %d slots", len(keys), len(slots))
	}
}

// TestPeerTagJoinerConcurrent: goroutines joining overlapping pairs at once
// (slots replaced under them) always get the right string (run with -race).
func TestPeerTagJoinerConcurrent(t *testing.T) {
	j := NewPeerTagJoiner()
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 20000 {
				v := strconv.Itoa((i * (g + 1)) % (2 * peerTagSlots))
				if got := j.Join("out.host", v); got != "out.host:"+v {
					t.Errorf("Join(out.host, %s) = %q", v, got)
					return
				}
			}
		})
	}
	wg.Wait()
}
