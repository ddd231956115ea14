#include "textflag.h"
#include "go_asm.h"

// func prefetchSpan(s *Span)
// Asks for the cache lines of *s (Span__size bytes, at most six lines
// wherever it starts) without waiting for them.
TEXT ·prefetchSpan(SB), NOSPLIT, $0-8
	MOVQ s+0(FP), AX
	MOVQ AX, BX
	// PREFETCHW (for writing: Release zeroes the slot), which the Go
	// assembler does not know: 0F 0D /1, at 0(BX) and 64(BX).
	BYTE $0x0F; BYTE $0x0D; BYTE $0x0B
	BYTE $0x0F; BYTE $0x0D; BYTE $0x4B; BYTE $0x40
	ADDQ $128, BX
	BYTE $0x0F; BYTE $0x0D; BYTE $0x0B
	BYTE $0x0F; BYTE $0x0D; BYTE $0x4B; BYTE $0x40
	ADDQ $128, BX
	BYTE $0x0F; BYTE $0x0D; BYTE $0x0B
	BYTE $0x0F; BYTE $0x0D; BYTE $0x4B; BYTE $0x40
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
