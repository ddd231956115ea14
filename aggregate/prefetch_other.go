//go:build !amd64

// This file stands in for the prefetch instructions where there are none.

package aggregate

import "unsafe"

// havePrefetch: without a prefetch instruction, AddBatch reads ahead with
// loads (touchFields and touch).
const havePrefetch = false

func prefetchRecord(*Record)  {}
func prefetchStrings(*Record) {}
func prefetch(unsafe.Pointer) {}
