// This file tests aggregate.QuantizeIPs against the agent's own
// quantization of peer IP addresses.

package peer

import (
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"

	"github.com/DataDog/datadog-agent/pkg/obfuscate"

	"github.com/spanstats/spanstats/aggregate"
)

// quantizeSeeds are peer-tag values of the kinds the agent's
// QuantizePeerIPAddresses tells apart.
var quantizeSeeds = []string{
	"", "db.example.com", "10.1.2.3", "10.1.2.3:5432", "127.0.0.1", "127.0.0.1:8126", "169.254.169.254",
	"::1", "[::1]:80", "2001:db8::1", "[2001:db8::1]:443", "fd00:ec2::254", "fe80::1%eth0", "::ffff:1.2.3.4",
	"ip-10-123-4-56.ec2.internal", "10_1_2_3", "10-1-2-3", "1.2.3.4.5", "1.2.3.4.", "1.2.3", "01.2.3.4",
	"256.1.1.1", "1.2.3.4x", "1.2.3.x", "1..2.3", ".1.2.3", "http://10.0.0.1:80", "https://10.0.0.1",
	"dnspoll:///10.0.0.1:53", "xhttp://10.0.0.1", "file:///1.2.3.4", "10.0.0.1,10.0.0.2", "a,a", "a,,b,,",
	",", ",,", "10.0.0.1,db,10.0.0.2,db", "[1.2.3.4]:80", "1.2.3.4:80:90", "host:8080", "a:b:c",
	"dead:beef", "DEAD::BEEF", "%", "1.2.3.4%", "blocked-ip-address:5432", "ip-", "ip-1-2-3-4",
	// aggregate's TestQuantizeIPsEdges, so that its expectations are the agent's.
	"255.255.255.255", "10.1.2.256", "10.1.2.03", "10.1.2.3.4", "10-1-2-3-eu", "ip-10-1-2-3", "12%34",
	"[2001:db8::1]:5432", "[2001:db8::1]x:5432", "https://10.1.2.3:80", "ftp:///10.1.2.3", "10.1.2.3:80,10.1.2.4:80",
}

// TestQuantizeIPsMatchesAgent: aggregate.QuantizeIPs gives what the
// agent's obfuscate.QuantizePeerIPAddresses (v0.85.4) gives, on values of
// every kind it tells apart and on random ones built from their pieces; and
// aggregate.QuantizeIPsTo its first max bytes, for values it reads whole.
func TestQuantizeIPsMatchesAgent(t *testing.T) {
	check := func(v string) {
		t.Helper()
		want := obfuscate.QuantizePeerIPAddresses(v)
		if got := aggregate.QuantizeIPs(v); got != want {
			t.Fatalf("QuantizeIPs(%q) = %q, the agent's %q", v, got, want)
		}
		for _, max := range []int{1, 4, 9, 20} {
			if len(v) > 4*max {
				continue
			}
			got, whole := aggregate.QuantizeIPsTo(v, max)
			if !whole {
				t.Fatalf("QuantizeIPsTo(%q, %d) says it left part of a value of at most 4*max bytes unread", v, max)
			}
			if len(want) <= max && got != want || len(want) > max && (len(got) <= max || got[:max] != want[:max]) {
				t.Fatalf("QuantizeIPsTo(%q, %d) = %q, the agent's %q", v, max, got, want)
			}
		}
	}
	for _, v := range quantizeSeeds {
		check(v)
	}
	pieces := []string{"1", "2", "25", "255", "256", "0", "00", ".", ".", "-", "_", ":", "::", "[", "]", ",", "%",
		"a", "f", "g", "ip-", "http://", "https://", "file:///", "dnspoll://", "eth0", "10.0.0.1", "fe80::1", "x"}
	rng := rand.New(rand.NewPCG(7, 11))
	var b strings.Builder
	for range 200_000 {
		b.Reset()
		for range 1 + rng.IntN(8) {
			b.WriteString(pieces[rng.IntN(len(pieces))])
		}
		check(b.String())
	}
	// Lists longer than the entries quantizeValue compares one by one, with
	// duplicates on both sides of its switch to a set.
	entries := []string{"10.0.0.1", "10.0.0.2", "db", "", "fe80::1", "cache", "1.2.3.4:80", "a"}
	for range 2_000 {
		b.Reset()
		for i := range 1 + rng.IntN(60) {
			if i > 0 {
				b.WriteByte(',')
			}
			if rng.IntN(2) == 0 {
				b.WriteString(entries[rng.IntN(len(entries))])
			} else {
				b.WriteString("h" + strconv.Itoa(rng.IntN(40)))
			}
		}
		check(b.String())
	}
}

// FuzzQuantizeIPsMatchesAgent is TestQuantizeIPsMatchesAgent's comparison
// under the fuzzer: go test -fuzz FuzzQuantizeIPsMatchesAgent ./bench/peer.
func FuzzQuantizeIPsMatchesAgent(f *testing.F) {
	for _, v := range quantizeSeeds {
		f.Add(v)
	}
	f.Fuzz(func(t *testing.T, v string) {
		if got, want := aggregate.QuantizeIPs(v), obfuscate.QuantizePeerIPAddresses(v); got != want {
			t.Fatalf("QuantizeIPs(%q) = %q, the agent's %q", v, got, want)
		}
	})
}
