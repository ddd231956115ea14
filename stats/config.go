package stats

import (
	"cmp"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"runtime"
	"strings"
	"time"

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
	// DefaultInboxSize bounds the spans waiting for the consumer: with the
	// yield on a full inbox a deeper one buys little (BenchmarkShedYield).
	DefaultInboxSize = 4096
	// DefaultShedYieldEvery: one yield now and then from each publishing
	// goroutine is all the scheduler needs to put the consumer back on a
	// processor; yielding on every call slows publishers for no more spans
	// counted (BenchmarkShedYield).
	DefaultShedYieldEvery = 8
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
	DefaultHTTPTimeout = 10 * time.Second
	// DefaultSendQueue is how many reports may wait for the sender; beyond
	// that a report is dropped and counted rather than blocking the consumer.
	DefaultSendQueue = 4
	// DefaultMaxRetries, with the backoff defaults, gives up on a payload
	// after about 3 s of failures (0.2+0.4+0.8+1.6 s, jittered).
	DefaultMaxRetries = 4
	// DefaultRetryBackoff is the first retry's delay.
	DefaultRetryBackoff = 200 * time.Millisecond
	// DefaultMaxRetryBackoff caps the doubling.
	DefaultMaxRetryBackoff = 5 * time.Second
	// DefaultMaxRetryPayloads bounds the payloads waiting for a retry.
	DefaultMaxRetryPayloads = 8
	// DefaultMaxRetryBytes bounds their bytes: enough for two maximal
	// payloads, so a retry storm costs bounded memory.
	DefaultMaxRetryBytes = 64 << 20
	// DefaultInfoRefresh is the /info poll period while stats are disabled.
	DefaultInfoRefresh = 30 * time.Second
)

