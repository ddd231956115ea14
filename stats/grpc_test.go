// This file tests the gRPC status code a span is grouped by: the canonical
// number, as the agent reads it, and spans grouped under it.

package stats

import (
	"strings"
	"testing"
	"unsafe"

	"github.com/spanstats/spanstats/stats/statstest"
)

// TestCanonicalGRPCCode: the codes as the agent's concentrator (v0.85.4,
// parseGRPCStatusString) reads them; bench/peer's TestRandomSpansMatchAgent
// compares with the agent itself.
func TestCanonicalGRPCCode(t *testing.T) {
	for in, want := range map[string]string{
		"": "", "0": "0", "5": "5", "16": "16", "17": "17", "05": "5", "0000": "0", "0170": "170", "4294967295": "4294967295", "004294967295": "4294967295",
		"4294967296": "", "-1": "", "+5": "", " 5": "", "5 ": "",
		"NOT_FOUND": "5", "not_found": "5", "NotFound": "5", "NOTFOUND": "5", "StatusCode.NOT_FOUND": "5",
		"StatusCode.notfound": "5", "statuscode.NOT_FOUND": "", "StatusCode.5": "", "OK": "0", "ok": "0",
		"Canceled": "1", "CANCELLED": "1", "UNAUTHENTICATED": "16", "DATA_LOSS": "15", "DataLoss": "15",
		"bogus": "", "NOT FOUND": "", "Unimplemented": "12",
		// strings.ToUpper, not case folding: ı is I, ſ is S, Kelvin is no K.
		"\u0131nternal": "13", "alreadyexi\u017Fts": "6", "UN\u212ANOWN": "", "un\u212Anown": "", "NOT_FOUN\xc4": "",
	} {
		if got := CanonicalGRPCCode(in); got != want {
			t.Errorf("CanonicalGRPCCode(%q) = %q, want %q", in, got, want)
		}
	}
	// The agent reads a tag value of up to 25 000 bytes whole; a longer
	// one it cuts and ends in "...", no code: a megabyte of zeros before a
	// 5 is not read to the end.
	for n, want := range map[int]string{agentMaxMetaValLen: "5", agentMaxMetaValLen + 1: "", 1 << 20: ""} {
		in := strings.Repeat("0", n-1) + "5"
		if got := CanonicalGRPCCode(in); got != want {
			t.Errorf("CanonicalGRPCCode(%d zero-padded bytes ending in 5) = %q, want %q", n, got, want)
		}
	}
	if got := CanonicalGRPCCode(strings.Repeat("x", agentMaxMetaValLen+1)); got != "" {
		t.Errorf("CanonicalGRPCCode(25 001 bytes) = %q, want \"\"", got)
	}
	for _, in := range []string{"5", "NOT_FOUND", "notfound", "05", "0170", "StatusCode.Unavailable", "bogus", "\u0131nternal"} {
		if n := testing.AllocsPerRun(100, func() { _ = CanonicalGRPCCode(in) }); n != 0 {
			t.Errorf("CanonicalGRPCCode(%q) allocates %v times", in, n)
		}
	}
}

// TestGRPCCodesGroupAsTheAgent: spans whose codes name the same code in
// different ways are one group, under its number.
func TestGRPCCodesGroupAsTheAgent(t *testing.T) {
	ag := statstest.New()
	defer ag.Close()
	a := newStarted(t, Config{AgentURL: ag.URL()})
	for _, c := range []string{"5", "NOT_FOUND", "NotFound", "StatusCode.NOT_FOUND", "05", "bogus", ""} {
		a.Publish(&Span{Service: "s", Name: "grpc.client", Resource: "/pkg.Svc/Get", SpanKind: "client", GRPCStatusCode: c, Duration: 10})
	}
	stop(t, a)
	got := map[string]uint64{}
	for _, r := range ag.Requests() {
		for _, b := range r.Payload.Buckets {
			for _, g := range b.Groups {
				got[g.GRPCStatusCode] += g.Hits
			}
		}
	}
	if len(got) != 2 || got["5"] != 5 || got[""] != 2 {
		t.Fatalf("hits by gRPC code %v; want 5 under \"5\" and 2 without", got)
	}
}

// TestCanonicalGRPCCodeDoesNotPin: the canonical form of a long
// zero-padded code does not share its memory: the recent-span caches keep
// label strings alive counting their lengths, and a 2-byte substring of a
// 24 KB value kept the whole value (review: 1000 such spans, 21 MiB live
// against a 1 MiB cap). A short padded one may stay a substring.
func TestCanonicalGRPCCodeDoesNotPin(t *testing.T) {
	long := strings.Repeat("0", 24<<10) + "17"
	got := CanonicalGRPCCode(long)
	if got != "17" {
		t.Fatalf("CanonicalGRPCCode(24 KiB of zeros + 17) = %q", got)
	}
	if unsafe.StringData(got) == unsafe.StringData(long[len(long)-2:]) {
		t.Fatal("the canonical code of a 24 KiB value is a substring of it: it keeps the value alive")
	}
	short := "0017"
	if got := CanonicalGRPCCode(short); got != "17" || unsafe.StringData(got) != unsafe.StringData(short[2:]) {
		t.Fatalf("CanonicalGRPCCode(%q) = %q, copied: want the substring, no allocation", short, got)
	}
}
