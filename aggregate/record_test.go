package aggregate

import (
	"fmt"
	"reflect"
	"testing"
	"unsafe"
)

func TestSetPeerTags(t *testing.T) {
	var s Record
	s.SetPeerTags([]string{"a:1", "b:2"})
	if s.NumPeerTags != 2 || s.ExtraPeerTags != nil || s.PeerTags[1] != "b:2" {
		t.Fatalf("inline: %d %v %v", s.NumPeerTags, s.PeerTags, s.ExtraPeerTags)
	}
	tags := make([]string, MaxInlinePeerTags+3)
	for i := range tags {
		tags[i] = fmt.Sprintf("t%d:v", i)
	}
	s.SetPeerTags(tags)
	if s.NumPeerTags != MaxInlinePeerTags || len(s.ExtraPeerTags) != 3 || s.ExtraPeerTags[2] != "t10:v" {
		t.Fatalf("overflowing: %d %v", s.NumPeerTags, s.ExtraPeerTags)
	}
	tags[10] = "changed"
	if s.ExtraPeerTags[2] != "t10:v" {
		t.Fatal("ExtraPeerTags aliases the caller's slice")
	}
	s.SetPeerTags(nil)
	if s.NumPeerTags != 0 || s.ExtraPeerTags != nil {
		t.Fatalf("cleared: %d %v", s.NumPeerTags, s.ExtraPeerTags)
	}
}

// TestRecordReset: whatever a span's fields and SetPeerTags set, Reset leaves
// the zero Record. Every field other than the peer tags is filled by
// reflection, so a field added to Record and forgotten by Reset fails here.
func TestRecordReset(t *testing.T) {
	for _, n := range []int{0, 1, 3, MaxInlinePeerTags, MaxInlinePeerTags + 2} {
		var s Record
		v := reflect.ValueOf(&s).Elem()
		for i := range v.NumField() {
			f := v.Field(i)
			switch name := v.Type().Field(i).Name; {
			case name == "NumPeerTags" || name == "PeerTags" || name == "ExtraPeerTags" || name == "_" || name == "Labels":
			case f.Kind() == reflect.String:
				f.SetString("v-" + name)
			case f.Kind() == reflect.Bool:
				f.SetBool(true)
			case f.CanUint():
				f.SetUint(7)
			case f.CanInt():
				f.SetInt(-7)
			default:
				t.Fatalf("field %s of kind %s: teach this test (and Record.Reset) about it", name, f.Kind())
			}
		}
		tags := make([]string, n)
		for i := range tags {
			tags[i] = fmt.Sprintf("k%d:v", i)
		}
		s.SetPeerTags(tags)
		s.Reset()
		if !v.IsZero() {
			t.Errorf("%d peer tags: after Reset %+v, want the zero Record", n, s)
		}
	}
}

// TestRecordResetLabels: a Record with Labels (a producer's hinted span:
// Labels and the measurements, nothing else) is the zero Record after
// Reset, which writes none of its key fields.
func TestRecordResetLabels(t *testing.T) {
	tmpl := &Record{Resource: "GET /x", Service: "svc", NumPeerTags: 1, PeerTags: [MaxInlinePeerTags]string{"peer.service:db"}}
	s := Record{Labels: tmpl, Duration: 5, End: 7, Error: true, TopLevel: true}
	s.Reset()
	if !reflect.ValueOf(s).IsZero() {
		t.Fatalf("after Reset %+v, want the zero Record", s)
	}
	if tmpl.Resource != "GET /x" || tmpl.NumPeerTags != 1 {
		t.Fatalf("Reset wrote the template: %+v", tmpl)
	}
}

// TestRecordFillsSlotLines: an inbox slot (a sequence word, then a Record)
// is whole cache lines, so that the first line of every slot holds the
// measurements and Labels, all a hinted span writes.
func TestRecordFillsSlotLines(t *testing.T) {
	if unsafe.Sizeof(uintptr(0)) != 8 {
		t.Skip("64-bit layout")
	}
	size := 8 + unsafe.Sizeof(Record{})
	if size%64 != 0 {
		t.Errorf("a slot is %d bytes, not whole 64-byte lines: adjust recordPad", size)
	}
	if end := 8 + unsafe.Offsetof(Record{}.HTTPStatusCode) + 4; end > 64 {
		t.Errorf("the measurements end at byte %d of the slot, past its first line", end)
	}
}
