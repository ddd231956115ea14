package stats

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"os"
	"runtime"
	"strings"
	"time"

	"github.com/spanstats/spanstats/aggregate"
)

// Defaults for the zero values of Config.
const (
	// DefaultAgentURL is the agent's default trace endpoint.
	DefaultAgentURL = "http://localhost:8126"
	// DefaultBucketInterval is the agent's stats bucket length.
	DefaultBucketInterval = 10 * time.Second
	// DefaultInboxSize bounds the spans waiting for the consumer. At ~320 bytes
	// a slot it costs 2.6 MiB and absorbs a 400 µs burst at 20 M spans/s.
	DefaultInboxSize = 8192
	// DefaultMaxAggregates is the table cap (dd-trace-java's default).
	DefaultMaxAggregates = aggregate.DefaultMaxEntries
	// DefaultMaxPayloadBytes keeps every body under the agent's 25 MiB
	// request limit, with room for the HTTP framing.
	DefaultMaxPayloadBytes = 25<<20 - 64<<10
	// DefaultHTTPTimeout bounds one POST, as dd-trace-go does.
	DefaultHTTPTimeout = 10 * time.Second
	// DefaultSendQueue is how many reports may wait for the sender; beyond
	// that a report is dropped and counted rather than blocking the consumer.
	DefaultSendQueue = 4
)

// Config configures an Aggregator. The zero value of every field selects its
// documented default.
type Config struct {
	// AgentURL is where payloads go: "http://host:port" or
	// "unix:///path/to/apm.socket". Default DefaultAgentURL.
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
	// on multiples of it.
	BucketInterval time.Duration
	// InboxSize is the capacity of the lock-free inbox (rounded up to a power
	// of two; default DefaultInboxSize). A full inbox drops and counts.
	InboxSize int
	// MaxAggregates caps the number of groups (default 2048); beyond it idle
	// groups are recycled, then spans fold into the overflow group.
	MaxAggregates int
	// MaxPayloadBytes splits a report into several complete payloads so that
	// none exceeds it (default DefaultMaxPayloadBytes).
	MaxPayloadBytes int
	// HTTPTimeout bounds each request to the agent (default 10 s).
	HTTPTimeout time.Duration
	// SendQueue is the number of reports that may wait for the sender
	// (default 4).
	SendQueue int
}

// ErrBadConfig is wrapped by every configuration error New returns.
var ErrBadConfig = errors.New("stats: bad config")

// withDefaults returns c with defaults filled in, or an error for values
// that cannot work.
func (c Config) withDefaults() (Config, error) {
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
		{"MaxAggregates", &c.MaxAggregates, DefaultMaxAggregates},
		{"MaxPayloadBytes", &c.MaxPayloadBytes, DefaultMaxPayloadBytes},
		{"SendQueue", &c.SendQueue, DefaultSendQueue},
	} {
		if *d.v < 0 {
			return c, fmt.Errorf("%w: %s must be >= 0, got %d", ErrBadConfig, d.name, *d.v)
		}
		if *d.v == 0 {
			*d.v = d.def
		}
	}
	if c.BucketInterval < 0 || c.HTTPTimeout < 0 {
		return c, fmt.Errorf("%w: BucketInterval and HTTPTimeout must be >= 0", ErrBadConfig)
	}
	if c.BucketInterval == 0 {
		c.BucketInterval = DefaultBucketInterval
	}
	if c.HTTPTimeout == 0 {
		c.HTTPTimeout = DefaultHTTPTimeout
	}
	if c.MaxPayloadBytes < minPayloadBytes {
		return c, fmt.Errorf("%w: MaxPayloadBytes must be >= %d, got %d", ErrBadConfig, minPayloadBytes, c.MaxPayloadBytes)
	}
	return c, nil
}

// minPayloadBytes leaves room for the header and one large group.
const minPayloadBytes = 64 << 10

// endpoint is a parsed AgentURL.
type endpoint struct {
	base       string // URL prefix for requests: "http://host:port" or "http://localhost" for unix
	unixSocket string // non-empty for unix://
}

func parseAgentURL(raw string) (endpoint, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return endpoint{}, fmt.Errorf("%w: AgentURL %q: %v", ErrBadConfig, raw, err)
	}
	switch u.Scheme {
	case "http", "https":
		if u.Host == "" {
			return endpoint{}, fmt.Errorf("%w: AgentURL %q has no host", ErrBadConfig, raw)
		}
		return endpoint{base: u.Scheme + "://" + u.Host + strings.TrimSuffix(u.Path, "/")}, nil
	case "unix":
		p := u.Path
		if p == "" {
			p = u.Opaque
		}
		if p == "" {
			return endpoint{}, fmt.Errorf("%w: AgentURL %q has no socket path", ErrBadConfig, raw)
		}
		return endpoint{base: "http://localhost", unixSocket: p}, nil
	default:
		return endpoint{}, fmt.Errorf("%w: AgentURL %q: scheme %q is not supported (use http, https or unix)", ErrBadConfig, raw, u.Scheme)
	}
}

func newRuntimeID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40 // UUID version 4
	b[8] = b[8]&0x3f | 0x80
	h := hex.EncodeToString(b[:])
	return h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}
