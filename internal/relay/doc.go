// Package relay is the statsrelay's core: it takes whole datagrams from the
// socket readers, decodes and checks them, merges the payloads of many
// senders, and hands the merged payloads to the forwarder at each harvest.
// It owns no socket and no HTTP client.
//
// # Concurrency rule
//
// A Relay is safe for concurrent use: several decode workers call Accept
// while a timer goroutine calls Harvest and the forwarder Releases each
// batch once encoded and reports outcomes with Forwarded and Dropped.
// Accept decodes, checks and hashes outside any lock; only the merge into
// the held state takes the Relay's one mutex.
// Origins is safe for concurrent use on its own.
//
// # Design
//
// A datagram is accepted or rejected whole, with a Reason. An accepted
// payload is merged three levels deep: by identity (every payload field but
// RuntimeID and Sequence, the container id corrected from the sender's
// credentials), then by window (buckets that end in the same
// interval-aligned window merge, an end past the relay's clock counting
// as that clock, or as the bucket's start if that is later; the merged
// bucket runs from the earliest start, but not before the window, to the
// latest end; its AgentTimeShift, a shift only the agent
// records and agent v0.85.4 ignores on intake, is forwarded as 0), then by
// group (every label field; peer tags as a set, AdditionalMetricTags and
// SpanDerivedPrimaryTags sorted with their duplicates kept, as the agent's
// own hash keeps them apart). Counts add and sketches
// merge exactly. Held groups are bounded by Config.MaxGroups and what they
// take by Config.MaxHeldBytes: beyond either, spans fold into one overflow
// group per identity and window whose labels are aggregate.BlockedValue.
// Every span of an accepted payload is counted once received and then once
// as forwarded, dropped or still pending, so that received = forwarded +
// dropped + pending holds at every Stats snapshot.
package relay
