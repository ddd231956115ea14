// This file owns the quantization of IP addresses in peer-tag values: the
// agent's concentrator groups "out.host:10.1.2.3" and "out.host:10.1.2.4"
// as one "out.host:blocked-ip-address", so the SDK must too.

package aggregate

import (
	"encoding/binary"
	"math"
	"net/netip"
	"strings"
	"unsafe"
)

// BlockedIP stands in a peer-tag value for an IP address, as the agent's
// obfuscator (v0.85.4, QuantizePeerIPAddresses) writes it.
const BlockedIP = "blocked-ip-address"

// maxQuantized bounds the quantized tags a Table keeps to hand out the same
// string for the same tag; past it they are forgotten and made again.
const maxQuantized = 4096

// quantizeTag returns tag ("key:value", its first colon at i) with the IP
// addresses of its value quantized (quantizeValue), as a string the table
// keeps, or tag itself when nothing changes: allocation-free but for a
// quantized tag new to the table.
func (t *Table) quantizeTag(tag string, i int) string {
	if i < 0 || !mayHoldIP(tag[i+1:]) {
		return tag
	}
	b, changed := quantizeValue(append(t.qbuf[:0], tag[:i+1]...), tag[i+1:], math.MaxInt)
	t.qbuf = b
	if !changed {
		return tag
	}
	if s, ok := t.quantized[string(b)]; ok {
		return s
	}
	if t.quantized == nil || len(t.quantized) >= maxQuantized {
		t.quantized = make(map[string]string)
	}
	s := string(b)
	t.quantized[s] = s
	return s
}

// mayHoldIP is a quick test passed by every value quantizeValue changes,
// which most peer-tag values, host and service names, fail at their first
// byte (BenchmarkConsumer/HighCardinalityPeer): a list (a comma: its
// duplicates go), or an address where quantizeEntry looks for one. That is
// at the start, or after "ip-" or a scheme's "://"; an IPv4 address starts
// with a digit, an IPv6 one with a hex digit or ':' and holds a ':', a
// bracketed one with '['.
func mayHoldIP(v string) bool {
	if v == "" {
		return false
	}
	c := v[0]
	if c >= '0' && c <= '9' || c == ':' || c == '[' || c == 'i' && strings.HasPrefix(v, "ip-") {
		return true
	}
	// A scheme's "://" and an IPv6 address both need a colon, a list a
	// comma: one pass finds whether there is either.
	if !hasColonOrComma(v) {
		return false
	}
	i := strings.IndexByte(v, ':')
	return i >= 0 && (isHex(c) || strings.Contains(v[i:], "://")) || strings.IndexByte(v, ',') >= 0
}

// hasColonOrComma reports whether v holds a ':' or a ',', eight bytes at a
// time: the consumer asks it of every peer-tag value it keys.
func hasColonOrComma(v string) bool {
	const ones, highs = 0x0101010101010101, 0x8080808080808080
	b := unsafe.Slice(unsafe.StringData(v), len(v))
	if len(b) < 8 {
		for _, c := range b {
			if c == ':' || c == ',' {
				return true
			}
		}
		return false
	}
	// The last word overlaps the one before it: no byte-by-byte tail.
	for last := len(b) - 8; ; {
		x := binary.LittleEndian.Uint64(b)
		colon, comma := x^(':'*ones), x^(','*ones)
		// A zero byte in either: the classic has-zero-byte test.
		if ((colon-ones)&^colon|(comma-ones)&^comma)&highs != 0 {
			return true
		}
		if last == 0 {
			return false
		}
		n := min(8, last)
		b, last = b[n:], last-n
	}
}

// linearScanEntries is how many kept entries quantizeValue compares one by one
// before it switches to a set: a tag holding thousands of entries (Table.Add
// does not bound its length) then costs linear time, not quadratic.
const linearScanEntries = 16

