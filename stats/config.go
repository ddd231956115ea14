// This file holds Config, its defaults and bounds, and New's checks of it.

package stats

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"reflect"
	"runtime"
	"slices"
	"strings"
	"time"
	"unicode"

	"github.com/spanstats/spanstats/aggregate"
	"github.com/spanstats/spanstats/internal/agentclient"
	"github.com/spanstats/spanstats/writer"
)

// Defaults for the zero values of Config.
const (
	// DefaultAgentURL is the agent's default trace endpoint.
	DefaultAgentURL = "http://localhost:8126"
	// DefaultBucketInterval is the agent's stats bucket length.
	DefaultBucketInterval = 10 * time.Second
	// DefaultInboxSize bounds the spans waiting for the consumer (slots of
	// 336 B: 2.6 MiB). Under overload a deeper inbox buys little
	// (BenchmarkInboxOverload); below it, the consumer drains at half full (see
	// wakeFraction), and the other half takes the bursts that arrive while
	// it waits for a processor (BenchmarkPaced in bench/peer, at 1 M
	// spans/s).
	DefaultInboxSize = 8192
	// DefaultShedYieldEvery keeps yields under 1 in 1000 full-inbox calls,
	// out of Publish's p99.9 latency, while a publisher still leaves its
	// processor often enough that the consumer counts as many spans as
	// with frequent yields (BenchmarkPublishLatencyOverload).
	DefaultShedYieldEvery = 4096
	// DefaultMaxAggregates is the table cap (dd-trace-java's default).
	DefaultMaxAggregates = aggregate.DefaultMaxEntries
	// DefaultMaxPayloadBytes keeps every body under the agent's 25 MiB
	// request limit, with room for the HTTP framing.
	DefaultMaxPayloadBytes = 25<<20 - 64<<10
	// DefaultMaxDatagramBytes is the datagram size limit toward a relay over
	// a Unix socket; over UDP the default is MaxUDPDatagramBytes.
	DefaultMaxDatagramBytes = 64 << 10
	// MaxUDPDatagramBytes is the largest UDP payload over IPv4.
	MaxUDPDatagramBytes = 65507
	// DefaultHTTPTimeout bounds one POST, as dd-trace-go does.
	DefaultHTTPTimeout = agentclient.DefaultTimeout
	// DefaultSendQueue is how many reports may wait for the sender; beyond
	// that a report is dropped and counted rather than blocking the consumer.
	DefaultSendQueue = 4
	// DefaultMaxRetries, with the backoff defaults, gives up on a payload
	// after about 3 s of failures (0.2+0.4+0.8+1.6 s, jittered).
	DefaultMaxRetries = agentclient.DefaultMaxRetries
	// DefaultRetryBackoff is the first retry's delay.
	DefaultRetryBackoff = agentclient.DefaultRetryBackoff
	// DefaultMaxRetryBackoff caps the doubling.
	DefaultMaxRetryBackoff = agentclient.DefaultMaxRetryBackoff
	// DefaultMaxRetryPayloads bounds the payloads waiting for a retry.
	DefaultMaxRetryPayloads = 8
	// DefaultMaxRetryBytes bounds their bytes: enough for two maximal
	// payloads, so a retry storm costs bounded memory.
	DefaultMaxRetryBytes = 64 << 20
	// DefaultStopRetryWindow bounds how long Stop retries what the agent
	// refused for a moment: the default retry budget's span, about 3 s,
	// with room for its jitter and one request.
	DefaultStopRetryWindow = 5 * time.Second
	// DefaultInfoRefresh is the longest /info poll period while stats are
	// disabled (see Config.InfoRefresh).
	DefaultInfoRefresh = agentclient.DefaultInfoRefresh
)

