// This file checks writer.TypeSplitter against the agent's intake of client
// stats: its normalization of a group's labels, its obfuscation of SQL and
// Redis resources, the truncation of resources and the merge of a bucket's
// duplicates by a key without Type, all as agent.processStats (v0.85.4)
// runs them, on groups of adversarial labels.

package peer

import (
	"fmt"
	"math/rand/v2"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/DataDog/datadog-agent/pkg/obfuscate"
	pb "github.com/DataDog/datadog-agent/pkg/proto/pbgo/trace"
	"github.com/DataDog/datadog-agent/pkg/trace/config"
	"github.com/DataDog/datadog-agent/pkg/trace/filters"
	"github.com/DataDog/datadog-agent/pkg/trace/traceutil/normalize"

	"github.com/spanstats/spanstats/aggregate"
	"github.com/spanstats/spanstats/internal/relay"
	"github.com/spanstats/spanstats/writer"
)

// twinReplacer holds operator replace rules (DD_APM_REPLACE_TAGS) that make
// resources and status codes of the twin pools equal: a relay or tracer
// cannot read them, so the layout must hold whatever they are.
var twinReplacer = filters.NewReplacer([]*config.ReplaceRule{
	{Name: "resource.name", Re: regexp.MustCompile(`[0-9]+`), Repl: "?"},
	{Name: "http.status_code", Re: regexp.MustCompile(`^5[0-9][0-9]$`), Repl: "500"},
	{Name: "*", Re: regexp.MustCompile(`^(GET|SET) .*`), Repl: "$1"},
})

// agentIntakeGroup rewrites g as agent.processStats does before it merges
// duplicates: normalizeStatsGroup, obfuscateStatsGroup (the tracer sends no
// obfuscation version), TruncateResource and the replace rules of
// twinReplacer (the default configuration has none).
func agentIntakeGroup(obf *obfuscate.Obfuscator, g *pb.ClientGroupedStats, lang string) {
	g.Name, _ = normalize.NormalizeName(g.Name)
	g.Service, _ = normalize.NormalizeService(g.Service, lang)
	if g.Resource == "" {
		g.Resource = g.Name
	}
	switch g.Type {
	case "sql", "cassandra":
		if oq, err := obf.ObfuscateSQLStringForDBMS(g.Resource, g.DBType); err != nil {
			g.Resource = "Non-parsable SQL query"
		} else {
			g.Resource = oq.Query
		}
	case "redis", "valkey":
		g.Resource = obf.QuantizeRedisString(g.Resource)
	}
	g.Resource = normalize.TruncateUTF8(g.Resource, normalize.MaxResourceLen)
	twinReplacer.ReplaceStatsGroup(g)
}

// agentIntakeFiles decodes bodies as the agent's stats handler does, runs
// its intake on every group and, if merge, its merge of each bucket's
// duplicates (agent.mergeDuplicates); it totals the hits filed per bucket
// start, aggregation key and Type.
func agentIntakeFiles(t *testing.T, bodies [][]byte, lang string, merge bool) map[filedKey]uint64 {
	t.Helper()
	obf := obfuscate.NewObfuscator(obfuscate.Config{})
	defer obf.Stop()
	return filedByAgent(t, bodies, func(g *pb.ClientGroupedStats) { agentIntakeGroup(obf, g, lang) }, merge)
}

// Adversarial labels: case, characters the normalizer replaces or drops,
// non-ASCII runes that lower to ASCII (U+0130, U+212A) or change width,
// invalid UTF-8, the agent's fallbacks, and lengths about its limits with
// a multi-byte rune across the cut.
var (
	twinServices = []string{"web", "Web", "WEB", "web!", "w-e-b", "wéb", "WÉB", "\u0130web", "iweb", "\u212aafka",
		"kafka", "Kafka", "ß", "ss", "SS", "\xffweb", "web\xff", "", "!!", "unnamed-go-service", "Unnamed-Go-Service",
		"unnamed-service", "ſ", "σ", "Σ", strings.Repeat("s", 99) + "é", strings.Repeat("s", 99) + "\u212a",
		strings.Repeat("s", 100), strings.Repeat("s", 99), strings.Repeat("S", 100) + "x"}
	twinNames = []string{"op", "OP", "Op", "op!", "op_", "1op", "_op", "o.p", "o_p", "o__p", "", "!!", "123",
		"unnamed_operation", "öp", "\u212aop", "kop", "op\xff", strings.Repeat("n", 99) + "é",
		strings.Repeat("n", 100), strings.Repeat("n", 100) + "x", "postgres.query", "redis.command"}
	twinResources = []string{"", "", "op", "OP", "Op", "r", "R", "r!", "r ", "é", "É", "\xff", "SELECT 1", "SELECT 2",
		"SELECT ?", "select ?", "SELECT * FROM t WHERE id = 42", "SELECT * FROM t WHERE id = ?",
		"SELECT /* c */ a FROM t", "SELECT a FROM t", "SET k v", "SET", "GET a", "GET", "unnamed_operation",
		"postgres.query", strings.Repeat("r", 4999) + "é", strings.Repeat("r", 4999), strings.Repeat("r", 5000) + "x"}
	twinTypes = []string{"web", "sql", "cassandra", "redis", "valkey", "http", "", "SQL", "db"}
)

