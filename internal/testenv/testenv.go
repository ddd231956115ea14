// Package testenv keeps a developer's Datadog, OpenTelemetry and spanstats
// settings out of the tests.
//
// The SDK reads DD_TRACE_AGENT_URL, DD_ENV, DD_SERVICE, DD_TAGS,
// OTEL_SERVICE_NAME, SPANSTATS_RELAY_URL and more where its Config leaves
// a field empty, and statsrelay reads STATSRELAY_<FLAG> for every flag not
// given. A shell that sets them for real work (or a CI runner that
// traces its jobs) would otherwise send the tests' reports elsewhere,
// rename their services, tighten their cardinality limits or start their
// relays on another socket. A test package's TestMain calls Clear first;
// a test that means to read a variable sets it with t.Setenv.
package testenv

import (
	"os"
	"strings"
)

// Prefixes are those of the variables Clear unsets.
var Prefixes = []string{"DD_", "OTEL_", "SPANSTATS_", "STATSRELAY_"}

// Switches are the tests' own variables under Prefixes, which Clear
// keeps: opt-ins to long tests, and the markers that make a test binary
// a child process of a test.
var Switches = []string{
	"SPANSTATS_FULL_MEMORY_TEST",
	"SPANSTATS_BURST_TEST",
	"SPANSTATS_BENCH_RELAY_SENDER",
	"SPANSTATS_KEY_HASH_CHILD",
	"STATSRELAY_TEST_CHILD",
	"STATSRELAY_TEST_SENDER",
	"STATSRELAY_TEST_MAIN_ARGS",
}

// Clear unsets every variable whose name begins with one of Prefixes,
// except Switches, and returns the names it unset. Processes the tests
// start inherit the cleared environment.
func Clear() []string {
	var unset []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		if Cleared(name) {
			os.Unsetenv(name)
			unset = append(unset, name)
		}
	}
	return unset
}

// Cleared says whether Clear unsets the variable name.
func Cleared(name string) bool {
	for _, s := range Switches {
		if name == s {
			return false
		}
	}
	for _, p := range Prefixes {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	return false
}
