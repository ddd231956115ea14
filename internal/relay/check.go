// This file holds what a datagram is rejected for (Reason, RejectError)
// and the invariants a decoded payload must hold to be merged.

package relay

import (
	"errors"
	"fmt"
	"time"

	"github.com/spanstats/spanstats/writer"
)

// Reason is why a datagram was rejected.
type Reason uint8

// Reasons, as the metrics label them.
const (
	// Truncated: longer than Config.MaxDatagram (the envelope included).
	Truncated Reason = iota
	// Malformed: not a datagram (writer.ParseDatagram), or its payload does
	// not decode (writer.DecodePayload: bad msgpack, wrong types, limits, a
	// sketch that is not a DDSketch message or has too many bins, trailing
	// bytes).
	Malformed
	// Invalid: decodes but breaks an invariant (see check), including a
	// sketch that decodes but is impossible: another index mapping than the
	// agent's (writer.ErrMapping), negative values or non-integral counts.
	Invalid
	// NumReasons is the number of reasons.
	NumReasons
)

var reasonNames = [NumReasons]string{"truncated", "malformed", "invalid"}

// String is the reason as statsrelay_datagrams_rejected_total labels it.
func (r Reason) String() string {
	if r < NumReasons {
		return reasonNames[r]
	}
	return fmt.Sprintf("Reason(%d)", r)
}

// RejectError is Accept's error: the datagram was rejected whole.
type RejectError struct {
	Reason Reason
	Err    error
}

// Error names the reason and what broke.
func (e *RejectError) Error() string {
	return "relay: " + e.Reason.String() + " datagram: " + e.Err.Error()
}

// Unwrap returns the decoder's or the check's error.
func (e *RejectError) Unwrap() error { return e.Err }

// Bounds of a valid payload.
const (
	// MaxBucketDuration is the longest bucket accepted; the SDK's are one
	// interval (10 s by default) or shorter.
	MaxBucketDuration = time.Hour
	// MaxClockSkew is how far in the future (by the relay's clock) a bucket
	// may start: senders on other hosts (UDP) may run slightly ahead. An
	// SDK whose Flush finds its clock behind the bucket's start sends a
	// bucket of one nanosecond from that start (stats' reportAll); the
	// relay windows a bucket by its end capped at its own clock (or the
	// bucket's start, if later: see state.merge).
	MaxClockSkew = time.Minute
	// maxPayloadHits bounds the hits of one payload: more than a process
	// can count in an interval, and far enough below 2^64 that no sum of
	// accepted payloads in a window wraps around.
	maxPayloadHits = 1 << 32
)

var (
	errTooLong      = errors.New("longer than the datagram limit")
	errNotMap       = errors.New("payload does not start with a msgpack map")
	errErrorsGtHits = errors.New("errors > hits")
	errTopGtHits    = errors.New("top-level hits > hits")
	errSketchGtHits = errors.New("sketch counts > hits")
	errZeroDuration = errors.New("bucket of zero duration")
	errLongBucket   = errors.New("bucket longer than MaxBucketDuration")
	errFutureBucket = errors.New("bucket starts in the future")
	errTooManyHits  = errors.New("more hits than a payload can hold")
	errHeaderValue  = errors.New("a control character in a field sent as an HTTP header")
)

// headerSafe reports whether s can be an HTTP header value: no control
// character but tab (net/http refuses the request otherwise, and the
// client would retry it until its budget ran out).
func headerSafe(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 && c != '\t' || c == 0x7f {
			return false
		}
	}
	return true
}

// decodeReason classifies a writer.DecodePayload error: a sketch that parses
// but cannot be a latency sketch of the agent's is invalid; the rest is
// malformed.
func decodeReason(err error) Reason {
	if errors.Is(err, writer.ErrMapping) || errors.Is(err, writer.ErrNegativeValues) ||
		errors.Is(err, writer.ErrBadCount) {
		return Invalid
	}
	return Malformed
}

// checkClaim returns why p's ContainerID, as it will be forwarded, cannot
// be sent as a header, or nil.
func checkClaim(p *writer.Payload) error {
	if !headerSafe(p.ContainerID) {
		return fmt.Errorf("%w: ContainerID", errHeaderValue)
	}
	return nil
}

// check returns why p breaks an invariant, or nil. now is unix ns.
func check(p *writer.Payload, now uint64) error {
	// Forwarded as Datadog-Meta-Lang and Datadog-Meta-Tracer-Version; the
	// ContainerID (Datadog-Container-ID, Datadog-Entity-ID) is checked
	// once the sender's credentials have replaced it or not (checkClaim).
	for _, f := range [...]struct{ name, v string }{
		{"Lang", p.Lang}, {"TracerVersion", p.TracerVersion},
	} {
		if !headerSafe(f.v) {
			return fmt.Errorf("%w: %s", errHeaderValue, f.name)
		}
	}
	var total uint64
	future := now + uint64(MaxClockSkew)
	for bi := range p.Buckets {
		b := &p.Buckets[bi]
		switch {
		case b.Duration == 0:
			return fmt.Errorf("%w at Stats/%d", errZeroDuration, bi)
		case b.Duration > uint64(MaxBucketDuration):
			return fmt.Errorf("%w at Stats/%d", errLongBucket, bi)
		case b.Start > future:
			return fmt.Errorf("%w at Stats/%d", errFutureBucket, bi)
		}
		for gi := range b.Groups {
			g := &b.Groups[gi]
			var err error
			ok, bad := sketchCounts(g)
			switch {
			case g.Errors > g.Hits:
				err = errErrorsGtHits
			case g.TopLevelHits > g.Hits:
				err = errTopGtHits
			case ok > g.Hits || bad > g.Hits-ok: // spelled out: ok+bad may wrap
				err = errSketchGtHits
			case g.Hits > maxPayloadHits-total:
				err = errTooManyHits
			}
			if err != nil {
				return fmt.Errorf("%w at Stats/%d/Stats/%d", err, bi, gi)
			}
			total += g.Hits
		}
	}
	return nil
}

// sketchCounts is how many values g's ok and error summaries hold (the
// relay's Decoder leaves them on the wire; a group without either has
// none).
func sketchCounts(g *writer.Group) (ok, bad uint64) {
	if g.Wire == nil {
		return 0, 0
	}
	return g.Wire.Ok.Count(), g.Wire.Err.Count()
}
