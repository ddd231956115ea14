// This file tests the base-service peer tag against the agent's rule: kept
// outside the key list for an internal span or one without kind, and not
// kept at all with an empty list.

package aggregate

import (
	"slices"
	"testing"
)

// TestBaseServiceKeptOutsideList: with a key list that lacks
// "_dd.base_service", the one base-service tag of an internal span or one
// without kind is kept (the agent's rule), that of a client, server or
// other span is not; without allocating.
func TestBaseServiceKeptOutsideList(t *testing.T) {
	tb := NewTable(0)
	tb.SetPeerTagKeys([]string{"peer.service"})
	for _, tc := range []struct {
		kind string
		want []string
	}{
		{"internal", []string{"_dd.base_service:web"}},
		{"INTERNAL", []string{"_dd.base_service:web"}},
		{"", []string{"_dd.base_service:web"}},
		{"weird", nil},
		{"server", nil},
		{"SERVER", nil},
		{"client", nil},
		{"PRODUCER", nil},
		{"cl\u0130ent", nil},
		{"Consumer", nil},
	} {
		r := Record{SpanKind: tc.kind, NumPeerTags: 1}
		r.PeerTags[0] = "_dd.base_service:web"
		if got := tb.keptPeers(&r); !slices.Equal(got, tc.want) {
			t.Errorf("kind %q: kept %q, want %q", tc.kind, got, tc.want)
		}
		if n := testing.AllocsPerRun(50, func() { tb.keptPeers(&r) }); n != 0 {
			t.Errorf("kind %q: keptPeers allocates %v times", tc.kind, n)
		}
	}
	r := Record{SpanKind: "internal", NumPeerTags: 1}
	r.PeerTags[0] = "_dd.base_service:"
	if got := tb.keptPeers(&r); len(got) != 0 {
		t.Errorf("empty base service kept: %q", got)
	}
}

// TestEmptyPeerTagListKeepsNothing: an empty key list (the agent's /info
// with "peer_tags": []) keeps no tag, the base service of an internal span
// included: the agent's peerTagKeysToAggregateForSpan answers nil for an
// empty list before it looks at the span's kind.
func TestEmptyPeerTagListKeepsNothing(t *testing.T) {
	tb := NewTable(0)
	tb.SetPeerTagKeys([]string{})
	for _, kind := range []string{"internal", "", "client"} {
		r := Record{Service: "s", SpanKind: kind, Duration: 1, NumPeerTags: 1}
		r.PeerTags[0] = "_dd.base_service:web"
		if got := tb.keptPeers(&r); len(got) != 0 {
			t.Errorf("kind %q: kept %q, want none", kind, got)
		}
		tb.Add(&r)
	}
	for _, e := range tb.Touched(nil) {
		if e.PeerTags != nil {
			t.Errorf("entry %q kind %q has peer tags %q", e.Service, e.SpanKind, e.PeerTags)
		}
	}
}
