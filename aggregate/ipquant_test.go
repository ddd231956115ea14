// This file tests the quantization of IP addresses in peer-tag values, and
// that QuantizeIPsTo reads a bounded prefix of a long value.

package aggregate

import (
	"fmt"
	"math"
	"strings"
	"testing"
	"unsafe"
)

// TestPeerIPsQuantized: peer tags naming IP addresses group under
// BlockedIP, the port kept; loopback stays as it is; a host name is not
// touched. bench/peer's TestQuantizeIPsMatchesAgent checks QuantizeIPs
// against the agent's own function.
func TestPeerIPsQuantized(t *testing.T) {
	tb := NewTable(0)
	for _, tags := range [][]string{
		{"out.host:10.1.2.3", "peer.service:db"}, {"out.host:10.9.8.7", "peer.service:db"},
		{"out.host:[2001:db8::1]:5432"}, {"out.host:10.1.2.3:5432"}, {"out.host:127.0.0.1"}, {"out.host:db.internal"},
	} {
		s := baseSpan()
		s.SetPeerTags(tags)
		tb.Add(&s)
	}
	got := map[string]uint64{}
	for _, e := range tb.Touched(nil) {
		got[strings.Join(e.PeerTags, " ")+" "] = e.Hits
	}
	want := map[string]uint64{
		"out.host:blocked-ip-address peer.service:db ": 2, "out.host:blocked-ip-address:5432 ": 2,
		"out.host:127.0.0.1 ": 1, "out.host:db.internal ": 1,
	}
	if len(got) != len(want) {
		t.Fatalf("groups %v, want %v", got, want)
	}
	for k, n := range want {
		if got[k] != n {
			t.Fatalf("groups %v, want %v", got, want)
		}
	}
}

// quantize is tb.quantizeTag with the colon found.
func quantize(tb *Table, tag string) string { return tb.quantizeTag(tag, strings.IndexByte(tag, ':')) }

// TestQuantizeTagOncePerTag: a quantized tag is made once and handed out
// again without allocating; a tag without an IP address is itself.
func TestQuantizeTagOncePerTag(t *testing.T) {
	tb := NewTable(0)
	a := quantize(tb, "out.host:10.1.2.3:80")
	b := quantize(tb, strings.Clone("out.host:10.1.2.3:80")) // other bytes, same tag
	if a != "out.host:blocked-ip-address:80" || unsafe.StringData(a) != unsafe.StringData(b) {
		t.Fatalf("%q, %q: want one string", a, b)
	}
	tag := "out.host:10.1.2.3:80"
	if n := testing.AllocsPerRun(100, func() { _ = quantize(tb, tag) }); n != 0 {
		t.Fatalf("a known quantized tag allocates %v times", n)
	}
	plain := "peer.service:billing-db"
	if got := quantize(tb, plain); unsafe.StringData(got) != unsafe.StringData(plain) {
		t.Fatal("a tag without an IP address was copied")
	}
	if n := testing.AllocsPerRun(100, func() { _ = quantize(tb, plain) }); n != 0 {
		t.Fatalf("a plain tag allocates %v times", n)
	}
	for i := range maxQuantized + 10 { // the map stays bounded
		quantize(tb, "out.host:10.0."+string(rune('0'+i%10))+".1:"+string(rune('a'+i%26))+string(rune('a'+i/26%26))+string(rune('a'+i/676)))
	}
	if len(tb.quantized) > maxQuantized {
		t.Fatalf("%d quantized tags kept, bound %d", len(tb.quantized), maxQuantized)
	}
}

// TestHasColonOrComma: the eight-bytes-at-a-time test agrees with a byte
// loop on every position and on bytes that differ from ':' and ',' by one
// bit or one step.
func TestHasColonOrComma(t *testing.T) {
	fill := []byte{'a', '9', ';', '+', '-', 0x3b, 0x2d, 0xba, 0xac, 0x00, 0xff, '.'}
	for n := 0; n <= 40; n++ {
		for _, f := range fill {
			b := make([]byte, n)
			for i := range b {
				b[i] = f
			}
			if hasColonOrComma(string(b)) {
				t.Fatalf("%q: found a colon or comma in none", b)
			}
			for i := range b {
				for _, c := range []byte{':', ','} {
					b[i] = c
					if !hasColonOrComma(string(b)) {
						t.Fatalf("%q: missed %q at %d", b, c, i)
					}
					b[i] = f
				}
			}
		}
	}
}

