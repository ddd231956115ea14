#include "textflag.h"
#include "go_asm.h"

// func prefetchSpan(s *Span)
// Asks for the cache lines of *s (Span__size bytes, at most six lines
// wherever it starts) without waiting for them. PREFETCHT0, not PREFETCHW:
// every amd64 CPU has it, and the write hint measured no better here.
TEXT ·prefetchSpan(SB), NOSPLIT, $0-8
	MOVQ s+0(FP), AX
	PREFETCHT0 0(AX)
	PREFETCHT0 64(AX)
	PREFETCHT0 128(AX)
	PREFETCHT0 192(AX)
	PREFETCHT0 256(AX)
	PREFETCHT0 (Span__size-1)(AX)
	RET

// func prefetchStrings(s *Span)
// Asks for the first bytes of the strings an attack varies: resource,
// service, operation and the first three peer tags. A prefetch of a nil or
// stale address does not fault.
TEXT ·prefetchStrings(SB), NOSPLIT, $0-8
	MOVQ s+0(FP), AX
	MOVQ Span_Resource(AX), BX
	PREFETCHT0 (BX)
	MOVQ Span_Service(AX), BX
	PREFETCHT0 (BX)
	MOVQ Span_Name(AX), BX
	PREFETCHT0 (BX)
	MOVQ (Span_PeerTags+0)(AX), BX
	PREFETCHT0 (BX)
	MOVQ (Span_PeerTags+16)(AX), BX
	PREFETCHT0 (BX)
	MOVQ (Span_PeerTags+32)(AX), BX
	PREFETCHT0 (BX)
	RET

// func prefetch(p unsafe.Pointer)
TEXT ·prefetch(SB), NOSPLIT, $0-8
	MOVQ p+0(FP), AX
	PREFETCHT0 (AX)
	RET
