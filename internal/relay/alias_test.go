package relay

import (
	"reflect"
	"testing"

	"github.com/spanstats/spanstats/aggregate"
	"github.com/spanstats/spanstats/writer"
)

// TestAcceptKeepsNoViewOfTheDatagram: Accept decodes strings as views of
// the datagram (writer.Decoder) and a reader reuses its buffers, so
// whatever the relay keeps — the identity's header, a new group's labels,
// the sender's runtime id — must be a copy. The first datagram's bytes are
// overwritten before the second (same sender, identity and group) and the
// harvest: both must still be recognised and forwarded intact.
func TestAcceptKeepsNoViewOfTheDatagram(t *testing.T) {
	r := newTestRelay(Config{})
	h := writer.Header{Hostname: "host-1", Env: "prod", Version: "1.2", Lang: "go", TracerVersion: "v2.1",
		RuntimeID: "rt-7", Service: "web", ContainerID: "c0ffee", Tags: []string{"a:1", "b:2"},
		GitCommitSha: "abc123", ImageTag: "v9", ProcessTags: "entrypoint:web"}
	k := aggregate.Key{Resource: "GET /users", Service: "web", Name: "http.request", Type: "web",
		SpanKind: "client", HTTPMethod: "GET", HTTPEndpoint: "/users", GRPCStatusCode: "0",
		ServiceSource: "opt.override", HTTPStatusCode: 200, PeerTags: []string{"peer.service:db", "peer.hostname:h2"}}
	for seq := uint64(1); seq <= 2; seq++ {
		d := datagram(seq, h, bucket(w0, 10*sec, entry(k, 3, 1, 5)))
		mustAccept(t, r, d, 0, UDP)
		for i := range d {
			d[i] = 'x' // the reader's next recvmmsg into this buffer
		}
	}
	if st := r.Stats(); st.Senders != 1 || st.SeqGaps != 0 || st.SeqRestarts != 0 || st.Groups != 1 {
		t.Fatalf("after two datagrams of one sender and group: senders %d, gaps %d, restarts %d, groups %d; want 1 0 0 1",
			st.Senders, st.SeqGaps, st.SeqRestarts, st.Groups)
	}
	out := harvestAll(t, r)
	if len(out) != 1 || len(out[0].Buckets) != 1 || len(out[0].Buckets[0].Groups) != 1 {
		t.Fatalf("harvest: %+v; want one payload of one bucket of one group", out)
	}
	got := out[0]
	want := h
	want.RuntimeID, want.Sequence = "", 0 // the relay sends its own
	if !reflect.DeepEqual(got.Header, want) {
		t.Errorf("forwarded header\n %+v\nwant\n %+v", got.Header, want)
	}
	g := got.Buckets[0].Groups[0]
	wantKey := k
	wantKey.PeerTags = []string{"peer.hostname:h2", "peer.service:db"} // a sorted set
	if !reflect.DeepEqual(g.Key, wantKey) || g.Hits != 6 || g.Errors != 2 {
		t.Errorf("forwarded group %+v, %d hits, %d errors; want %+v, 6, 2", g.Key, g.Hits, g.Errors, wantKey)
	}
}