// TestQuantizeIPsToReadsABoundedPrefix: QuantizeIPsTo's first max bytes are
// QuantizeIPs's, and it stops reading a long list once they are known or
// past 4*max bytes, so a list of distinct entries (each compared with the
// ones kept before it) costs no more than a short one.
func TestQuantizeIPsToReadsABoundedPrefix(t *testing.T) {
	const max = 40
	var b strings.Builder
	for i := range 100_000 {
		b.WriteString("10.0.0.1:9092,h")
		b.WriteString(strings.Repeat("x", i%7))
		b.WriteString(",")
	}
	long := b.String()
	for _, v := range []string{long[:200], long[:5000], long} {
		got, whole := QuantizeIPsTo(v, max)
		want := QuantizeIPs(v)
		if whole != (len(v) <= 4*max) {
			t.Fatalf("QuantizeIPsTo(%.30q..., %d) of %d bytes says whole %v", v, max, len(v), whole)
		}
		if len(got) <= max || got[:max] != want[:max] {
			t.Fatalf("QuantizeIPsTo(%.30q..., %d) = %.60q, QuantizeIPs %.60q", v, max, got, want)
		}
		if len(got) > 2*max {
			t.Fatalf("QuantizeIPsTo(%.30q..., %d) made %d bytes: it read on past the cut", v, max, len(got))
		}
	}
	if got, whole := QuantizeIPsTo("10.0.0.1,10.0.0.2", max); got != "blocked-ip-address" || !whole {
		t.Fatalf("short value: %q, whole %v", got, whole)
	}
}

// A max past math.MaxInt/4 wrapped 4*max negative, and QuantizeIPsTo
// sliced v with it and panicked; it is QuantizeIPs for such a max.
func TestQuantizeIPsToHugeMax(t *testing.T) {
	for _, max := range []int{math.MaxInt, math.MaxInt/4 + 1, math.MaxInt / 2} {
		v := "10.0.0.1,10.0.0.2,h"
		if got, _ := QuantizeIPsTo(v, max); got != QuantizeIPs(v) {
			t.Fatalf("QuantizeIPsTo(%q, %d) = %q, want %q", v, max, got, QuantizeIPs(v))
		}
	}
}

// TestQuantizeIPsToReadsABoundedEntry: a value of one entry longer than
// 4*max bytes (an address and then a megabyte, no comma to cut at) is read
// only that far too, as a long list is: read whole, each span carrying it
// cost Publish milliseconds and three copies of it. The first max bytes are
// still QuantizeIPs's.
func TestQuantizeIPsToReadsABoundedEntry(t *testing.T) {
	const max = 190
	tail := strings.Repeat("a", 1<<20)
	for _, v := range []string{"10.0.0.1" + tail, "http://10.0.0.1/" + tail, "h1," + tail, "fe80::1%" + tail} {
		got, whole := QuantizeIPsTo(v, max)
		want := QuantizeIPs(v)
		if whole {
			t.Fatalf("QuantizeIPsTo(%.20q..., %d) says it read all %d bytes", v, max, len(v))
		}
		if len(want) <= max && got != want || len(want) > max && (len(got) <= max || got[:max] != want[:max]) {
			t.Fatalf("QuantizeIPsTo(%.20q..., %d) = %.40q..., QuantizeIPs %.40q...", v, max, got, want)
		}
		if len(got) > 4*max+len(BlockedIP) {
			t.Fatalf("QuantizeIPsTo(%.20q..., %d) made %d bytes of a %d-byte value: it read on past 4*max", v, max, len(got), len(v))
		}
	}
}

