// Package casefold compares a string, case-mapped rune by rune, with an
// ASCII name without allocating: the agent's strings.ToLower and
// strings.ToUpper comparisons, which differ from strings.EqualFold on a few
// runes outside ASCII (U+0130 lowers to "i", "ı" uppers to "I").
package casefold

// Is reports whether mapping every rune of s with to (unicode.ToLower or
// unicode.ToUpper) gives name, an ASCII name as to leaves it. A rune is at
// most 4 bytes, so a longer s cannot match.
func Is(s, name string, to func(rune) rune) bool {
	if len(s) < len(name) || len(s) > 4*len(name) {
		return false
	}
	i := 0
	for _, r := range s {
		if i == len(name) || to(r) != rune(name[i]) {
			return false
		}
		i++
	}
	return i == len(name)
}
