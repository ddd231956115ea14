package otelstats

import "unsafe"

func unsafeData(s string) *byte { return unsafe.StringData(s) }
