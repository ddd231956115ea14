package stats

import (
	"math"
	"testing"

	"github.com/spanstats/spanstats/stats/statstest"
	"github.com/spanstats/spanstats/writer"
)

// onlyGroup decodes the single group the agent received.
func onlyGroup(t *testing.T, ag *statstest.Agent) *writer.Group {
	t.Helper()
	reqs := statstest.Accepted(ag.Requests())
	var groups []*writer.Group
	for _, r := range reqs {
		if r.Payload == nil {
			t.Fatalf("payload did not decode: %v", r.Err)
		}
		for _, b := range r.Payload.Buckets {
			for i := range b.Groups {
				groups = append(groups, &b.Groups[i])
			}
		}
	}
	if len(groups) != 1 {
		t.Fatalf("the agent received %d groups in %d requests, want 1", len(groups), len(reqs))
	}
	return groups[0]
}

// TestDurationSaturates: three spans of one key lasting math.MaxInt64 ns
// reach the agent as a group whose duration sum is saturated, not wrapped,
// and whose sketch, decoded by the writer's decoder, counts the three.
func TestDurationSaturates(t *testing.T) {
	ag := statstest.New()
	defer ag.Close()
	a := newStarted(t, Config{AgentURL: ag.URL()})
	for range 3 {
		a.Publish(&Span{Service: "s", Name: "n", Resource: "r", Duration: math.MaxInt64, TopLevel: true})
	}
	stop(t, a)
	g := onlyGroup(t, ag)
	if g.Hits != 3 || g.TopLevelHits != 3 || g.Duration != math.MaxUint64 {
		t.Fatalf("hits %d, top %d, duration %d; want 3, 3, %d", g.Hits, g.TopLevelHits, g.Duration, uint64(math.MaxUint64))
	}
	if g.Ok == nil || g.Ok.Count() != g.Hits {
		t.Fatalf("ok sketch %v, want a count of %d", g.Ok, g.Hits)
	}
}
