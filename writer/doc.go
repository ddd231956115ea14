// Package writer encodes aggregated span stats as the exact msgpack body the
// Datadog agent decodes at POST /v0.6/stats (a ClientStatsPayload), and
// decodes such bodies back, for the relay and for tests.
//
// # Ownership
//
// writer owns the wire format: the msgpack maps of ClientStatsPayload,
// ClientStatsBucket and ClientGroupedStats with the agent's key names and
// value types (strings as str, summaries as bin, IsTraceRoot as an integer,
// the ServiceSource field under the key "srv_src"), and the protobuf
// encoding of the latency sketches carried in OkSummary and ErrorSummary
// (sketches-go's DDSketch message). It owns the sizes (HeaderSize, a bound;
// GroupSize and SketchSize, exact) and the one splitter built on them: Packer packs
// the SDK's report, or decoded and merged groups for the relay, into
// complete payloads under a byte limit, and Split answers the agent's 413
// by re-encoding a payload as smaller ones. It owns the relay datagram
// envelope (AppendEnvelope, ParseDatagram) and the layout of groups that
// differ only in Type into separate buckets (TypeSplitter, keyed by
// AppendFoldedLabels and AppendTagsHash), which the agent's merge of
// duplicates needs. It does not own the entries it encodes — it reads them
// and never keeps a reference — nor the buffers it appends to.
//
// # Concurrency rule
//
// Every function is pure: it reads its arguments and writes only the buffer
// it returns (or the sketch it is given to decode into, or the buffers a
// Packer gets from its Alloc and hands to emit). The package has no
// mutable state after initialisation, so every function is safe for
// concurrent use, as long as the caller does not mutate an entry, sketch or
// buffer while another goroutine encodes or decodes it. A TypeSplitter and
// a Decoder keep memory between calls and are each for one goroutine at a
// time. In the SDK
// only the consumer goroutine encodes, from entries it owns.
//
// # Design
//
// Encoding is append-style: AppendPayload takes a buffer and returns it
// extended, computes an upper bound of the payload's size first from the
// cheap size functions and grows the buffer at most once, so a reused buffer
// makes a report allocation-free. Map keys are precomputed msgpack strings
// and every key is always written, in the agent's order (the agent's own
// MarshalMsg leaves out a nil Stats array; an empty one decodes alike). A sketch is written in place right after its bin header:
// its exact size is known up front (mapping, the positive store as
// contiguous counts from the lowest non-empty index or as the binCounts map,
// whichever is shorter, zero count), and the bins are appended straight
// from the aggregate.Sketch, without intermediate slices. A nil or empty sketch is a
// precomputed empty DDSketch that still carries the mapping, so decoders
// calling sketches-go's FromProto never fail.
//
// It imports msgp for the msgpack primitives, protowire (the wire helpers
// of google.golang.org/protobuf) for the DDSketch message, aggregate, and
// xxhash for TypeSplitter's keys.
// It does not use proto.Marshal/Unmarshal or the generated sketchpb types:
// the message is small and fixed, and DecodeSketch says why it reads it
// field by field. (The protobuf runtime is linked anyway: sketches-go's
// mapping package, under aggregate, imports sketchpb.)
//
// Decoding never trusts its input: it reads with msgp's bounds-checked
// Read*Bytes functions, checks declared array lengths against limits and
// against the bytes left before allocating, and validates a sketch
// completely (mapping equal to the agent's, finite non-negative counts, no
// negative values, a bounded number of bins) before adding anything from it
// to an aggregate.Sketch.
package writer