// quantizeValue appends v to dst with each comma-separated entry that is an
// IP address quantized (quantizeEntry) and duplicate entries after that
// dropped, as the agent's QuantizePeerIPAddresses does, and reports whether
// that differs from v. It stops once it appended more than max bytes: later
// entries only add to the end.
func quantizeValue(dst []byte, v string, max int) ([]byte, bool) {
	base := len(dst)
	var spans [linearScanEntries][2]int // [start, end) in dst of the entries kept, to find duplicates
	kept := spans[:0]
	var seen map[string]struct{} // past linearScanEntries kept entries: a long list stays linear
	for from := 0; ; {
		j := strings.IndexByte(v[from:], ',')
		entry := v[from:]
		if j >= 0 {
			entry = v[from : from+j]
		}
		mark := len(dst)
		if len(kept) > 0 {
			dst = append(dst, ',')
		}
		at := len(dst)
		dst = appendEntry(dst, entry)
		dup := false
		if seen != nil {
			_, dup = seen[string(dst[at:])]
		} else {
			for _, r := range kept {
				if dup = string(dst[r[0]:r[1]]) == string(dst[at:]); dup {
					break
				}
			}
		}
		switch {
		case dup:
			dst = dst[:mark]
		case seen != nil:
			seen[string(dst[at:])] = struct{}{}
		case len(kept) == linearScanEntries:
			seen = make(map[string]struct{}, 2*linearScanEntries)
			for _, r := range kept {
				seen[string(dst[r[0]:r[1]])] = struct{}{}
			}
			seen[string(dst[at:])] = struct{}{}
		default:
			kept = append(kept, [2]int{at, len(dst)})
		}
		if j < 0 {
			break
		}
		if n := len(dst) - base; n > max {
			// The rest unread: unchanged if what was kept is v's own
			// start (then v's first max bytes are the result's too).
			return dst, n > len(v) || string(dst[base:]) != v[:n]
		}
		from += j + 1
	}
	return dst, string(dst[base:]) != v
}

// appendEntry appends e, quantized if it is an IP address.
func appendEntry(dst []byte, e string) []byte {
	prefix, port, suffix, ok := quantizeEntry(e)
	if !ok {
		return append(dst, e...)
	}
	dst = append(append(dst, prefix...), BlockedIP...)
	if port != "" {
		dst = append(append(dst, ':'), port...)
	}
	return append(dst, suffix...)
}

// allowedIPs are kept as they are: loopback and the cloud providers'
// metadata endpoints, which name no peer.
var allowedIPs = [...]string{"127.0.0.1", "::1", "169.254.169.254", "fd00:ec2::254", "169.254.170.2"}

// quantizeEntry reports whether e is an IP address to quantize, as the
// agent's quantizeIP reads one: after an optional "ip-" or scheme prefix
// (dnspoll, ftp, file, http, https, with "://" or ":///"), an address with
// an optional port (a bracketed IPv6 one too), and after an IPv4 address
// (octets separated by '.', '_' or '-') any text. The quantized entry is
// prefix + BlockedIP + (":" + port) + suffix.
func quantizeEntry(e string) (prefix, port, suffix string, ok bool) {
	prefix, rest := schemePrefix(e)
	host, port, valid := splitHostPort(rest)
	if !valid {
		host, port = rest, ""
	}
	n, isIP := ipLen(host)
	if !isIP {
		return "", "", "", false
	}
	for _, a := range allowedIPs {
		if host[:n] == a {
			return "", "", "", false
		}
	}
	return prefix, port, host[n:], true
}

var schemes = [...]string{"dnspoll", "ftp", "file", "http", "https"}

