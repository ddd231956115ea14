// This file checks that every field of Stats reaches /metrics: a counter
// the relay keeps but does not expose is one no operator sees.

package relay

import (
	"bytes"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/VictoriaMetrics/metrics"
)

// TestEveryStatIsAMetric gives every Stats field (each element of its
// arrays, each drop reason of SpansDropped and one reason no constant
// names) a value of its own, found by reflection, and requires each value
// in the exposition statsMetrics writes: a field added to Stats without
// its metric fails here, naming it.
func TestEveryStatIsAMetric(t *testing.T) {
	var st Stats
	want := map[string]string{} // field path → the sample value it must show
	next := 1000
	value := func() int { next += 7; return next }
	v := reflect.ValueOf(&st).Elem()
	for i := range v.NumField() {
		f, name := v.Field(i), v.Type().Field(i).Name
		switch f.Kind() {
		case reflect.Uint64:
			n := value()
			f.SetUint(uint64(n))
			want[name] = strconv.Itoa(n)
		case reflect.Int:
			n := value()
			f.SetInt(int64(n))
			want[name] = strconv.Itoa(n)
		case reflect.Array:
			for j := range f.Len() {
				n := value()
				f.Index(j).SetUint(uint64(n))
				want[fmt.Sprintf("%s[%d]", name, j)] = strconv.Itoa(n)
			}
		case reflect.Map:
			m := map[string]uint64{}
			for _, r := range append(dropReasons[:len(dropReasons):len(dropReasons)], "a_reason_not_yet_named") {
				n := value()
				m[r] = uint64(n)
				want[fmt.Sprintf("%s[%s]", name, r)] = strconv.Itoa(n)
			}
			f.Set(reflect.ValueOf(m))
		default:
			t.Fatalf("Stats.%s is a %s: teach this test a value for it", name, f.Type())
		}
	}
	if len(want) < 20 {
		t.Fatalf("only %d fields found in Stats: %v", len(want), want)
	}
	set := metrics.NewSet()
	statsMetrics(set, st, [NumTransports]bool{true, true})
	var out bytes.Buffer
	set.WritePrometheus(&out)
	shown := map[string]bool{}
	for _, line := range strings.Split(out.String(), "\n") {
		if i := strings.LastIndexByte(line, ' '); i > 0 && !strings.HasPrefix(line, "#") {
			shown[line[i+1:]] = true
		}
	}
	for field, v := range want {
		if !shown[v] {
			t.Errorf("Stats.%s (%s) is in no metric", field, v)
		}
	}
	// Closed transports show no per-transport series.
	set = metrics.NewSet()
	statsMetrics(set, st, [NumTransports]bool{})
	out.Reset()
	set.WritePrometheus(&out)
	if strings.Contains(out.String(), "transport=") {
		t.Errorf("series of a closed transport:\n%s", out.String())
	}
}
