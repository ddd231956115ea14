// This file holds unsafeData, the tests' one use of unsafe: whether two
// strings share their bytes.

package otelstats

import "unsafe"

func unsafeData(s string) *byte { return unsafe.StringData(s) }