// Config configures an Aggregator. The zero value of every field selects its
// documented default.
type Config struct {
	// AgentURL is where payloads go: the agent at "http://host:port" or
	// "unix:///path/to/apm.socket", or a relay (cmd/statsrelay) at
	// "unixgram:///path/to/relay.sock" or "udp://host:port". Default
	// DefaultAgentURL.
	AgentURL string

	// Payload-level identity, written into every ClientStatsPayload.
	Env, Service, Version, Hostname string
	// RuntimeID identifies this process; a random one is generated when empty.
	RuntimeID string
	// Lang is the tracer language (default "go"); LangVersion its version
	// (default the running Go version); TracerVersion the tracer's version.
	Lang, LangVersion, TracerVersion string
	// ContainerID and EntityID are sent as Datadog-Container-ID and
	// Datadog-Entity-ID headers when set (ContainerID also in the payload).
	ContainerID, EntityID string
	// Tags, GitCommitSha, ImageTag and ProcessTags are copied to the payload.
	Tags                                []string
	GitCommitSha, ImageTag, ProcessTags string

	// BucketInterval is the reporting interval (default 10 s). Buckets start
	// on multiples of it; a bucket is reported a tenth of the interval after
	// its end (see Span.Start).
	BucketInterval time.Duration
	// SendJitter is the most an interval's report waits past its boundary
	// before it is sent, drawn at random per report, so that a host's
	// processes do not all send in the same millisecond (buckets stay
	// aligned; only the send moves). Default min(BucketInterval/5, 2 s);
	// negative, or less than BucketInterval/10, sends when the bucket
	// closes, BucketInterval/10 after its boundary. Flush and Stop never
	// wait for it.
	SendJitter time.Duration
	// InboxSize is the capacity of the lock-free inbox (rounded up to a power
	// of two; default DefaultInboxSize). A full inbox drops and counts.
	InboxSize int
	// ShedYieldEvery sets how often a Publish that finds the inbox full
	// yields its processor (runtime.Gosched) before returning: about one
	// in ShedYieldEvery such calls (default DefaultShedYieldEvery; 1 yields
	// on every one). Under overload the yields are what give the consumer
	// CPU; each costs the caller a scheduling round. Only calls that find
	// the inbox full ever yield.
	ShedYieldEvery int
	// ShedWithoutYield makes every Publish that finds the inbox full return
	// at once, never yielding (ShedYieldEvery is then ignored).
	ShedWithoutYield bool

	// MaxAggregates caps the number of groups (default 2048); beyond it idle
	// groups are recycled, then spans fold into the overflow group. The cap
	// is per bucket: the previous bucket, open for its grace, has its own.
	MaxAggregates int
	// MaxPayloadBytes splits a report into several complete payloads so that
	// none exceeds it (default DefaultMaxPayloadBytes).
	MaxPayloadBytes int
	// MaxDatagramBytes bounds each datagram sent to a relay (AgentURL
	// unixgram:// or udp://), envelope included: a report is split into
	// complete payloads that fit (default DefaultMaxDatagramBytes, at most
	// MaxUDPDatagramBytes over UDP).
	MaxDatagramBytes int
	// HTTPTimeout bounds each request to the agent (default 10 s).
	HTTPTimeout time.Duration
	// SendQueue is the number of reports that may wait for the sender
	// (default 4). A report that finds it full is dropped and counted
	// (Health.PayloadsDropped, SpansUnsent; Flush returns
	// ErrSendQueueFull): the consumer never waits for the sender, but for
	// Stop's final report, which waits until Stop's context ends.
	SendQueue int

	// CardinalityLimits are the per-interval budgets of distinct values per
	// label field (zero fields: aggregate.DefaultLimits, or the
	// DD_TRACE_STATS_*_CARDINALITY_LIMIT environment variables; negative:
	// unlimited). Values over budget become tracer_blocked_value.
	CardinalityLimits aggregate.Limits
	// PeerTagKeys, when set, are the only peer-tag keys kept. When empty the
	// agent's /info peer_tags list is used once read; until then every key
	// is kept (each key under its own budget).
	PeerTagKeys []string

	// MaxRetries is how many times a payload is retried after a retryable
	// failure (408, 429, 5xx, network errors, timeouts). Default 4.
	MaxRetries int
	// RetryBackoff is the first retry's delay (default 200 ms), doubled per
	// attempt up to MaxRetryBackoff (default 5 s), with jitter.
	RetryBackoff, MaxRetryBackoff time.Duration
	// MaxRetryPayloads and MaxRetryBytes bound what waits for a retry
	// (defaults 8 payloads and 64 MiB); a failure beyond them is dropped
	// and counted in PayloadsDropped.
	MaxRetryPayloads, MaxRetryBytes int
	// InfoRefresh is how often /info is polled while the agent does not
	// accept stats (default 30 s).
	InfoRefresh time.Duration
	// Metrics, when set, receives the aggregator's own health as DogStatsD
	// counts (datadog.tracer.stats.*) after each report, from the sender
	// goroutine. MetricsNamespace is the namespace that client already
	// prepends (e.g. "datadog.tracer."), so the prefix is never doubled.
	Metrics          MetricsClient
	MetricsNamespace string
	// Logger receives warnings (default slog.Default()): configuration
	// fallbacks when New runs, then, from the sender goroutine and at most
	// once a minute per kind with the count since the previous line, failed
	// and dropped payloads, the agent refusing stats, and shed spans (see
	// log.go). It is never called on the Publish path.
	Logger *slog.Logger
}

// ErrBadConfig is wrapped by every configuration error New returns.
var ErrBadConfig = errors.New("stats: bad config")

