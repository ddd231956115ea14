#include "textflag.h"
#include "go_asm.h"

// func prefetchRecord(s *Record)
// Asks for the cache lines of *s (Record__size bytes, at most six lines
// wherever it starts) without waiting for them. PREFETCHT0, not PREFETCHW:
// every amd64 CPU has it, and the write hint did no better (see
// BenchmarkConsumer/Adversarial).
TEXT ·prefetchRecord(SB), NOSPLIT, $0-8
	MOVQ s+0(FP), AX
	PREFETCHT0 0(AX)
	PREFETCHT0 64(AX)
	PREFETCHT0 128(AX)
	PREFETCHT0 192(AX)
	PREFETCHT0 256(AX)
	PREFETCHT0 (Record__size-1)(AX)
	RET

// func prefetchStrings(s *Record)
// Asks for the first bytes of the strings an attack varies: resource,
// service, operation and the first three peer tags. A prefetch of a nil or
// stale address does not fault.
TEXT ·prefetchStrings(SB), NOSPLIT, $0-8
	MOVQ s+0(FP), AX
	MOVQ Record_Resource(AX), BX
	PREFETCHT0 (BX)
	MOVQ Record_Service(AX), BX
	PREFETCHT0 (BX)
	MOVQ Record_Name(AX), BX
	PREFETCHT0 (BX)
	MOVQ (Record_PeerTags+0)(AX), BX
	PREFETCHT0 (BX)
	MOVQ (Record_PeerTags+16)(AX), BX
	PREFETCHT0 (BX)
	MOVQ (Record_PeerTags+32)(AX), BX
	PREFETCHT0 (BX)
	RET

// func prefetch(p unsafe.Pointer)
TEXT ·prefetch(SB), NOSPLIT, $0-8
	MOVQ p+0(FP), AX
	PREFETCHT0 (AX)
	RET