// Bounds of Config's sizes, counts and durations: New returns an error
// wrapping ErrBadConfig, naming the field, for a value beyond one, so that
// no value can make New or Start allocate without bound or misbehave.
const (
	// MinBucketInterval and MaxBucketInterval bound BucketInterval: the
	// tracers configure the interval in whole seconds (the agent's own
	// buckets are 10 s); a shorter one floods the send queue, and a longer
	// one than an hour is a unit mistake (math.MaxInt64 put bucket starts
	// in 1754).
	MinBucketInterval = time.Second
	MaxBucketInterval = time.Hour
	// MaxInboxSize bounds InboxSize: a deeper inbox only delays the drops
	// of an overloaded consumer (BenchmarkInboxOverload), and its slots (a
	// few hundred bytes each) are allocated up front.
	MaxInboxSize = 1 << 16
	// MaxShedYieldEvery bounds ShedYieldEvery: rarer yields than this are
	// no yields at all; say so with ShedWithoutYield.
	MaxShedYieldEvery = 1 << 16
	// MaxMaxAggregates bounds MaxAggregates: at about 52 KiB a group at
	// worst (see MaxAggregates), the two tables at this cap may hold 6.5 GiB
	// already, and their payloads would exceed the agent's request limit.
	MaxMaxAggregates = 1 << 16
	// MaxMaxPayloadBytes bounds MaxPayloadBytes: the agent refuses bodies
	// over its max_request_bytes, 25 MiB by default (a lower limit given
	// by /info splits payloads before they are sent).
	MaxMaxPayloadBytes = 25 << 20
	// MaxMaxDatagramBytes bounds MaxDatagramBytes: the relay accepts no
	// longer datagram (its -max-datagram flag stops there too).
	MaxMaxDatagramBytes = 1 << 20
	// MaxSendQueue bounds SendQueue: each waiting report may hold a full
	// table's payloads, and reports queued this deep are intervals late.
	MaxSendQueue = 256
	// MaxMaxRetries bounds MaxRetries: at the largest backoffs more retries
	// would hold one payload's memory and retry slot for days, for a bucket
	// the agent then files under its own current time.
	MaxMaxRetries = 32
	// MaxMaxRetryBackoff bounds RetryBackoff and MaxRetryBackoff: a longer
	// wait is a unit mistake (the agent files a late bucket under its
	// current time anyway, so waiting longer saves nothing).
	MaxMaxRetryBackoff = time.Hour
	// MaxMaxRetryPayloads and MaxMaxRetryBytes bound what waits for a
	// retry: the point of the budget is bounded memory.
	MaxMaxRetryPayloads = 1 << 10
	MaxMaxRetryBytes    = 1 << 30
	// MinHTTPTimeout and MaxHTTPTimeout bound HTTPTimeout. Below the
	// minimum every request times out before a loopback agent can answer
	// (HTTPTimeout: 10 is ten nanoseconds), which would read as an agent
	// that is down; above the maximum, the sender posts one request at a
	// time, so a longer wait on a stalled agent only fills the send queue.
	MinHTTPTimeout = 10 * time.Millisecond
	MaxHTTPTimeout = time.Minute
	// MinRetryBackoff bounds RetryBackoff from below: a shorter first
	// delay (RetryBackoff: 200 is nanoseconds) spends every retry within
	// microseconds, so an agent restarting for a moment loses every payload.
	MinRetryBackoff = time.Millisecond
	// MinInfoRefresh and MaxInfoRefresh bound InfoRefresh: faster polls
	// hammer an agent that is off, slower ones leave stats off long after
	// the agent takes them again.
	MinInfoRefresh = 100 * time.Millisecond
	MaxInfoRefresh = time.Hour
	// MaxCardinalityLimit bounds each positive field of CardinalityLimits:
	// a budget's value set is allocated up front in proportion to it
	// (a negative limit, unlimited, keeps no value set: the table cap alone
	// bounds the groups).
	MaxCardinalityLimit = aggregate.MaxLimit
)

// minBucketInterval and minInfoRefresh are MinBucketInterval and
// MinInfoRefresh; tests lower them to run intervals in milliseconds.
var minBucketInterval, minInfoRefresh = MinBucketInterval, MinInfoRefresh

