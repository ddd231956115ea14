// This file holds the helpers the package's internal tests share: a relay
// on a fixed clock, groups, headers, datagrams, and the accounting check.

package relay

import (
	"testing"
	"time"

	"github.com/spanstats/spanstats/aggregate"
	"github.com/spanstats/spanstats/writer"
)

// t0 is the tests' clock; w0 the start of the window before it.
var t0 = time.Unix(1_700_000_000, 0)

const sec = uint64(time.Second)

var w0 = uint64(t0.UnixNano()) - 10*sec

func newTestRelay(c Config) *Relay {
	if c.Now == nil {
		c.Now = func() time.Time { return t0 }
	}
	return New(c)
}

// entry is a group of key k with hits spans, errs of them errors, the ok
// latencies durs (ms) in its ok sketch.
func entry(k aggregate.Key, hits, errs uint64, durs ...float64) *aggregate.Entry {
	e := &aggregate.Entry{Key: k, Hits: hits, Errors: errs, TopLevelHits: hits}
	if len(durs) > 0 {
		e.Ok = new(aggregate.Sketch)
		for _, d := range durs {
			e.Ok.Add(d * 1e6)
			e.Duration += uint64(d * 1e6)
		}
	}
	return e
}

func key(resource string) aggregate.Key {
	return aggregate.Key{Service: "web", Name: "http.request", Resource: resource, SpanKind: "server", HTTPStatusCode: 200}
}

func header(runtimeID string) writer.Header {
	return writer.Header{Hostname: "h", Env: "prod", Version: "1", Lang: "go", TracerVersion: "v1",
		Service: "web", RuntimeID: runtimeID, Tags: []string{"b:2", "a:1"}}
}

func bucket(start, dur uint64, groups ...*aggregate.Entry) writer.Bucket {
	return writer.Bucket{Start: start, Duration: dur, Groups: groups}
}

// datagram is an enveloped datagram of sequence seq.
func datagram(seq uint64, h writer.Header, buckets ...writer.Bucket) []byte {
	b := writer.AppendEnvelope(nil, writer.Envelope{Sequence: seq})
	return writer.AppendPayload(b, &h, buckets)
}

func mustAccept(t testing.TB, r *Relay, d []byte, pid int32, tr Transport) {
	t.Helper()
	if err := r.Accept(d, pid, tr); err != nil {
		t.Fatalf("Accept: %v", err)
	}
}

// checkAccounting asserts received = forwarded + dropped + pending, and
// that held bytes are counted exactly when groups are held.
func checkAccounting(t testing.TB, r *Relay) Stats {
	t.Helper()
	s := r.Stats()
	var dropped uint64
	for _, v := range s.SpansDropped {
		dropped += v
	}
	if s.SpansReceived != s.SpansForwarded+dropped+s.SpansPending {
		t.Fatalf("accounting: received %d != forwarded %d + dropped %d + pending %d",
			s.SpansReceived, s.SpansForwarded, dropped, s.SpansPending)
	}
	if s.HeldBytes < 0 || (s.HeldBytes == 0) != (s.Groups == 0) {
		t.Fatalf("accounting: %d bytes held in %d groups", s.HeldBytes, s.Groups)
	}
	return s
}

// harvestAll harvests everything held and reports it forwarded and
// released, as the forwarder does once it has encoded a batch.
func harvestAll(t testing.TB, r *Relay) []Batch {
	t.Helper()
	out := r.Harvest(t0.Add(time.Hour))
	for i := range out {
		r.Forwarded(out[i].Hits)
		r.Release(&out[i])
	}
	if s := checkAccounting(t, r); s.SpansPending != 0 || s.Groups != 0 {
		t.Fatalf("after harvesting everything: pending %d, groups %d", s.SpansPending, s.Groups)
	}
	return out
}