func pickOf(r *rand.Rand, v []string) string { return v[r.IntN(len(v))] }

// twinEntry is a group of labels drawn from small adversarial pools, so
// that a bucket holds groups the agent merges.
func twinEntry(r *rand.Rand) *aggregate.Entry {
	e := &aggregate.Entry{Hits: r.Uint64N(1000) + 1, Duration: r.Uint64N(1 << 40)}
	e.Errors = r.Uint64N(min(e.Hits, 2) + 1)
	e.Service, e.Name, e.Resource, e.Type = pickOf(r, twinServices), pickOf(r, twinNames), pickOf(r, twinResources), pickOf(r, twinTypes)
	if r.IntN(2) == 0 { // the other fields mostly alike, so that twins are common
		e.SpanKind = pickOf(r, []string{"client", "server", "Client"})
		e.HTTPStatusCode = []uint32{200, 500, 503}[r.IntN(3)]
		e.IsTraceRoot = aggregate.Trilean(r.IntN(3))
		e.Synthetics = r.IntN(4) == 0
		e.GRPCStatusCode = pickOf(r, []string{"", "0", "OK"})
		e.HTTPMethod = pickOf(r, []string{"", "GET", "get"})
		e.HTTPEndpoint = pickOf(r, []string{"", "/a", "/A"})
		e.ServiceSource = pickOf(r, []string{"", "opt.x"})
		e.PeerTags = [][]string{nil, {"peer.service:a"}, {"db.system:pg", "peer.service:a"}}[r.IntN(3)]
	}
	return e
}

// TestTypeSplitterAgainstAgentIntake: random buckets of groups with
// adversarial labels, laid out by TypeSplitter, packed and sent: the agent,
// normalizing, obfuscating and merging each bucket's duplicates, files
// every group's hits under its own Type, exactly as it would file the
// groups each alone; and a bucket is laid out as at most as many buckets
// as it has Types.
func TestTypeSplitterAgainstAgentIntake(t *testing.T) {
	for _, lang := range []string{"go", ""} {
		h := &writer.Header{Lang: lang, Hostname: "h"}
		var ts writer.TypeSplitter
		for seed := range uint64(300) {
			r := rand.New(rand.NewPCG(seed, 11))
			var buckets []writer.Bucket
			types := map[uint64]map[string]bool{}
			for b := range r.IntN(3) + 1 {
				bk := writer.Bucket{Start: uint64(b) * 10e9, Duration: 10e9}
				types[bk.Start] = map[string]bool{}
				for range r.IntN(150) + 1 {
					e := twinEntry(r)
					bk.Groups = append(bk.Groups, e)
					types[bk.Start][e.Type] = true
				}
				buckets = append(buckets, bk)
			}
			laid := ts.Split(nil, buckets)
			layers := map[uint64]int{}
			for _, b := range laid {
				layers[b.Start]++
			}
			for start, n := range layers {
				if n > len(types[start]) {
					t.Errorf("lang %q, seed %d: the bucket at %d of %d Types is laid out as %d", lang, seed, start, len(types[start]), n)
				}
			}
			body := writer.AppendPayload(nil, h, laid)
			checkIntake(t, fmt.Sprintf("lang %q, seed %d", lang, seed), [][]byte{body}, lang)
			if t.Failed() {
				dumpTwins(t, buckets)
				return
			}
			ts.Release()
		}
	}
}