// Config configures an Aggregator. The zero value of every field selects its
// documented default.
type Config struct {
	// AgentURL is where payloads go: the agent at "http://host:port" or
	// "unix:///path/to/apm.socket", or a relay (cmd/statsrelay) at
	// "unixgram:///path/to/relay.sock" (a file path: New refuses a Linux
	// abstract name "@name", on which the relay does not listen) or
	// "udp://host:port". Left empty, it comes from the environment
	// (SPANSTATS_RELAY_URL, then the Datadog tracers' variables: see
	// EnvRelayURL), else the agent's DefaultAgentSocket when it exists,
	// else DefaultAgentURL. A user and password in an
	// http(s) URL are sent as Basic authorization.
	AgentURL string

	// Payload-level identity, written into every ClientStatsPayload. New
	// trims white space around every identity field (these, the ones below
	// and Tags) and refuses any other control character (ErrBadConfig).
	// Left empty, Env, Service and Version come from EnvEnv, EnvService and
	// EnvVersion, else from the env:, service: and version: tags of Tags
	// (given, else from EnvTags or EnvOtelResourceAttributes), as dd-trace-go takes them from its global
	// tags: set in Tags, they yield to their own variable. An empty Hostname (the default unless EnvHostname or
	// EnvReportHostname says otherwise) lets the agent use its own host,
	// as it does for the traces of dd-trace-go.
	Env, Service, Version, Hostname string
	// RuntimeID identifies this process; a random one is generated when
	// empty. Give each aggregator its own: a relay counts each sender's
	// datagram sequence numbers by RuntimeID, and two aggregators sharing
	// one would read to it as one sender losing datagrams.
	RuntimeID string
	// Lang is the tracer language (default "go"); LangVersion its version
	// (default the running Go version); TracerVersion the tracer's version.
	Lang, LangVersion, TracerVersion string
	// ContainerID and EntityID are sent as Datadog-Container-ID and
	// Datadog-Entity-ID headers when set (ContainerID also in the payload).
	ContainerID, EntityID string
	// Tags, GitCommitSha, ImageTag and ProcessTags are copied to the
	// payload. Each payload repeats them: New refuses more than
	// writer.MaxStrings tags, a header over a quarter of MaxPayloadBytes
	// (MaxDatagramBytes toward a relay), or so many tags shorter than 3
	// bytes that a relay's decoder would refuse the payloads. The agent
	// (v0.85) takes a payload's Tags as its container's tags, in place of
	// those it would look up for the container id, and drops them when
	// there is none; dd-trace-go sends none: leave Tags nil unless that is
	// what is meant. EnvTags (DD_TAGS) is never copied there, only read
	// for the fallbacks above, and not at all when Tags is non-nil. An
	// empty GitCommitSha comes from EnvGitCommit, else the git.commit.sha
	// tag of Tags or EnvTags (not OTEL_RESOURCE_ATTRIBUTES); from neither
	// when EnvGitMetadataEnabled is false.
	Tags                                []string
	GitCommitSha, ImageTag, ProcessTags string

	// BucketInterval is the reporting interval (default 10 s, within
	// [MinBucketInterval, MaxBucketInterval]). Buckets start on multiples
	// of it since the Unix epoch (as the agent and statsrelay align them;
	// an interval that divides a day keeps them on the wall clock's round
	// times too); a bucket closes a tenth of the interval (at most 1 s)
	// after its end (see Span.Start) and is sent within SendJitter of it.
	BucketInterval time.Duration
	// SendJitter is the most an interval's report waits past its boundary
	// before it is sent, drawn at random per report, so that a host's
	// processes do not all send in the same millisecond (buckets stay
	// aligned; only the send moves). Default min(BucketInterval/5, 2 s):
	// 2 s at the default interval and any longer one, the send drawn after
	// the close; at most BucketInterval/2; negative, or less than the
	// close, sends when the bucket closes, BucketInterval/10 (at most 1 s)
	// after its boundary. Flush and Stop never wait for it.
	SendJitter time.Duration
	// InboxSize is the capacity of the lock-free inbox (rounded up to a power
	// of two; default DefaultInboxSize, at most MaxInboxSize). A full inbox
	// drops and counts. A deeper one drains in fewer, larger batches, which
	// can cost less CPU per span at a steady high rate (BenchmarkPacedInbox
	// in bench/peer) but counts fewer spans overloaded
	// (BenchmarkInboxOverload in bench).
	InboxSize int
	// ShedYieldEvery sets how often a Publish that finds the inbox full
	// yields its processor (runtime.Gosched) before returning: about one
	// in ShedYieldEvery such calls (default DefaultShedYieldEvery, at most
	// MaxShedYieldEvery; 1 yields on every one). Under overload the yields
	// are what give the consumer CPU; each costs its caller a scheduling
	// round, which on a loaded host can be many milliseconds, so a small
	// value puts that wait in the tail latency of Publish. Only calls that
	// find the inbox full ever yield.
	ShedYieldEvery int
	// ShedWithoutYield makes every Publish that finds the inbox full return
	// at once, never yielding (ShedYieldEvery is then ignored).
	ShedWithoutYield bool

	// MaxAggregates caps the number of groups (default 2048, or
	// DD_TRACE_STATS_CARDINALITY_LIMIT; at most MaxMaxAggregates); beyond it idle groups are recycled, then spans
	// fold into the overflow group. The cap is per bucket: the previous
	// bucket, open for its grace, has its own. It bounds the aggregator's
	// memory: a group keeps up to about 52 KiB (labels at their length
	// limits with MaxPeerTags peer tags, each at MaxTagLen or a list of IP
	// addresses that quantizing, as the agent's, makes about twice as long;
	// two sketches of aggregate.MaxBins bins, which spans of 1 ns and of
	// 20 years fill) and a table up to
	// 2 MiB besides (TestGroupHeapWorstCase), up to 2 MiB of the tracer's
	// label strings its recent-span caches keep alive
	// (TestRecentCachesPinBoundedBytes) and up to about 1.6 MiB of quantized
	// peer tags, so about 220 MiB at the default at worst; groups are
	// kept for reuse, not freed.
	MaxAggregates int
	// MaxPayloadBytes splits a report into several complete payloads so that
	// none exceeds it (default DefaultMaxPayloadBytes, at least 64 KiB, at
	// most MaxMaxPayloadBytes).
	MaxPayloadBytes int
	// MaxDatagramBytes bounds each datagram sent to a relay (AgentURL
	// unixgram:// or udp://), envelope included: a report is split into
	// complete payloads that fit (default DefaultMaxDatagramBytes, over UDP
	// MaxUDPDatagramBytes; at most MaxUDPDatagramBytes over UDP and
	// MaxMaxDatagramBytes otherwise).
	// A payload of one group that alone exceeds it is dropped and counted
	// (ErrDatagramTooLarge). The socket's send buffer is raised to twice
	// the limit (on Linux never lowered; elsewhere set to it), which the
	// kernel caps at
	// net.core.wmem_max (kern.ipc.maxsockbuf on macOS and FreeBSD, whose
	// UDP sockets start at 9 216 bytes).
	MaxDatagramBytes int
	// HTTPTimeout bounds each request to the agent (default 10 s, within
	// [MinHTTPTimeout, MaxHTTPTimeout]).
	HTTPTimeout time.Duration
	// SendQueue is the number of reports that may wait for the sender
	// (default 4, at most MaxSendQueue). A report that finds it full is
	// dropped and counted (Health.PayloadsDropped, SpansUnsent; Flush
	// returns ErrSendQueueFull): the consumer never waits for the sender,
	// but for Stop's final report, which waits until Stop's context ends.
	SendQueue int

	// CardinalityLimits are the per-interval budgets of distinct values per
	// label field (zero fields: aggregate.DefaultLimits, or the
	// DD_TRACE_STATS_*_CARDINALITY_LIMIT environment variables; negative:
	// unlimited; positive at most MaxCardinalityLimit). Values over budget
	// become tracer_blocked_value.
	CardinalityLimits aggregate.Limits
	// PeerTagKeys, when set, are the only peer-tag keys kept (but for the
	// "_dd.base_service" tag of an internal span, or one without kind, which
	// the agent keeps whatever its list holds). When empty the
	// agent's /info peer_tags list is used once read (none when it sends
	// none: its peer_tags_aggregation is off); until then every key
	// is kept (each key under its own budget). New refuses an empty key,
	// white space around one, a control character or a ":" in one.
	PeerTagKeys []string

	// MaxRetries is how many times a payload is retried after a retryable
	// failure (408, 429, 5xx, network errors, timeouts). Default 4, at most
	// MaxMaxRetries.
	MaxRetries int
	// RetryBackoff is the first retry's delay (default 200 ms), doubled per
	// attempt up to MaxRetryBackoff (default 5 s, or RetryBackoff when that
	// is longer; set, it may not be shorter than RetryBackoff), with
	// jitter; RetryBackoff at least MinRetryBackoff, both at most
	// MaxMaxRetryBackoff.
	RetryBackoff, MaxRetryBackoff time.Duration
	// MaxRetryPayloads and MaxRetryBytes bound what waits for a retry
	// (defaults 8 payloads and 64 MiB, at most MaxMaxRetryPayloads and
	// MaxMaxRetryBytes); a failure beyond them is dropped and counted in
	// PayloadsDropped.
	MaxRetryPayloads, MaxRetryBytes int
	// InfoRefresh is the longest wait between /info polls while the agent
	// does not accept stats, or while /info cannot be read (its body limit
	// is then unknown) (default 30 s, within [MinInfoRefresh,
	// MaxInfoRefresh]). The first such poll comes after RetryBackoff and
	// each one that finds the agent so doubles the wait up to InfoRefresh,
	// so an agent back from a restart is seen within seconds. While the
	// agent takes stats, /info is read again every 10 × InfoRefresh (5
	// minutes by default), less up to a tenth: an agent restarted with
	// another peer_tags list fails no request, so only that read tells.
	InfoRefresh time.Duration
	// StopRetryWindow is the longest Stop spends on the retries of payloads
	// the agent refused for a moment (5xx, timeouts, a 404 while /info
	// may list the stats endpoint again): they go at their backoff within
	// this window and Stop's ctx, none starting after it; what is left is
	// given one last attempt (default DefaultStopRetryWindow, at most
	// MaxMaxRetryBackoff).
	StopRetryWindow time.Duration
	// Metrics, when set, receives the aggregator's own health as DogStatsD
	// counts and gauges (datadog.tracer.stats.*) after each report, and
	// after the retries and /info polls the sender runs meanwhile, from the
	// sender goroutine. MetricsNamespace is the namespace that client already
	// prepends (e.g. "datadog.tracer.", with or without the trailing dot),
	// so the prefix is never doubled.
	Metrics          MetricsClient
	MetricsNamespace string
	// Logger receives warnings (default slog.Default()): configuration
	// fallbacks when New runs, then, from the sender goroutine and at most
	// once a minute per kind with the count since the previous line (and
	// once more at Stop with whatever is pending), failed and dropped
	// payloads, the agent refusing stats, shed spans, and spans Stop's
	// deadline left in the inbox (see log.go); also from the sender, the
	// first failed /info read of a streak and the read that ends it (see
	// Health.InfoError). On the Publish path it is called once at most:
	// for the first span dropped by an aggregator never started (see
	// Publish).
	Logger *slog.Logger
}

