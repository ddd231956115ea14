// This file owns the gRPC status code a span is grouped by: the canonical
// number the agent's concentrator makes of what tracers write.

package stats

import (
	"strconv"
	"strings"
	"unicode"

	"github.com/spanstats/spanstats/internal/casefold"
)

// grpcNames are the names the agent's concentrator (v0.85.4) reads as a
// code: Google's enum names, and the spellings without underscores (and
// CANCELED) it maps too. Matched ignoring case.
var grpcNames = [...]struct{ name, code string }{
	{"OK", "0"}, {"CANCELLED", "1"}, {"CANCELED", "1"}, {"UNKNOWN", "2"},
	{"INVALID_ARGUMENT", "3"}, {"INVALIDARGUMENT", "3"}, {"DEADLINE_EXCEEDED", "4"}, {"DEADLINEEXCEEDED", "4"},
	{"NOT_FOUND", "5"}, {"NOTFOUND", "5"}, {"ALREADY_EXISTS", "6"}, {"ALREADYEXISTS", "6"},
	{"PERMISSION_DENIED", "7"}, {"PERMISSIONDENIED", "7"}, {"RESOURCE_EXHAUSTED", "8"}, {"RESOURCEEXHAUSTED", "8"},
	{"FAILED_PRECONDITION", "9"}, {"FAILEDPRECONDITION", "9"}, {"ABORTED", "10"},
	{"OUT_OF_RANGE", "11"}, {"OUTOFRANGE", "11"}, {"UNIMPLEMENTED", "12"}, {"INTERNAL", "13"},
	{"UNAVAILABLE", "14"}, {"DATA_LOSS", "15"}, {"DATALOSS", "15"}, {"UNAUTHENTICATED", "16"},
}

// CanonicalGRPCCode is the gRPC status code the agent groups a span by for
// s, the value a tracer gives (Span.GRPCStatusCode): a decimal number
// (leading zeros dropped, at most 2³²−1), or a code's name in any case
// (as strings.ToUpper sees it: "ı" is an "I", "ſ" an "S", the Kelvin sign
// no "K"),
// with or without underscores or a "StatusCode." prefix, becomes the
// code's number ("NOT_FOUND", "NotFound", "StatusCode.NOT_FOUND" and "05"
// all give "5"); anything else gives "", as the agent's concentrator has
// it. A value longer than 25 000 bytes gives "" too: the agent cuts such a
// tag value and appends "..." before its concentrator reads it, and
// reading it whole would cost Publish a millisecond a megabyte. Publish
// applies it; it allocates only for a code over 16 padded with zeros past
// maxPinnedCode bytes.
func CanonicalGRPCCode(s string) string {
	if s == "" || canonicalNumber(s) {
		return s
	}
	if len(s) > agentMaxMetaValLen {
		return ""
	}
	if n, ok := decimal32(s); ok {
		if n <= 16 {
			return grpcNames[codeIndex[n]].code
		}
		// n > 0: its canonical form is s without its leading zeros, a
		// substring, where formatting n would allocate; copied out of a
		// long s, which the recent-span caches would otherwise keep alive
		// whole while counting the few bytes of the code
		// (TestCanonicalGRPCCodeDoesNotPin).
		t := strings.TrimLeft(s, "0")
		if len(s) > maxPinnedCode {
			t = strings.Clone(t)
		}
		return t
	}
	s = strings.TrimPrefix(s, "StatusCode.")
	for _, c := range grpcNames {
		if casefold.Is(s, c.name, unicode.ToUpper) { // the agent's ToUpper, not EqualFold
			return c.code
		}
	}
	return ""
}

// agentMaxMetaValLen is the longest tag value the agent (v0.85.4,
// MaxMetaValLen in pkg/trace/agent's truncator) keeps whole: a longer one
// is cut there and ends in "...", which is no gRPC code.
const agentMaxMetaValLen = 25_000

// codeIndex is, for each code 0..16, an index in grpcNames of its name.
var codeIndex = func() (ix [17]int) {
	for i := len(grpcNames) - 1; i >= 0; i-- {
		n, _ := strconv.Atoi(grpcNames[i].code)
		ix[n] = i
	}
	return ix
}()

// decimal32 is s as a decimal number of at most 32 bits (as
// strconv.ParseUint(s, 10, 32), whose errors allocate).
func decimal32(s string) (uint64, bool) {
	var n uint64
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, false
		}
		if n = 10*n + uint64(s[i]-'0'); n > 1<<32-1 {
			return 0, false
		}
	}
	return n, true
}

// canonicalNumber reports whether s is already a code's canonical form: a
// decimal number without leading zeros that fits in 32 bits.
func canonicalNumber(s string) bool {
	if len(s) > 10 || s[0] == '0' && len(s) > 1 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return len(s) < 10 || s <= "4294967295"
}

// maxPinnedCode is the longest zero-padded code whose canonical form may
// stay a substring of it: longer, the few bytes are copied out.
const maxPinnedCode = 32
