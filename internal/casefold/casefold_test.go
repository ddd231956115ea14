// This file tests that Is agrees with the agent's strings.ToLower and
// strings.ToUpper comparisons, without allocating.

package casefold

import (
	"strings"
	"testing"
	"unicode"
)

// TestIsAsStringsMaps: Is agrees with comparing strings.ToLower(s) or
// strings.ToUpper(s) with the name, on the runes where those differ from
// strings.EqualFold, and allocates nothing.
func TestIsAsStringsMaps(t *testing.T) {
	for _, s := range []string{"client", "CLIENT", "clİent", "cl\u0130ent", "client ", "clien", "\u212aind",
		"ınternal", "INTERNAL", "ſerver", "SERVER", "", "c", "clientclientclient", "cliént"} {
		for _, name := range []string{"client", "internal", "server", "kind"} {
			if got, want := Is(s, name, unicode.ToLower), strings.ToLower(s) == name; got != want {
				t.Errorf("Is(%q, %q, ToLower) = %v, want %v", s, name, got, want)
			}
			upper := strings.ToUpper(name)
			if got, want := Is(s, upper, unicode.ToUpper), strings.ToUpper(s) == upper; got != want {
				t.Errorf("Is(%q, %q, ToUpper) = %v, want %v", s, upper, got, want)
			}
		}
	}
	if n := testing.AllocsPerRun(100, func() { _ = Is("clİent", "client", unicode.ToLower) }); n != 0 {
		t.Errorf("Is allocates %v times", n)
	}
}
