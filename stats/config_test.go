package stats

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/spanstats/spanstats/aggregate"
)

func TestLimitsFromEnv(t *testing.T) {
	var warnings []string
	logf := func(f string, args ...any) { warnings = append(warnings, fmt.Sprintf(f, args...)) }
	env := map[string]string{
		EnvResourceLimit:     "100",
		EnvHTTPEndpointLimit: "lots",
		EnvPeerTagsLimit:     "-3",
	}
	l := limitsFromEnv(aggregate.Limits{}, func(k string) string { return env[k] }, logf)
	if l.Resource != 100 || l.HTTPEndpoint != 0 || l.PeerTag != 0 {
		t.Fatalf("limits %+v: want resource 100, others left to the default", l)
	}
	if len(warnings) != 2 {
		t.Fatalf("warnings %q, want 2", warnings)
	}
	// Config wins over the environment.
	l = limitsFromEnv(aggregate.Limits{Resource: 7}, func(k string) string { return env[k] }, logf)
	if l.Resource != 7 {
		t.Fatalf("Resource = %d, want the config's 7", l.Resource)
	}
}

func TestNewRejectsBadConfig(t *testing.T) {
	for _, c := range []Config{
		{AgentURL: "ftp://x"},
		{AgentURL: "http://"},
		{AgentURL: "unix://"},
		{InboxSize: -1},
		{ShedYieldEvery: -8},
		{MaxPayloadBytes: 100},
		{BucketInterval: -time.Second},
	} {
		if _, err := New(c); !errors.Is(err, ErrBadConfig) {
			t.Errorf("New(%+v) = %v, want ErrBadConfig", c, err)
		}
	}
}