// ErrBadConfig is wrapped by every configuration error New returns.
var ErrBadConfig = errors.New("stats: bad config")

// withDefaults returns c with the environment (see env.go) and then the
// defaults filled in, or an error for values that cannot work.
func (c Config) withDefaults() (Config, error) { return c.withDefaultsFrom(os.Getenv) }

// withDefaultsFrom is withDefaults reading the environment with getenv.
func (c Config) withDefaultsFrom(getenv func(string) string) (Config, error) {
	return c.withDefaultsEnv(getenv, true)
}

// withDefaultsEnv is withDefaultsFrom; with fallback, environment variables
// that make the payload header too long are ignored (withoutLongVariables).
func (c Config) withDefaultsEnv(getenv func(string) string, fallback bool) (Config, error) {
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	// Trimmed before the environment is read: a blank field leaves its
	// variable to it, as a blank variable leaves the default.
	c.Tags = slices.Clone(c.Tags) // trimmed: never the caller's array
	for _, f := range c.identity() {
		*f.v = strings.TrimSpace(*f.v)
	}
	given := c
	c = c.withEnv(getenv, fileExists, c.Logger)
	// A relay URL that parses can still fail New by the datagram limits it
	// brings: the error then names the variable, which the Config does not
	// show (TestRelayURLFromEnvNamedInErrors).
	via := ""
	if given.AgentURL == "" && c.AgentURL != "" && c.AgentURL == strings.TrimSpace(getenv(EnvRelayURL)) {
		via = " (AgentURL from " + EnvRelayURL + ")"
	}
	if c.AgentURL == "" {
		c.AgentURL = DefaultAgentURL
	}
	if c.Lang == "" {
		c.Lang = "go"
	}
	if c.LangVersion == "" {
		c.LangVersion = strings.TrimPrefix(runtime.Version(), "go")
	}
	if c.RuntimeID == "" {
		c.RuntimeID = newRuntimeID()
	}
	for _, f := range c.identity() {
		if i := controlAt(*f.v); i >= 0 {
			return c, fmt.Errorf("%w: %s has a control character at byte %d: %q", ErrBadConfig, f.name, i, *f.v)
		}
	}
	for i, k := range c.PeerTagKeys {
		// An empty key (strings.Split of "") or one with white space would
		// match no span's tag, and a set list replaces the agent's: no
		// peer tag would be kept, without a word.
		if k == "" || strings.TrimSpace(k) != k || controlAt(k) >= 0 || strings.Contains(k, ":") {
			return c, fmt.Errorf("%w: PeerTagKeys[%d] is %q: want a tag key such as \"peer.service\" (not empty, no white space around it, no control character, no \":\")", ErrBadConfig, i, k)
		}
	}
	for _, d := range []struct {
		name     string
		v        *int
		def, max int
	}{
		{"InboxSize", &c.InboxSize, DefaultInboxSize, MaxInboxSize},
		{"ShedYieldEvery", &c.ShedYieldEvery, DefaultShedYieldEvery, MaxShedYieldEvery},
		{"MaxAggregates", &c.MaxAggregates, DefaultMaxAggregates, MaxMaxAggregates},
		{"MaxPayloadBytes", &c.MaxPayloadBytes, DefaultMaxPayloadBytes, MaxMaxPayloadBytes},
		{"SendQueue", &c.SendQueue, DefaultSendQueue, MaxSendQueue},
		{"MaxRetries", &c.MaxRetries, DefaultMaxRetries, MaxMaxRetries},
		{"MaxRetryPayloads", &c.MaxRetryPayloads, DefaultMaxRetryPayloads, MaxMaxRetryPayloads},
		{"MaxRetryBytes", &c.MaxRetryBytes, DefaultMaxRetryBytes, MaxMaxRetryBytes},
	} {
		if *d.v < 0 || *d.v > d.max {
			return c, fmt.Errorf("%w: %s must be in [0, %d], got %d", ErrBadConfig, d.name, d.max, *d.v)
		}
		if *d.v == 0 {
			*d.v = d.def
		}
	}
	maxBackoffGiven := c.MaxRetryBackoff != 0
	for _, d := range []struct {
		name          string
		v             *time.Duration
		def, min, max time.Duration
	}{
		{"BucketInterval", &c.BucketInterval, DefaultBucketInterval, minBucketInterval, MaxBucketInterval},
		{"HTTPTimeout", &c.HTTPTimeout, DefaultHTTPTimeout, MinHTTPTimeout, MaxHTTPTimeout},
		{"RetryBackoff", &c.RetryBackoff, DefaultRetryBackoff, MinRetryBackoff, MaxMaxRetryBackoff},
		{"MaxRetryBackoff", &c.MaxRetryBackoff, DefaultMaxRetryBackoff, 0, MaxMaxRetryBackoff},
		{"InfoRefresh", &c.InfoRefresh, DefaultInfoRefresh, minInfoRefresh, MaxInfoRefresh},
		{"StopRetryWindow", &c.StopRetryWindow, DefaultStopRetryWindow, 0, MaxMaxRetryBackoff},
	} {
		if *d.v < 0 {
			return c, fmt.Errorf("%w: %s must be >= 0, got %s", ErrBadConfig, d.name, *d.v)
		}
		if *d.v == 0 {
			*d.v = d.def
		}
		if *d.v < d.min || *d.v > d.max {
			return c, fmt.Errorf("%w: %s must be in [%s, %s], got %s", ErrBadConfig, d.name, d.min, d.max, *d.v)
		}
	}
	// The sender caps every delay at MaxRetryBackoff, the first included:
	// a longer RetryBackoff would be cut without a word.
	if c.RetryBackoff > c.MaxRetryBackoff {
		if maxBackoffGiven {
			return c, fmt.Errorf("%w: RetryBackoff %s is over MaxRetryBackoff %s", ErrBadConfig, c.RetryBackoff, c.MaxRetryBackoff)
		}
		c.MaxRetryBackoff = c.RetryBackoff
	}
	// A longer wait would hold reports past the next boundary and pile
	// them up in the sender.
	if c.SendJitter > c.BucketInterval/2 {
		return c, fmt.Errorf("%w: SendJitter must be at most BucketInterval/2 (%s), got %s", ErrBadConfig, c.BucketInterval/2, c.SendJitter)
	}
	switch {
	case c.SendJitter == 0:
		c.SendJitter = DefaultSendJitter(c.BucketInterval)
	case c.SendJitter < 0:
		c.SendJitter = 0
	}
	for f := range aggregate.NumFields {
		if v := c.CardinalityLimits.Get(f); v > MaxCardinalityLimit {
			// Limits' fields are in Field order (see aggregate.Limits).
			name := reflect.TypeFor[aggregate.Limits]().Field(int(f)).Name
			return c, fmt.Errorf("%w: CardinalityLimits.%s must be at most %d (negative: unlimited), got %d", ErrBadConfig, name, MaxCardinalityLimit, v)
		}
	}
	if c.MaxDatagramBytes < 0 || c.MaxDatagramBytes > MaxMaxDatagramBytes || c.MaxDatagramBytes > 0 && c.MaxDatagramBytes < MinDatagramBytes {
		return c, fmt.Errorf("%w: MaxDatagramBytes must be 0 or in [%d, %d], got %d", ErrBadConfig, MinDatagramBytes, MaxMaxDatagramBytes, c.MaxDatagramBytes)
	}
	// By the parsed scheme, which URL parsing lowercases: "UDP://" is UDP too.
	t, _ := parseAgentURL(c.AgentURL) // an error is New's to report
	udp := t.network == "udp"
	if c.MaxDatagramBytes == 0 {
		c.MaxDatagramBytes = DefaultMaxDatagramBytes
		if udp {
			c.MaxDatagramBytes = MaxUDPDatagramBytes
		}
	}
	if udp && c.MaxDatagramBytes > MaxUDPDatagramBytes {
		return c, fmt.Errorf("%w: MaxDatagramBytes %d is over UDP's %d%s", ErrBadConfig, c.MaxDatagramBytes, MaxUDPDatagramBytes, via)
	}
	if c.MaxPayloadBytes < minPayloadBytes {
		return c, fmt.Errorf("%w: MaxPayloadBytes must be >= %d, got %d", ErrBadConfig, minPayloadBytes, c.MaxPayloadBytes)
	}
	if t.network != "" && c.EntityID != "" {
		// The payload has no field for it: the relay names each sender's
		// container from its credentials (Unix) or the payload's
		// ContainerID.
		c.Logger.Warn("spanstats: EntityID does not reach the agent through a relay; set ContainerID, or run the relay with -origin over its Unix socket",
			"entity_id", c.EntityID)
	}
	err := c.headerFits(t.network != "")
	if err == nil {
		return c, nil
	}
	if !fallback {
		return c, err
	}
	h := headerOf(&c)
	if d, ok := given.withoutLongVariables(getenv, writer.HeaderSize(&h), c.Logger, err); ok {
		return d, nil
	}
	return c, fmt.Errorf("%w%s; the longest: %s", err, via, longestIdentity(&c))
}

