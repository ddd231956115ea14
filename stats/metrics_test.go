// This file tests the health counts sent to DogStatsD: their names, and
// that label cuts and spans sent, unsent or dropped while the agent is off
// reach it.

package stats

import (
	"context"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/spanstats/spanstats/aggregate"
	"github.com/spanstats/spanstats/stats/statstest"
)

type recordingStatsd struct {
	mu     sync.Mutex
	counts map[string]int64
	gauges map[string]float64
}

func (r *recordingStatsd) Count(name string, v int64, tags []string, _ float64) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.counts[name+fmt.Sprint(tags)] += v
	return nil
}

func (r *recordingStatsd) Gauge(name string, v float64, _ []string, _ float64) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.gauges[name] = v
	return nil
}

// TestMetricsNoDoublePrefix: health counts reach the tracer's DogStatsD
// client once, under datadog.tracer.stats.*, without the client's namespace
// repeated.
func TestMetricsNoDoublePrefix(t *testing.T) {
	ag := statstest.New()
	defer ag.Close()
	for _, tc := range []struct{ namespace, name string }{
		{"", "datadog.tracer.stats.spans.counted[]"},
		{"datadog.tracer.", "stats.spans.counted[]"},
		{"datadog.tracer", "stats.spans.counted[]"}, // the client adds the dot
		{"datadog", "tracer.stats.spans.counted[]"},
		{"datadog.trace", "datadog.tracer.stats.spans.counted[]"}, // not a prefix at a dot
	} {
		rec := &recordingStatsd{counts: map[string]int64{}, gauges: map[string]float64{}}
		a := newStarted(t, Config{AgentURL: ag.URL(), Metrics: rec, MetricsNamespace: tc.namespace,
			CardinalityLimits: aggregate.Limits{Resource: 1}})
		publishN(a, 3, "r1")
		publishN(a, 2, "r2") // over the resource budget of 1
		if err := a.Flush(context.Background()); err != nil {
			t.Fatal(err)
		}
		stop(t, a)
		rec.mu.Lock()
		if rec.counts[tc.name] != 5 {
			t.Errorf("namespace %q: %s = %d, want 5; got %v", tc.namespace, tc.name, rec.counts[tc.name], rec.counts)
		}
		col := strings.TrimSuffix(tc.name, "spans.counted[]") + "collapsed[field:resource]"
		if rec.counts[col] != 2 {
			t.Errorf("namespace %q: %s = %d, want 2", tc.namespace, col, rec.counts[col])
		}
		for k := range rec.counts {
			if strings.Contains(k, "datadog.tracer.datadog.tracer") || strings.HasPrefix(k, ".") ||
				(tc.namespace != "" && strings.HasPrefix(k, tc.namespace+".")) {
				t.Errorf("metric %q carries the prefix twice", k)
			}
		}
		rec.mu.Unlock()
	}
}

// TestMetricsCuts: the labels cut to their limits and the peer tags left
// out reach DogStatsD, not only Health.
func TestMetricsCuts(t *testing.T) {
	ag := statstest.New()
	defer ag.Close()
	rec := &recordingStatsd{counts: map[string]int64{}, gauges: map[string]float64{}}
	a := newStarted(t, Config{AgentURL: ag.URL(), Metrics: rec})
	tags := make([]string, MaxPeerTags+3)
	for i := range tags {
		tags[i] = fmt.Sprintf("peer.service:s%d", i)
	}
	a.Publish(&Span{Service: "svc", Name: "op", Resource: strings.Repeat("r", MaxResourceLen+1),
		SpanKind: "client", PeerTags: tags, Duration: 1, TopLevel: true})
	if err := a.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	stop(t, a)
	rec.mu.Lock()
	defer rec.mu.Unlock()
	for name, want := range map[string]int64{
		"datadog.tracer.stats.labels.truncated[]": 1,
		"datadog.tracer.stats.peer_tags.cut[]":    3,
	} {
		if rec.counts[name] != want {
			t.Errorf("%s = %d, want %d", name, rec.counts[name], want)
		}
	}
}

// TestMetricsSpansSentAndUnsent: the spans of payloads that reached the
// agent and of payloads dropped on the way out reach DogStatsD as span
// counts, not only as payload counts.
func TestMetricsSpansSentAndUnsent(t *testing.T) {
	ag := statstest.New()
	defer ag.Close()
	rec := &recordingStatsd{counts: map[string]int64{}, gauges: map[string]float64{}}
	a := newStarted(t, Config{AgentURL: ag.URL(), Metrics: rec, MaxRetries: 1, RetryBackoff: time.Millisecond})
	publishN(a, 4, "r")
	if err := a.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	ag.Close() // the next report cannot be sent
	publishN(a, 3, "r")
	if err := a.Flush(context.Background()); err == nil {
		t.Fatal("Flush to a closed agent succeeded")
	}
	stop(t, a)
	rec.mu.Lock()
	defer rec.mu.Unlock()
	for name, want := range map[string]int64{
		"datadog.tracer.stats.spans.sent[]":   4,
		"datadog.tracer.stats.spans.unsent[]": 3,
	} {
		if rec.counts[name] != want {
			t.Errorf("%s = %d, want %d; got %v", name, rec.counts[name], want, rec.counts)
		}
	}
}