// schemePrefix splits off what the agent takes for a prefix: "ip-" at the
// start (AWS host names), or the first scheme found anywhere in e with
// "://" or ":///" after it and something after that. Text before the
// scheme is dropped, as the agent drops it.
func schemePrefix(e string) (prefix, rest string) {
	if r, ok := strings.CutPrefix(e, "ip-"); ok {
		return "ip-", r
	}
	// Every scheme needs a "://" after it: one search rules out all five
	// for the usual "10.1.2.3:9092" entry (BenchmarkQuantizeIPList).
	if !strings.Contains(e, "://") {
		return "", e
	}
	for _, s := range schemes {
		i := strings.Index(e, s)
		if i < 0 {
			continue
		}
		for _, sep := range [...]string{":///", "://"} {
			if end := i + len(s) + len(sep); end < len(e) && e[i+len(s):end] == sep {
				return e[i:end], e[end:]
			}
		}
	}
	return "", e
}

// splitHostPort is net.SplitHostPort's split, as the agent's copy of it has
// it, reporting failure instead of an error: host is before the last colon
// (in brackets for an IPv6 address), port after it.
func splitHostPort(hp string) (host, port string, ok bool) {
	i := strings.LastIndexByte(hp, ':')
	if i < 0 {
		return "", "", false
	}
	lo, hi := 0, 0 // no '[' may follow lo, no ']' follow hi
	if hp[0] == '[' {
		end := strings.IndexByte(hp, ']')
		if end < 0 || end+1 != i {
			return "", "", false
		}
		host, lo, hi = hp[1:end], 1, end+1
	} else {
		host = hp[:i]
		if strings.IndexByte(host, ':') >= 0 {
			return "", "", false
		}
	}
	if strings.IndexByte(hp[lo:], '[') >= 0 || strings.IndexByte(hp[hi:], ']') >= 0 {
		return "", "", false
	}
	return host, hp[i+1:], true
}

// ipLen reports whether s starts with an IP address as the agent reads
// one, and its length: the first of '.', '_', '-', ':' or '%' in s decides
// (an IPv4 address with that separator, all of s an IPv6 address, or
// neither); s must start with a hex digit or ':'.
func ipLen(s string) (int, bool) {
	if s == "" || !(isHex(s[0]) || s[0] == ':') {
		return 0, false
	}
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '.', '_', '-':
			return ipv4Len(s, s[i])
		case ':':
			if _, err := netip.ParseAddr(s); err == nil {
				return len(s), true
			}
			return 0, false
		case '%':
			return 0, false
		}
	}
	return 0, false
}

func isHex(c byte) bool { return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F' }

// ipv4Len reports whether s starts with four decimal octets (no leading
// zero, at most 255) separated by sep, and where they end: at the fifth
// separator (not the last byte), or at the first other byte after a digit
// of the fourth octet.
func ipv4Len(s string, sep byte) (int, bool) {
	octets, val, digits := 0, 0, 0 // separators seen; the octet's value and digits
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c >= '0' && c <= '9':
			if digits == 1 && val == 0 {
				return 0, false // a leading zero
			}
			val = 10*val + int(c-'0')
			digits++
			if val > 255 {
				return 0, false
			}
		case c == sep:
			if i == 0 || i == len(s)-1 || s[i-1] == sep {
				return 0, false
			}
			if octets == 3 {
				return i, true
			}
			octets++
			val, digits = 0, 0
		default:
			if octets == 3 && digits > 0 {
				return i, true
			}
			return 0, false
		}
	}
	if octets < 3 {
		return 0, false
	}
	return len(s), true
}

// LastEntryKept reports whether quantizing v (QuantizeIPs) leaves its last
// comma-separated entry as it is: not an IP address to quantize, nor a
// repeat of an earlier entry. For a value whose earlier entries are
// quantized and distinct already (a cut of what QuantizeTagTo returns),
// that is whether QuantizeIPs(v) == v, found without allocating.
func LastEntryKept(v string) bool {
	j := strings.LastIndexByte(v, ',')
	last := v[j+1:]
	if _, _, _, ok := quantizeEntry(last); ok {
		return false
	}
	for rest := v[:max(j, 0)]; j >= 0; {
		i := strings.LastIndexByte(rest, ',')
		if rest[i+1:] == last {
			return false
		}
		if i < 0 {
			break
		}
		rest = rest[:i]
	}
	return true
}