// headerVariables are the environment variables whose values go into the
// payload header.
var headerVariables = []string{EnvTags, EnvOtelResourceAttributes, EnvEnv, EnvService, EnvOtelService, EnvVersion, EnvHostname, EnvGitCommit}

// withoutLongVariables resolves given again without the environment
// variables that make the payload header too long (err), as any
// environment value that cannot be used is logged and ignored: the longest
// first, each kept out only if that shortens the header (a variable the
// config overrides is not the cause: the header, of size bytes with every
// variable, is no shorter without it), until it fits. DD_TAGS goes with the
// env, service and version it would have set. It reports false, logging
// nothing, when the header does not fit without them either: the config's
// own fields are the cause.
func (given Config) withoutLongVariables(getenv func(string) string, size int, log *slog.Logger, err error) (Config, bool) {
	vars := slices.Clone(headerVariables)
	vars = slices.DeleteFunc(vars, func(k string) bool { return getenv(k) == "" })
	slices.SortStableFunc(vars, func(a, b string) int { return len(getenv(b)) - len(getenv(a)) })
	quiet := given
	quiet.Logger = slog.New(slog.DiscardHandler) // the first resolution logged the other variables
	sizeOf := func(c Config) int { h := headerOf(&c); return writer.HeaderSize(&h) }
	var out []string
	last := size
	for _, k := range vars {
		out = append(out, k)
		d, derr := quiet.withDefaultsEnv(func(k string) string {
			if slices.Contains(out, k) {
				return ""
			}
			return getenv(k)
		}, false)
		if derr == nil {
			for _, k := range out {
				log.Warn("spanstats: ignoring an environment variable; using the default", "name", k, "reason", err.Error())
			}
			d.Logger = given.Logger
			if d.Logger == nil {
				d.Logger = log
			}
			return d, true
		}
		if n := sizeOf(d); n >= last {
			out = out[:len(out)-1] // not a cause
		} else {
			last = n
		}
	}
	return Config{}, false
}