// withDefaults returns c with the environment (see env.go) and then the
// defaults filled in, or an error for values that cannot work.
func (c Config) withDefaults() (Config, error) {
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	c = c.withEnv(os.Getenv, fileExists, c.Logger)
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
	if c.Hostname == "" {
		c.Hostname, _ = os.Hostname()
	}
	for _, d := range []struct {
		name string
		v    *int
		def  int
	}{
		{"InboxSize", &c.InboxSize, DefaultInboxSize},
		{"ShedYieldEvery", &c.ShedYieldEvery, DefaultShedYieldEvery},
		{"MaxAggregates", &c.MaxAggregates, DefaultMaxAggregates},
		{"MaxPayloadBytes", &c.MaxPayloadBytes, DefaultMaxPayloadBytes},
		{"SendQueue", &c.SendQueue, DefaultSendQueue},
		{"MaxRetries", &c.MaxRetries, DefaultMaxRetries},
		{"MaxRetryPayloads", &c.MaxRetryPayloads, DefaultMaxRetryPayloads},
		{"MaxRetryBytes", &c.MaxRetryBytes, DefaultMaxRetryBytes},
	} {
		if *d.v < 0 {
			return c, fmt.Errorf("%w: %s must be >= 0, got %d", ErrBadConfig, d.name, *d.v)
		}
		if *d.v == 0 {
			*d.v = d.def
		}
	}
	for _, d := range []struct {
		name string
		v    *time.Duration
		def  time.Duration
	}{
		{"BucketInterval", &c.BucketInterval, DefaultBucketInterval},
		{"HTTPTimeout", &c.HTTPTimeout, DefaultHTTPTimeout},
		{"RetryBackoff", &c.RetryBackoff, DefaultRetryBackoff},
		{"MaxRetryBackoff", &c.MaxRetryBackoff, DefaultMaxRetryBackoff},
		{"InfoRefresh", &c.InfoRefresh, DefaultInfoRefresh},
	} {
		if *d.v < 0 {
			return c, fmt.Errorf("%w: %s must be >= 0, got %s", ErrBadConfig, d.name, *d.v)
		}
		if *d.v == 0 {
			*d.v = d.def
		}
	}
	switch {
	case c.SendJitter == 0:
		c.SendJitter = min(c.BucketInterval/5, maxSendJitter)
	case c.SendJitter < 0:
		c.SendJitter = 0
	}
	if c.MaxDatagramBytes < 0 || c.MaxDatagramBytes > 0 && c.MaxDatagramBytes < minDatagramBytes {
		return c, fmt.Errorf("%w: MaxDatagramBytes must be >= %d, got %d", ErrBadConfig, minDatagramBytes, c.MaxDatagramBytes)
	}
	if c.MaxDatagramBytes == 0 {
		c.MaxDatagramBytes = DefaultMaxDatagramBytes
		if strings.HasPrefix(c.AgentURL, "udp:") {
			c.MaxDatagramBytes = MaxUDPDatagramBytes
		}
	}
	if strings.HasPrefix(c.AgentURL, "udp:") && c.MaxDatagramBytes > MaxUDPDatagramBytes {
		return c, fmt.Errorf("%w: MaxDatagramBytes %d is over UDP's %d", ErrBadConfig, c.MaxDatagramBytes, MaxUDPDatagramBytes)
	}
	if c.MaxPayloadBytes < minPayloadBytes {
		return c, fmt.Errorf("%w: MaxPayloadBytes must be >= %d, got %d", ErrBadConfig, minPayloadBytes, c.MaxPayloadBytes)
	}
	return c, nil
}

// maxSendJitter caps the default SendJitter: a bucket must still reach the
// agent well before it re-times buckets older than ~18 s.
const maxSendJitter = 2 * time.Second

// minDatagramBytes leaves room for the envelope, the header and one group
// with both sketches at their 2048-bin cap (8 bytes a bin) and its labels.
const minDatagramBytes = 40 << 10

// minPayloadBytes leaves room for the header and one large group.
const minPayloadBytes = 64 << 10

// target is where reports go: the agent over HTTP, or a relay's datagram
// socket (network "unixgram" or "udp").
type target struct {
	http             agentclient.Endpoint
	network, address string
}

func parseAgentURL(raw string) (target, error) {
	u, err := url.Parse(raw)
	if err == nil {
		switch u.Scheme {
		case "unixgram":
			p := cmp.Or(u.Path, u.Opaque)
			if p == "" {
				return target{}, fmt.Errorf("%w: AgentURL %q has no socket path", ErrBadConfig, raw)
			}
			return target{network: "unixgram", address: p}, nil
		case "udp":
			if u.Host == "" || u.Port() == "" {
				return target{}, fmt.Errorf("%w: AgentURL %q: want udp://host:port", ErrBadConfig, raw)
			}
			return target{network: "udp", address: u.Host}, nil
		}
	}
	ep, err := agentclient.ParseURL(raw)
	if err != nil {
		return target{}, fmt.Errorf("%w: AgentURL: %v (use http, https, unix, unixgram or udp)", ErrBadConfig, err)
	}
	return target{http: ep}, nil
}

// reserve is the room left before each payload for the datagram envelope.
func (t target) reserve() int {
	if t.network == "" {
		return 0
	}
	return writer.EnvelopeSize
}

// maxPayload is the largest payload body a report may be split into.
func (t target) maxPayload(cfg *Config) int {
	if t.network == "" {
		return cfg.MaxPayloadBytes
	}
	return cfg.MaxDatagramBytes - writer.EnvelopeSize
}

func newRuntimeID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40 // UUID version 4
	b[8] = b[8]&0x3f | 0x80
	h := hex.EncodeToString(b[:])
	return h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}
