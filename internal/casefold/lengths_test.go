// This file tests Is on names whose runes take 3 bytes each, and on a
// string as long as the name in bytes but shorter in runes.

package casefold

import (
	"testing"
	"unicode"
)

func TestIsByteLengths(t *testing.T) {
	for _, tc := range []struct {
		s, name string
		to      func(rune) rune
		want    bool
	}{
		// U+212A KELVIN SIGN (3 bytes) lowers to "k": 9 bytes for 3 runes.
		{"\u212a\u212a\u212a", "kkk", unicode.ToLower, true},
		{"\u212aind", "kind", unicode.ToLower, true},
		// 6 bytes, as "client", but 5 runes: "clien".
		{"cl\u0130en", "client", unicode.ToLower, false},
		// "ſ" (U+017F, 2 bytes) uppers to "S": 6 bytes, 5 runes.
		{"\u017ferve", "SERVER", unicode.ToUpper, false},
		{"\u017ferver", "SERVER", unicode.ToUpper, true},
	} {
		if got := Is(tc.s, tc.name, tc.to); got != tc.want {
			t.Errorf("Is(%q, %q) = %v, want %v", tc.s, tc.name, got, tc.want)
		}
	}
}