// TestQuantizeTagToUnchangedLongListIsASlice: a list of host names (a
// comma: it may hold an address) longer than max, none an address or a
// duplicate, is unchanged in what was read: QuantizeTagTo hands back a
// slice of the tag, with no allocation, as its doc says, where it used to
// copy it because the read stopped before the end.
func TestQuantizeTagToUnchangedLongListIsASlice(t *testing.T) {
	var hosts []string
	for i := range 64 {
		hosts = append(hosts, fmt.Sprintf("broker-%02d.kafka.internal", i))
	}
	tag := "peer.hostname:" + strings.Join(hosts, ",")
	c := strings.IndexByte(tag, ':')
	var q string
	var whole bool
	allocs := testing.AllocsPerRun(100, func() { q, whole, _ = QuantizeTagTo(tag, c, 100) })
	if allocs != 0 || unsafe.StringData(q) != unsafe.StringData(tag) || !strings.HasPrefix(tag, q) || len(q)-(c+1) <= 100 {
		t.Fatalf("allocs %v, q shares the tag's bytes %v, q %q (whole %v); want a slice of the tag past max, no allocation",
			allocs, unsafe.StringData(q) == unsafe.StringData(tag), q, whole)
	}
	// A duplicate within what is read still changes it.
	dup := "peer.hostname:" + hosts[0] + "," + hosts[0] + "," + strings.Join(hosts[1:], ",")
	if q, _, _ := QuantizeTagTo(dup, c, 100); strings.Count(q[c+1:min(len(q), c+1+100)], hosts[0]) != 1 {
		t.Fatalf("duplicate kept: %q", q)
	}
}

// TestQuantizeIPsEdges: values at the edges of what QuantizeIPs reads as
// an address (octet range, leading zeros, separators, brackets, schemes,
// the addresses the agent keeps); bench/peer's TestQuantizeIPsMatchesAgent
// checks each of them against the agent's own quantization.
func TestQuantizeIPsEdges(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"10.1.2.3", "blocked-ip-address"},
		{"255.255.255.255", "blocked-ip-address"},
		{"256.1.2.3", "256.1.2.3"},             // an octet over 255
		{"10.1.2.256", "10.1.2.256"},           // the last one too
		{"10.1.2", "10.1.2"},                   // three octets are no address
		{"01.2.3.4", "01.2.3.4"},               // a leading zero
		{"10.1.2.03", "10.1.2.03"},             // in any octet
		{"10.0.0.1", "blocked-ip-address"},     // a lone zero is no leading zero
		{"10.1.2.3.4", "blocked-ip-address.4"}, // a fifth separator ends it
		{"10-1-2-3", "blocked-ip-address"},
		{"10-1-2-3-eu", "blocked-ip-address-eu"},
		{"ip-10-1-2-3", "ip-blocked-ip-address"},
		{"2001:db8::1", "blocked-ip-address"},
		{"::1", "::1"}, // IPv6 loopback stays
		{"fd00:ec2::254", "fd00:ec2::254"},
		{"169.254.169.254", "169.254.169.254"},
		{"12%34", "12%34"}, // a '%' first: no address
		{"[2001:db8::1]:5432", "blocked-ip-address:5432"},
		{"[2001:db8::1]x:5432", "[2001:db8::1]x:5432"}, // ']' not before the port's colon
		{"http://10.1.2.3:80", "http://blocked-ip-address:80"},
		{"https://10.1.2.3:80", "https://blocked-ip-address:80"},
		{"ftp:///10.1.2.3", "ftp:///blocked-ip-address"},
		{"10.1.2.3:80,10.1.2.4:80", "blocked-ip-address:80"}, // duplicates go
		{"db.internal", "db.internal"},
	} {
		if got := QuantizeIPs(c.in); got != c.want {
			t.Errorf("QuantizeIPs(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

// TestQuantizeIPsToExactlyMax: a quantized value exactly max bytes long
// with an entry after it is longer than max, so the caller sees a cut; a
// value of exactly max bytes with only a duplicate after it fits.
func TestQuantizeIPsToExactlyMax(t *testing.T) {
	n := len(BlockedIP)
	if q, whole := QuantizeIPsTo("10.1.2.3,db", n); !whole || len(q) <= n || q[:n] != BlockedIP {
		t.Fatalf("QuantizeIPsTo(..., %d) = %q, %v: want longer than %d, whole", n, q, whole, n)
	}
	if q, whole := QuantizeIPsTo("10.1.2.3,10.1.2.4", n); !whole || q != BlockedIP {
		t.Fatalf("QuantizeIPsTo(..., %d) = %q, %v: want %q, whole", n, q, whole, BlockedIP)
	}
}
