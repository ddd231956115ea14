// Package aggregate is the consumer side of span stats: it groups finished
// spans by their label key and keeps, per group and per reporting interval,
// the counts and latency sketches the Datadog agent expects.
//
// # Ownership
//
// The package owns Table (the groups of one process), Entry (one group's key
// and its values for the current interval), Record (the raw input that
// travels through the inbox by copy) and Sketch (a DDSketch latency histogram
// laid out exactly like the agent's, so the agent merges it without
// re-mapping). Entries and their sketches belong to the Table that created
// them; the slices returned by Touched and Sketch.Bins alias that memory and
// are valid only until the next Rotate, Clear or Add.
//
// # Concurrency rule
//
// A Table and its entries belong to one goroutine, the consumer: Add, Touched,
// Rotate and Clear must all be called from it, and nothing in the package
// takes a lock. A Sketch is likewise not safe for concurrent use. Producers
// never touch a Table; they hand spans to the consumer through the inbox.
//
// # Design
//
// Add writes the span's raw label fields (peer tags sorted and deduplicated
// into a set) length-prefixed into a scratch buffer behind a per-process
// random seed, hashes it with xxhash, finds the entry in an open-addressing
// table with linear probing by comparing the 64-bit hash and then the key
// bytes (equal bytes mean equal fields), and records the span; a hit
// allocates nothing. A new key creates an entry holding one copy of the key
// bytes, which its Key strings alias. At the cap
// (DefaultMaxEntries unless configured) a new key recycles an entry that had
// no hit in this interval, found by a cursor that only moves forward so one
// interval costs at most about one sweep; the recycled entry is unlinked with
// backward-shift deletion, so probing needs no tombstones. When every entry
// was hit in the interval the span is folded into a single overflow entry
// whose label fields are BlockedValue, so counts and durations are never
// lost, only detail. Entries carry the epoch of their last hit: Touched lists
// the entries of the current epoch (the overflow entry last), and Rotate
// resets them in place and starts a new epoch, keeping their memory. Sketches
// use sketches-go's logarithmic mapping at 1 % relative accuracy and a
// collapsing-lowest dense store of at most MaxBins bins, with uint32 counts;
// the error sketch of an entry is allocated only at its first error.
//
// Cardinality budgets (SetLimits) are decided once per key per interval:
// a hit on an entry already admitted in the interval skips them. Each field's
// budget is an open-addressing set of 48-bit seeded value hashes stamped with
// the interval that last admitted them, so admission never allocates and the
// values of earlier intervals are re-admitted with one probe; a one-hash
// filter beside the slots (4 bits a slot), indexed by a cheap sample of the
// value (its length and its first, middle and last 8 bytes), lets a full
// budget turn away most values it never held without hashing them whole or
// reading the slots; a field that
// repeats its last value (a constant service, "GET", "") is decided by one
// comparison of string addresses. A value over budget becomes BlockedValue
// ("key:tracer_blocked_value" for a peer tag) and the span goes to the entry
// of the collapsed key. Once spans start collapsing (a cardinality attack)
// Add decides the budgets before hashing the raw key, and a collapsed span
// is matched field by field against the last collapsed key, then looked up
// in the recent-span cache under its collapsed fields; only a new collapsed
// key is sorted, encoded and hashed. In that state AddBatch prefetches the
// slots and strings of spans ahead, so the cache misses of never-seen
// strings overlap; otherwise it records each recent-cache hit a few spans
// after finding its entry, with the sketch bin it increments prefetched
// in between.
//
// A small two-way set-associative cache of recent spans (a new key replaces
// the least recently used way), indexed by the addresses of their resource,
// name, service and last peer-tag strings, finds the entry of a span whose
// strings the tracer reuses (constants, route templates) without encoding or
// hashing. A slot is validated by the identity of every field's string data
// (address and length) — the cache holds those strings, so their memory
// cannot be reused while cached, and Go strings are immutable — and a
// per-slot tag in a 4 KiB array turns most misses away before the slot is
// read. Equal strings at new addresses simply miss and take the hashed
// path. The cache pins at most recentSpans spans' strings.
package aggregate
