// This file tests Record's methods: SetPeerTags, and Reset back to the
// zero Record.

package aggregate

import (
	"fmt"
	"reflect"
	"testing"
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
	// Reused with fewer tags: none of the earlier ones is left behind
	// NumPeerTags, where Reset (which clears up to it) would not reach.
	s.SetPeerTags([]string{"x:1"})
	if s.NumPeerTags != 1 || s.ExtraPeerTags != nil || s.PeerTags[0] != "x:1" || s.PeerTags != [MaxInlinePeerTags]string{"x:1"} {
		t.Fatalf("reused with one tag: %d %q %v", s.NumPeerTags, s.PeerTags, s.ExtraPeerTags)
	}
	s.SetPeerTags(nil)
	if s.NumPeerTags != 0 || s.ExtraPeerTags != nil || s.PeerTags != [MaxInlinePeerTags]string{} {
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
			case name == "NumPeerTags" || name == "PeerTags" || name == "ExtraPeerTags":
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
