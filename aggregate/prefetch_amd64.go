package aggregate

import "unsafe"

// havePrefetch: this architecture has prefetchSpan and prefetchStrings.
const havePrefetch = true

//go:noescape
func prefetchSpan(s *Span)

//go:noescape
func prefetchStrings(s *Span)

// prefetch asks for the cache line at p without waiting for it.
//
//go:noescape
func prefetch(p unsafe.Pointer)