// QuantizeIPs returns the peer-tag value v as the table keys it: each
// comma-separated entry that is an IP address (with an optional port,
// scheme or "ip-" prefix) replaced by BlockedIP, loopback and cloud
// metadata addresses excepted, and duplicate entries dropped, as the
// agent's concentrator (v0.85.4, obfuscate.QuantizePeerIPAddresses) does
// before it groups by peer tags. bench/peer's TestQuantizeIPsMatchesAgent
// compares the two.
func QuantizeIPs(v string) string {
	if !mayHoldIP(v) { // quantizeTag's pre-check: the comparison with the agent covers both
		return v
	}
	b, changed := quantizeValue(nil, v, math.MaxInt)
	if !changed {
		return v
	}
	return string(b)
}

// QuantizeIPsTo is QuantizeIPs for a value about to be cut to max bytes:
// QuantizeIPs(v) when that is at most max bytes long, else a value longer
// than max whose first max bytes are QuantizeIPs(v)'s. Each entry is
// compared with those kept before it, so it stops there, and it reads v
// only up to its last comma within 4*max bytes, or up to 4*max bytes when
// an entry runs past them: a value of any length costs bounded time.
// whole reports that it read all of v; when it did not, q may differ from
// QuantizeIPs(v)'s first max bytes: when q is at most max bytes (the
// entries left unread would have added to it, or been duplicates), and
// when an entry longer than 4*max turns on bytes past them (a scheme
// there), and the caller should count the value as cut.
func QuantizeIPsTo(v string, max int) (q string, whole bool) {
	q, whole, _ = quantizeTagTo(v, -1, max, false)
	return q, whole
}

// QuantizeTagTo is QuantizeIPsTo for the value of tag ("key:value", its
// first colon at c), for a tag about to be cut: it returns the tag with its
// value so quantized, a slice of tag when that changes nothing, else built
// in one allocation. When it read the value whole and the quantized value
// is at most max bytes, it returns tag itself and fits: quantized again
// (as a Table does), it comes out the same, and it costs no allocation
// here (TestLongPeerTagsAllocateOnceAtMost in stats).
func QuantizeTagTo(tag string, c, max int) (q string, whole, fits bool) {
	return quantizeTagTo(tag, c, max, true)
}

// quantizeTagTo is QuantizeTagTo; c = -1 quantizes all of tag, and
// keepFit false builds the quantized tag even where it fits.
func quantizeTagTo(tag string, c, max int, keepFit bool) (q string, whole, fits bool) {
	if max <= 0 {
		return tag, true, false
	}
	v := tag[c+1:]
	whole = true
	// min: 4*max wraps negative for a max past math.MaxInt/4.
	if n := 4 * min(max, len(v)); len(v) > n {
		whole = false
		if i := strings.LastIndexByte(v[:n], ','); i > max {
			v = v[:i]
		} else {
			// The entry that crosses max runs past n: read whole, a
			// megabyte tag would cost each Publish milliseconds.
			v = v[:n]
		}
	}
	if !mayHoldIP(v) {
		return tag[:c+1+len(v)], whole, false
	}
	// On the stack, room for the most quantizeValue writes here (max and
	// the entry that crosses it, of at most 4*max bytes, with its
	// BlockedIP) for a tag of stats.MaxTagLen: only a result kept is
	// copied to the heap, once.
	var scratch [1024]byte
	b, changed := quantizeValue(append(scratch[:0], tag[:c+1]...), v, max)
	switch {
	case !changed:
		return tag[:c+1+len(v)], whole, false
	case keepFit && whole && len(b)-(c+1) <= max:
		return tag, true, true
	}
	// Past max, a byte more is all a cut reads: the copy kept (and the
	// cut of it a record holds) is no longer than that.
	if len(b)-(c+1) > max { // so c+1+max+1 <= len(b): no overflow
		b = b[:c+1+max+1]
	}
	return string(b), whole, false
}