// longestIdentity names the longest identity field of c (Tags counted
// whole), for the error of a header too long.
func longestIdentity(c *Config) string {
	name, n := "Tags", 0
	for _, t := range c.Tags {
		n += len(t)
	}
	for _, f := range c.identity() {
		if !strings.HasPrefix(f.name, "Tags[") && len(*f.v) > n {
			name, n = f.name, len(*f.v)
		}
	}
	return fmt.Sprintf("%s (%d bytes)", name, n)
}

// headerFits checks the payload header against the payload (or datagram)
// limit: every payload repeats it, and one that fills the limit leaves no
// room for a group, so that every report would be dropped.
func (c *Config) headerFits(datagrams bool) error {
	if len(c.Tags) > writer.MaxStrings {
		return fmt.Errorf("%w: %d Tags, the agent and the relay decode at most %d", ErrBadConfig, len(c.Tags), writer.MaxStrings)
	}
	limit, name := c.MaxPayloadBytes, "MaxPayloadBytes"
	if datagrams {
		limit, name = c.MaxDatagramBytes, "MaxDatagramBytes"
	}
	h := headerOf(c)
	if n := writer.HeaderSize(&h); n > limit/maxHeaderShare {
		return fmt.Errorf("%w: the payload header (Tags and the other identity fields) is %d bytes, over 1/%d of %s (%d)", ErrBadConfig, n, maxHeaderShare, name, limit)
	}
	// The relay's decoder, and Split's, take at most one array string per
	// MinWireStringBytes of a payload, so that empty strings cannot make
	// them allocate: many Tags shorter than that would fail every payload
	// holding few groups (the final datagram holds none).
	if _, err := writer.DecodePayload(writer.AppendPayload(nil, &h, nil)); err != nil {
		return fmt.Errorf("%w: %d Tags, most of them shorter than %d bytes: the relay and the 413 split would not decode the payloads (%v); join or drop the short ones",
			ErrBadConfig, len(c.Tags), writer.MinWireStringBytes-1, err)
	}
	return nil
}

