package aggregate

// havePrefetch: this architecture has prefetchSpan and prefetchStrings.
const havePrefetch = true

//go:noescape
func prefetchSpan(s *Span)

//go:noescape
func prefetchStrings(s *Span)
