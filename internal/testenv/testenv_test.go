package testenv

import (
	"os"
	"slices"
	"testing"
)

func TestClear(t *testing.T) {
	set := map[string]bool{ // name: kept
		"DD_ENV": false, "DD_TRACE_AGENT_URL": false, "OTEL_SERVICE_NAME": false,
		"SPANSTATS_RELAY_URL": false, "STATSRELAY_UNIX": false,
		"SPANSTATS_BURST_TEST": true, "STATSRELAY_TEST_MAIN_ARGS": true,
		"HOME_DD_ENV": true, "GOMAXPROCS": true,
	}
	for name := range set {
		t.Setenv(name, "x")
	}
	unset := Clear()
	for name, kept := range set {
		_, has := os.LookupEnv(name)
		if has != kept || slices.Contains(unset, name) == kept {
			t.Errorf("%s: still set %v, reported unset %v; want kept %v", name, has, slices.Contains(unset, name), kept)
		}
	}
}
