// Package aggregate is the consumer side of span stats: it groups finished
// spans (Record) by their label key into a Table of entries (Entry) and
// keeps, per entry and per reporting interval, the counts and the latency
// sketches (Sketch, laid out like the agent's) that the Datadog agent expects.
//
// Concurrency: a Table, its entries and sketches belong to one goroutine, the
// consumer, and are not safe for concurrent use; nothing here takes a lock.
// Producers hand spans to the consumer by copy, through the inbox. Slices
// returned by Touched and Sketch.Bins alias the table's memory until the next
// Add, Rotate or Clear.
//
// Shape: an open-addressing hash table over the span's key bytes (seeded
// xxhash) holds at most a capped number of entries; at the cap an entry idle
// in the interval is recycled, or the span goes to one overflow entry. Per
// interval cardinality budgets (SetLimits) replace values over budget by
// BlockedValue. Caches of recent spans, keyed by the identity of their
// strings or by a few bytes of their contents, find most entries without
// encoding or hashing the key.
package aggregate