// TestMetricsWhileAgentOff: while the agent refuses stats there is no
// report, yet the spans dropped for it reach DogStatsD during the outage,
// not only at Stop (a process that never stops would never tell).
func TestMetricsWhileAgentOff(t *testing.T) {
	ag := statstest.New()
	defer ag.Close()
	ag.SetInfo(map[string]any{"endpoints": []string{"/v0.4/traces"}})
	rec := &recordingStatsd{counts: map[string]int64{}, gauges: map[string]float64{}}
	log, _ := textLogger()
	a := newStarted(t, Config{AgentURL: ag.URL(), Metrics: rec, InfoRefresh: 20 * time.Millisecond, Logger: log})
	defer stop(t, a)
	const name = "datadog.tracer.stats.spans.dropped[reason:agent_disabled]"
	deadline := time.Now().Add(5 * time.Second)
	for !a.Health().AgentOff {
		if time.Now().After(deadline) {
			t.Fatal("the agent never switched off")
		}
		time.Sleep(5 * time.Millisecond)
	}
	publishN(a, 10, "r")
	for {
		rec.mu.Lock()
		got := rec.counts[name]
		rec.mu.Unlock()
		if got == 10 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s = %d during the outage, want 10 (Health: %d)", name, got, a.Health().AgentOffSpans)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestEveryHealthCountIsAMetric changes each Health field alone, found by
// reflection (each field of Collapsed too), and requires the DogStatsD
// client to see it: a count or gauge that emitting the unchanged Health
// does not send. A count Health gains without its metric fails here,
// naming it; the errors and their times are for Health and the log only.
func TestEveryHealthCountIsAMetric(t *testing.T) {
	notMetrics := map[string]bool{"InfoError": true, "InfoErrorAt": true, "LastSendError": true, "LastSendErrorAt": true}
	sent := func(h Health) map[string]float64 {
		r := &recordingStatsd{counts: map[string]int64{}, gauges: map[string]float64{}}
		(&emitter{client: r}).emit(h)
		out := map[string]float64{}
		for k, v := range r.counts {
			out["count "+k] = float64(v)
		}
		for k, v := range r.gauges {
			out["gauge "+k] = v
		}
		return out
	}
	base := sent(Health{})
	changes := func(h Health) bool {
		got := sent(h)
		for k, v := range got {
			if base[k] != v {
				return true
			}
		}
		return len(got) != len(base)
	}
	typ := reflect.TypeFor[Health]()
	numbers := 0
	for i := range typ.NumField() {
		f := typ.Field(i)
		if notMetrics[f.Name] {
			continue
		}
		var h Health
		v := reflect.ValueOf(&h).Elem().Field(i)
		switch v.Kind() {
		case reflect.Uint64:
			v.SetUint(5)
			if !changes(h) {
				t.Errorf("Health.%s reaches no metric", f.Name)
			}
		case reflect.Bool:
			v.SetBool(true)
			if !changes(h) {
				t.Errorf("Health.%s reaches no metric", f.Name)
			}
		case reflect.Array:
			for j := range v.Len() {
				var h Health
				reflect.ValueOf(&h).Elem().Field(i).Index(j).SetUint(5)
				if !changes(h) {
					t.Errorf("Health.%s[%d] reaches no metric", f.Name, j)
				}
			}
		default:
			t.Errorf("Health.%s is a %s: give it a metric here, or say why it has none", f.Name, f.Type)
		}
		numbers++
	}
	if numbers < 30 {
		t.Fatalf("only %d Health fields walked", numbers)
	}
}

// countCalls counts the client's calls.
type countCalls struct{ counts int }

func (c *countCalls) Count(string, int64, []string, float64) error   { c.counts++; return nil }
func (c *countCalls) Gauge(string, float64, []string, float64) error { return nil }

// TestMetricsNoZeroCounts: only a counter's growth is sent; an
// unchanged counter sends no DogStatsD count (a 0 would be a packet per
// counter per report for nothing).
func TestMetricsNoZeroCounts(t *testing.T) {
	c := &countCalls{}
	m := &emitter{client: c}
	h := Health{PayloadsSent: 3}
	m.emit(h)
	first := c.counts
	m.emit(h)
	if first != 1 || c.counts != first {
		t.Fatalf("%d counts for one grown counter, then %d more for none; want 1 then 0", first, c.counts-first)
	}
}