// TestRelayTwinsAgainstAgentIntake: random groups with adversarial labels
// sent to a relay by a few senders of one identity, each bucket as one
// sender laid it out or not at all: what the relay forwards, the agent,
// normalizing, obfuscating and merging each bucket's duplicates, files
// every group's hits under its own Type, exactly as it would file the
// groups each alone.
func TestRelayTwinsAgainstAgentIntake(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	start := uint64(now.Truncate(10 * time.Second).UnixNano())
	for seed := range uint64(200) {
		r := rand.New(rand.NewPCG(seed, 13))
		rl := relay.New(relay.Config{Now: func() time.Time { return now }, MaxDatagram: 1 << 24})
		var sent []writer.Bucket
		types := map[string]bool{}
		for sender := range r.IntN(3) + 1 {
			h := writer.Header{Lang: "go", Hostname: "h", RuntimeID: fmt.Sprint(sender)}
			bk := writer.Bucket{Start: start, Duration: 10e9}
			for range r.IntN(150) + 1 {
				e := twinEntry(r)
				bk.Groups = append(bk.Groups, e)
				types[e.Type] = true
			}
			sent = append(sent, bk)
			body := writer.AppendPayload(writer.AppendEnvelope(nil, writer.Envelope{Sequence: 1}), &h, []writer.Bucket{bk})
			if err := rl.Accept(body, 0, relay.UDP); err != nil {
				t.Fatalf("seed %d: Accept: %v", seed, err)
			}
		}
		var bodies [][]byte
		p := writer.Packer{Limit: 1 << 30} // one payload: one bucket a layer
		batches := rl.Harvest(now.Add(time.Hour))
		for _, b := range batches {
			p.PackPayload(&b.Payload, func(body []byte, _ uint64) { bodies = append(bodies, body) })
		}
		if len(batches) != 1 || len(bodies) != 1 {
			t.Fatalf("seed %d: %d batches packed as %d payloads, want one", seed, len(batches), len(bodies))
		}
		if n := len(batches[0].Buckets); n > len(types) {
			t.Errorf("seed %d: the window of %d Types is forwarded as %d buckets", seed, len(types), n)
		}
		checkIntake(t, fmt.Sprintf("seed %d", seed), bodies, "go")
		if t.Failed() {
			dumpTwins(t, sent)
			return
		}
	}
}

// checkIntake checks that the agent files every group of bodies under its
// own Type when it merges each bucket's duplicates.
func checkIntake(t *testing.T, what string, bodies [][]byte, lang string) {
	t.Helper()
	want := agentIntakeFiles(t, bodies, lang, false)
	got := agentIntakeFiles(t, bodies, lang, true)
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s: %q/%q/%q type %q at %d filed with %d hits, want %d",
				what, k.agg.Service, k.agg.Name, trim(k.agg.Resource), k.typ, k.start, got[k], v)
		}
	}
}

func trim(s string) string {
	if len(s) > 40 {
		return fmt.Sprintf("%s…(%d bytes)", s[:40], len(s))
	}
	return s
}

func dumpTwins(t *testing.T, buckets []writer.Bucket) {
	t.Helper()
	for _, b := range buckets {
		for _, e := range b.Groups {
			t.Logf("  %d: %q/%q/%q type %q kind %q", b.Start, trim(e.Service), trim(e.Name), trim(e.Resource), e.Type, e.SpanKind)
		}
	}
}

// FuzzTypeSplitterAgainstAgentIntake: two groups of any labels, peer tags
// (p1, p2: comma-separated) and Types in one bucket, laid out by
// TypeSplitter and sent: the agent files each one's hits under its own
// Type.
func FuzzTypeSplitterAgainstAgentIntake(f *testing.F) {
	f.Add("Web", "op!", "", "web", "", "web", "op", "op", "sql", "")
	f.Add("web", "op", "SELECT 1", "sql", "", "web", "op", "SELECT ?", "web", "")
	f.Add("\u212aafka", "\u0130op", "SET k v", "redis", "", "kafka", "iop", "SET", "cache", "")
	f.Add("", "", "", "", "", "unnamed-go-service", "unnamed_operation", "unnamed_operation", "x", "")
	// Peer tags that join alike with 0 bytes, as the agent hashes them.
	f.Add("web", "op", "r", "web", "a:1,b:2", "web", "op", "r", "http", "a:1\x00b:2")
	f.Fuzz(func(t *testing.T, s1, n1, r1, t1, p1, s2, n2, r2, t2, p2 string) {
		if t1 == t2 {
			return
		}
		a, b := &aggregate.Entry{Hits: 1}, &aggregate.Entry{Hits: 2}
		a.Service, a.Name, a.Resource, a.Type, a.PeerTags = s1, n1, r1, t1, peerTagList(p1)
		b.Service, b.Name, b.Resource, b.Type, b.PeerTags = s2, n2, r2, t2, peerTagList(p2)
		var ts writer.TypeSplitter
		laid := ts.Split(nil, []writer.Bucket{{Start: 10e9, Duration: 10e9, Groups: []*aggregate.Entry{a, b}}})
		checkIntake(t, "", [][]byte{writer.AppendPayload(nil, &writer.Header{Lang: "go"}, laid)}, "go")
	})
}

// peerTagList is a comma-separated list as an entry holds peer tags:
// sorted, without duplicates.
func peerTagList(s string) []string {
	if s == "" {
		return nil
	}
	v := strings.Split(s, ",")
	slices.Sort(v)
	return slices.Compact(v)
}
