// This file tests the attribute lookup's edges: peer tags read from the
// resource alone, and peer-tag keys past the view's table.

package otelstats

import (
	"slices"
	"strconv"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
)

// TestPeerTagsFromResource: a peer attribute set on the resource only is
// read (GetOTelAttrFromEitherMap), for a client span's peer tags and for an
// internal span's _dd.base_service.
func TestPeerTagsFromResource(t *testing.T) {
	p := newProcessor(nil)
	res := append(slices.Clone(svcRes), attribute.String("peer.service", "billing"), attribute.String("_dd.base_service", "orig"))
	for _, tc := range []struct {
		kind trace.SpanKind
		want []string
	}{
		{trace.SpanKindClient, []string{"_dd.base_service:orig", "peer.service:billing"}},
		{trace.SpanKindInternal, []string{"_dd.base_service:orig"}},
	} {
		got := mapOne(t, p, res, spanSpec{name: "x", kind: tc.kind, local: true})
		if !slices.Equal(got.PeerTags, tc.want) {
			t.Errorf("%v span: peer tags %q, want %q", tc.kind, got.PeerTags, tc.want)
		}
	}
}

// TestPeerTagKeysPastTable: WithPeerTagKeys reads the keys that fit the
// view's table of maxAttrs and ignores the rest, as documented, whether
// a span or its resource carries them.
func TestPeerTagKeysPastTable(t *testing.T) {
	fit := maxAttrs - int(firstPeerOnly) // keys beyond the mapping's own that are read
	keys := make([]string, fit+2)
	for i := range keys {
		keys[i] = "custom.k" + strconv.Itoa(i)
	}
	p := newProcessor(nil, WithPeerTagKeys(keys...))
	last, past := keys[fit-1], keys[fit]
	res := append(slices.Clone(svcRes), attribute.String(past, "r"))
	got := mapOne(t, p, res, spanSpec{name: "c", kind: trace.SpanKindClient, local: true,
		attrs: []attribute.KeyValue{attribute.String(last, "a"), attribute.String(past, "b")}})
	if want := []string{last + ":a"}; !slices.Equal(got.PeerTags, want) {
		t.Fatalf("peer tags %q, want %q", got.PeerTags, want)
	}
}
