//go:build !amd64

package aggregate

import "unsafe"

// havePrefetch: without a prefetch instruction, AddBatch reads ahead with
// loads (touchFields and touch).
const havePrefetch = false

func prefetchSpan(*Span)      {}
func prefetchStrings(*Span)   {}
func prefetch(unsafe.Pointer) {}