// maxHeaderShare: the payload header may take at most this fraction of a
// payload or datagram, leaving the rest for groups.
const maxHeaderShare = 4

// namedString is a string field of Config and its name, for errors.
type namedString struct {
	name string
	v    *string
}

// identity is every field of c written to a payload, a request header or
// a metric name: a line break in one would make every request fail
// locally (an invalid header), so New trims white space around them and
// refuses any other control character.
func (c *Config) identity() []namedString {
	f := []namedString{
		{"Env", &c.Env}, {"Service", &c.Service}, {"Version", &c.Version},
		{"Hostname", &c.Hostname}, {"RuntimeID", &c.RuntimeID}, {"Lang", &c.Lang},
		{"LangVersion", &c.LangVersion}, {"TracerVersion", &c.TracerVersion},
		{"ContainerID", &c.ContainerID}, {"EntityID", &c.EntityID},
		{"GitCommitSha", &c.GitCommitSha}, {"ImageTag", &c.ImageTag},
		{"ProcessTags", &c.ProcessTags}, {"MetricsNamespace", &c.MetricsNamespace},
	}
	for i := range c.Tags {
		f = append(f, namedString{fmt.Sprintf("Tags[%d]", i), &c.Tags[i]})
	}
	return f
}

// controlAt is the byte offset of the first control character in v
// (C0, DEL or C1), or -1.
func controlAt(v string) int {
	for i, r := range v {
		if unicode.IsControl(r) {
			return i
		}
	}
	return -1
}

