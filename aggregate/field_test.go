// This file tests the label fields: the layout that Record, Key and Limits
// share in Field order, and that every label counts wherever the labels
// are walked by Field.

package aggregate

import (
	"fmt"
	"reflect"
	"testing"
	"unsafe"
)

// TestFieldLayout checks what labels and Limits.Get rely on: Record and Key
// declare their label strings first and in Field order, and nowhere else;
// Limits is one int per Field, in Field order.
func TestFieldLayout(t *testing.T) {
	labels := [numLabels]string{
		FieldResource: "Resource", FieldService: "Service", FieldOperation: "Name",
		FieldType: "Type", FieldSpanKind: "SpanKind", FieldHTTPMethod: "HTTPMethod",
		FieldHTTPEndpoint: "HTTPEndpoint", FieldGRPCStatusCode: "GRPCStatusCode",
		FieldServiceSource: "ServiceSource",
	}
	for _, typ := range []reflect.Type{reflect.TypeFor[Record](), reflect.TypeFor[Key]()} {
		for i := range typ.NumField() {
			sf := typ.Field(i)
			if i >= numLabels {
				if sf.Type.Kind() == reflect.String {
					t.Errorf("%s.%s: a string field after the labels; is it a label? Add a Field", typ.Name(), sf.Name)
				}
				continue
			}
			if sf.Name != labels[i] || sf.Type.Kind() != reflect.String || sf.Offset != uintptr(i)*unsafe.Sizeof("") {
				t.Errorf("%s field %d is %s %s at %d, want %s string at %d (Field %v)",
					typ.Name(), i, sf.Name, sf.Type, sf.Offset, labels[i], uintptr(i)*unsafe.Sizeof(""), Field(i))
			}
		}
	}
	limits := reflect.TypeFor[Limits]()
	if limits.NumField() != int(NumFields) {
		t.Fatalf("Limits has %d fields, want one per Field (%d)", limits.NumField(), NumFields)
	}
	for f := range NumFields {
		sf := limits.Field(int(f))
		if sf.Type.Kind() != reflect.Int || sf.Offset != uintptr(f)*unsafe.Sizeof(0) {
			t.Errorf("Limits.%s is %s at %d, want int at %d (Field %v)", sf.Name, sf.Type, sf.Offset, uintptr(f)*unsafe.Sizeof(0), f)
		}
	}
}

func TestLimitsGetSet(t *testing.T) {
	var l Limits
	for f := range NumFields {
		l.Set(f, int(f)+1)
	}
	want := Limits{Resource: 1, Service: 2, Operation: 3, Type: 4, SpanKind: 5,
		HTTPMethod: 6, HTTPEndpoint: 7, GRPCStatusCode: 8, ServiceSource: 9, PeerTag: 10}
	if l != want {
		t.Fatalf("Set by Field: %+v, want %+v", l, want)
	}
	for f := range NumFields {
		if got := want.Get(f); got != int(f)+1 {
			t.Errorf("Get(%v) = %d, want %d", f, got, int(f)+1)
		}
	}
	d := DefaultLimits()
	got := Limits{Resource: 5, PeerTag: -1}.withDefaults()
	d.Resource, d.PeerTag = 5, -1
	if got != d {
		t.Fatalf("withDefaults: %+v, want %+v", got, d)
	}
}

// TestEveryLabelCounts changes one label at a time and checks each place
// that goes over the labels by Field: the key bytes (encodeKey, setKey),
// the recent-span cache's comparison, the budgets, collapse and the
// collapsed-key memo.
func TestEveryLabelCounts(t *testing.T) {
	for f := range Field(numLabels) {
		t.Run(f.String(), func(t *testing.T) {
			a := baseSpan()
			if a.labels()[f] == "" { // an absent label takes no room in the budget
				a.labels()[f] = fmt.Sprint("base-", f)
			}
			b := a
			b.labels()[f] = fmt.Sprint("other-", f)

			var k recentKey
			k.setKey(&a)
			if !k.sameKey(&a) || k.sameKey(&b) {
				t.Fatalf("recentKey: sameKey(a) = %v, sameKey(b) = %v; want true, false", k.sameKey(&a), k.sameKey(&b))
			}

			tb := NewTable(0)
			lim := Limits{}
			for g := range NumFields {
				lim.Set(g, -1)
			}
			lim.Set(f, 1)
			tb.SetLimits(lim)
			tb.Add(&a)
			tb.Add(&b)
			es := tb.Touched(nil)
			if len(es) != 2 {
				t.Fatalf("%d entries, want 2", len(es))
			}
			if want := *a.labels(); *es[0].labels() != want {
				t.Errorf("first key %q, want %q", *es[0].labels(), want)
			}
			want := *b.labels()
			want[f] = BlockedValue
			if *es[1].labels() != want {
				t.Errorf("collapsed key %q, want %q", *es[1].labels(), want)
			}
			for g := range NumFields {
				if n, want := tb.Collapsed(g), map[bool]uint64{true: 1}[g == f]; n != want {
					t.Errorf("Collapsed(%v) = %d, want %d", g, n, want)
				}
			}

			// c collapses like b but differs from it in another field:
			// the memo of b's collapsed key must not take it.
			g := (f + 1) % Field(numLabels)
			c := b
			c.labels()[g] = fmt.Sprint("other-", g)
			tb.Add(&c)
			if es = tb.Touched(nil); len(es) != 3 {
				t.Fatalf("%d entries after a span differing in %v from the collapsed one, want 3", len(es), g)
			}
			want[g] = c.labels()[g]
			if *es[2].labels() != want {
				t.Errorf("third key %q, want %q", *es[2].labels(), want)
			}
		})
	}
}
