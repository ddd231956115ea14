// This file declares the prefetch instructions AddBatch uses on amd64
// (prefetch_amd64.s).

package aggregate

import "unsafe"

// havePrefetch: this architecture has prefetchRecord and prefetchStrings.
const havePrefetch = true

//go:noescape
func prefetchRecord(s *Record)

//go:noescape
func prefetchStrings(s *Record)

// prefetch asks for the cache line at p without waiting for it.
//
//go:noescape
func prefetch(p unsafe.Pointer)
