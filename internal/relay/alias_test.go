// This file tests that nothing the relay holds after Accept points into
// the datagram it was decoded from.

package relay

import (
	"fmt"
	"reflect"
	"testing"
	"unsafe"

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

// TestHeldStringsPinNoDatagram: no string or slice the relay holds points
// into a datagram it accepted — not even an empty one, whose pointer the
// GC follows all the same: a held group of an empty label decoded as a view
// would keep its whole read buffer (64 KiB) alive for the interval.
func TestHeldStringsPinNoDatagram(t *testing.T) {
	r := newTestRelay(Config{})
	var bufs [][]byte
	for i := range 3 {
		k := aggregate.Key{Resource: fmt.Sprint("GET /", i), Service: "web", PeerTags: []string{"", "peer.service:db"}}
		h := header(fmt.Sprint("rt-", i))
		h.Tags = []string{"", "a:1"}
		d := datagram(1, h, bucket(w0, 10*sec, entry(k, 1, 0, 5)))
		mustAccept(t, r, d, 0, UDP)
		bufs = append(bufs, d)
	}
	if s := r.Stats(); s.Groups != 3 {
		t.Fatalf("%d groups held, want 3", s.Groups)
	}
	views := 0
	var walk func(v reflect.Value, path string)
	walk = func(v reflect.Value, path string) {
		var p uintptr
		switch v.Kind() {
		case reflect.Pointer:
			if !v.IsNil() {
				walk(v.Elem(), path)
			}
			return
		case reflect.Struct:
			for i := range v.NumField() {
				walk(v.Field(i), path+"."+v.Type().Field(i).Name)
			}
			return
		case reflect.Map:
			for it := v.MapRange(); it.Next(); {
				walk(it.Value(), path+"[k]")
			}
			return
		case reflect.Slice:
			for i := range v.Len() {
				walk(v.Index(i), fmt.Sprint(path, "[", i, "]"))
			}
			p = v.Pointer()
		case reflect.String:
			p = uintptr(unsafe.Pointer(unsafe.StringData(v.String())))
		default:
			return
		}
		for _, b := range bufs {
			if start := uintptr(unsafe.Pointer(unsafe.SliceData(b))); p >= start && p <= start+uintptr(cap(b)) {
				views++
				t.Errorf("%s (%s) points into an accepted datagram", path, v.Type())
			}
		}
	}
	walk(reflect.ValueOf(&r.st).Elem(), "state")
	walk(reflect.ValueOf(&r.senders).Elem(), "senders")
	if views == 0 {
		harvestAll(t, r) // and the harvest still finds every group
	}
}