// DefaultSendJitter is Config.SendJitter's default for a BucketInterval of
// bucketInterval: the most a report is sent past its boundary, which a
// relay's wait for its senders (statsrelay's -grace) must cover.
func DefaultSendJitter(bucketInterval time.Duration) time.Duration {
	return min(bucketInterval/5, maxSendOffset)
}

// maxSendOffset caps how far past its boundary the default SendJitter
// sends a report: done 2 s after it, well before the agent re-times
// buckets older than ~18 s. The close, at most maxGrace after the
// boundary, leaves a second of spread at any interval from 10 s.
const maxSendOffset = 2 * time.Second

// MinDatagramBytes is the smallest MaxDatagramBytes, so a relay's
// -max-datagram may not be lower: it leaves room for the envelope, a
// header of 1 KiB and one group with both sketches at their 2048-bin cap
// (8 bytes a bin) and every label at its length limit
// (TestMinDatagramRoom). A longer header (New accepts up to a quarter of
// the limit) or many peer tags at MaxTagLen can make such a group exceed
// it; it is then dropped and counted (ErrDatagramTooLarge).
const MinDatagramBytes = 40 << 10

// minPayloadBytes leaves room for the header and one large group.
const minPayloadBytes = 64 << 10

func newRuntimeID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40 // UUID version 4
	b[8] = b[8]&0x3f | 0x80
	h := hex.EncodeToString(b[:])
	return h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}
