// This file tests New's checks of Config: the values refused and why, the
// bounds of every number, the header and identity fields, and the defaults
// that follow from the target.

package stats

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/spanstats/spanstats/internal/dgram"
	"github.com/spanstats/spanstats/stats/statstest"
	"github.com/spanstats/spanstats/writer"
)

// The package's tests run intervals and /info polls in milliseconds; the
// bound tests below put the real minimums back while they run (no test
// here runs in parallel).
func init() {
	minBucketInterval, minInfoRefresh = time.Millisecond, time.Millisecond
}

// realMinimums restores the exported minimums for the rest of the test.
func realMinimums(t *testing.T) {
	b, i := minBucketInterval, minInfoRefresh
	minBucketInterval, minInfoRefresh = MinBucketInterval, MinInfoRefresh
	t.Cleanup(func() { minBucketInterval, minInfoRefresh = b, i })
}

func TestNewRejectsBadConfig(t *testing.T) {
	for _, c := range []Config{
		{AgentURL: "ftp://x"},
		{AgentURL: "http://"},
		{AgentURL: "unix://"},
		{AgentURL: "http://localhost:99999"}, // a port no request can use
		{AgentURL: "udp://127.0.0.1:99999"},
		{InboxSize: -1},
		{ShedYieldEvery: -8},
		{MaxPayloadBytes: 100},
		{BucketInterval: -time.Second},
	} {
		if _, err := New(c); !errors.Is(err, ErrBadConfig) {
			t.Errorf("New(%+v) = %v, want ErrBadConfig", c, err)
		}
	}
}

// TestUDPURLWithoutHost: a UDP relay URL with a port but no host parsed,
// and the sender then wrote its first datagram on a socket it never
// dialed (a nil pointer: the process crashed). New refuses it.
func TestUDPURLWithoutHost(t *testing.T) {
	for _, raw := range []string{"udp://:8127", "udp://:8127/"} {
		_, err := New(Config{AgentURL: raw})
		if !errors.Is(err, ErrBadConfig) || !strings.Contains(err.Error(), "udp://host:port") {
			t.Errorf("New(%q) = %v, want ErrBadConfig asking for udp://host:port", raw, err)
		}
	}
}

// TestAgentURLWithSpaces: a URL pasted with spaces around it is refused
// with an error that says so, not url.Parse's "first path segment in URL
// cannot contain colon".
func TestAgentURLWithSpaces(t *testing.T) {
	for _, raw := range []string{" http://localhost:8126", "http://localhost:8126\n", "\tudp://relay:8127 "} {
		_, err := New(Config{AgentURL: raw})
		if !errors.Is(err, ErrBadConfig) || !strings.Contains(err.Error(), "spaces around it") {
			t.Errorf("New(%q) = %v, want ErrBadConfig saying it has spaces around it", raw, err)
		}
	}
}

// TestAgentURLWithoutScheme: a bare host:port or socket path, the likeliest
// mistake, is refused saying a scheme is missing and how to write one,
// not that "localhost" is an unsupported scheme; a URL with an unknown
// scheme is still refused naming it.
func TestAgentURLWithoutScheme(t *testing.T) {
	for _, raw := range []string{"localhost:8126", "127.0.0.1:8126", "/var/run/datadog/apm.socket", "[::1]:8126"} {
		_, err := New(Config{AgentURL: raw})
		if !errors.Is(err, ErrBadConfig) || !strings.Contains(err.Error(), "has no scheme: write http://host:port") {
			t.Errorf("New(%q) = %v, want ErrBadConfig saying the scheme is missing", raw, err)
		}
	}
	_, err := New(Config{AgentURL: "tcp://localhost:8126"})
	if !errors.Is(err, ErrBadConfig) || !strings.Contains(err.Error(), `scheme "tcp" is not supported`) {
		t.Errorf("New(tcp://) = %v, want ErrBadConfig naming the scheme", err)
	}
}

// TestSocketURLWithHost: a socket URL written with two slashes reads its
// first path segment as a host; New refuses it naming the three-slash
// form, rather than sending to a path that is not there. "localhost" is
// taken as the tracers take it.
func TestSocketURLWithHost(t *testing.T) {
	for _, raw := range []string{"unixgram://var/run/relay.sock", "unix://var/run/datadog/apm.socket"} {
		_, err := New(Config{AgentURL: raw})
		if !errors.Is(err, ErrBadConfig) || !strings.Contains(err.Error(), ":///var/run/") {
			t.Errorf("New(%q) = %v, want ErrBadConfig naming the three-slash form", raw, err)
		}
	}
	for raw, want := range map[string]string{
		"unixgram://localhost/run/relay.sock":         "/run/relay.sock",
		"unix://localhost/var/run/datadog/apm.socket": "/var/run/datadog/apm.socket",
	} {
		tg, err := parseAgentURL(raw)
		if err != nil || tg.address+tg.http.UnixSocket != want {
			t.Errorf("parseAgentURL(%q) = %+v, %v; want the socket %s", raw, tg, err, want)
		}
	}
}

// TestSocketPathTooLong: a Unix socket path longer than the kernel takes
// (unixgram:// to a relay, unix:// to the agent) is refused by New, saying
// so, rather than failing every send with "invalid argument"; the longest
// one it takes is accepted.
func TestSocketPathTooLong(t *testing.T) {
	long := "/tmp/" + strings.Repeat("s", dgram.MaxUnixPath)
	for _, scheme := range []string{"unixgram://", "unix://"} {
		_, err := New(Config{AgentURL: scheme + long})
		if !errors.Is(err, ErrBadConfig) || !strings.Contains(err.Error(), fmt.Sprintf("at most %d", dgram.MaxUnixPath)) {
			t.Errorf("%s, %d-byte path: New = %v, want ErrBadConfig giving the limit", scheme, len(long), err)
		}
		if _, err := parseAgentURL(scheme + long[:dgram.MaxUnixPath]); err != nil {
			t.Errorf("%s, %d-byte path: %v", scheme, dgram.MaxUnixPath, err)
		}
	}
}

// TestSocketPathDirectory: a socket path ending in "/" names a directory,
// which no socket can be: New refuses it, saying so, rather than every send
// failing as "no relay listening" or "connection refused".
func TestSocketPathDirectory(t *testing.T) {
	for _, u := range []string{"unixgram:///", "unixgram:///run/spanstats/", "unix:///", "unix:///var/run/datadog/"} {
		_, err := New(Config{AgentURL: u})
		if !errors.Is(err, ErrBadConfig) || !strings.Contains(err.Error(), "names a directory") {
			t.Errorf("%s: New = %v, want ErrBadConfig saying it names a directory", u, err)
		}
	}
}

// numberField is an integer field of Config (durations included), found by
// reflection, with its path ("InboxSize", "CardinalityLimits.Resource").
type numberField struct {
	path  string
	index []int
}

func numberFields(typ reflect.Type, prefix string, index []int) []numberField {
	var out []numberField
	for i := range typ.NumField() {
		f := typ.Field(i)
		if !f.IsExported() {
			continue
		}
		idx := append(slices.Clone(index), i)
		switch f.Type.Kind() {
		case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
			out = append(out, numberField{prefix + f.Name, idx})
		case reflect.Struct:
			out = append(out, numberFields(f.Type, prefix+f.Name+".", idx)...)
		}
	}
	return out
}

// TestConfigExtremeNumbers walks every integer and duration field of
// Config, nested ones included, so a new field is covered without editing
// the test: with math.MaxInt64, 1<<40, -1 and math.MinInt64, New either
// returns ErrBadConfig naming the field, or succeeds and the aggregator
// starts, counts a span and stops. Nothing may panic.
func TestConfigExtremeNumbers(t *testing.T) {
	realMinimums(t)
	fields := numberFields(reflect.TypeFor[Config](), "", nil)
	if len(fields) < 20 {
		t.Fatalf("found %d number fields; the walk lost some", len(fields))
	}
	ag := statstest.New()
	defer ag.Close()
	for _, f := range fields {
		for _, v := range []int64{math.MaxInt64, 1 << 40, -1, math.MinInt64} {
			t.Run(fmt.Sprintf("%s=%d", f.path, v), func(t *testing.T) {
				cfg := Config{AgentURL: ag.URL()}
				fv := reflect.ValueOf(&cfg).Elem().FieldByIndex(f.index)
				if fv.OverflowInt(v) {
					t.Skip("does not fit the field")
				}
				fv.SetInt(v)
				checkNewStartStop(t, cfg, f.path)
			})
		}
	}
}

// checkNewStartStop: New refuses cfg naming field, or the aggregator works.
func checkNewStartStop(t *testing.T, cfg Config, field string) {
	t.Helper()
	defer func() {
		if p := recover(); p != nil {
			t.Fatalf("panic: %v", p)
		}
	}()
	a, err := New(cfg)
	if err != nil {
		if !errors.Is(err, ErrBadConfig) || !strings.Contains(err.Error(), field+" ") {
			t.Fatalf("New: %v; want ErrBadConfig naming %s", err, field)
		}
		return
	}
	a.Start()
	a.Publish(&Span{Service: "s", Name: "n", Resource: "r", Duration: 5, TopLevel: true})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := a.Stop(ctx); err != nil {
		t.Fatalf("accepted, then Stop: %v", err)
	}
	if h := a.Health(); h.Counted != 1 || h.SpansSent != 1 {
		t.Fatalf("accepted, then counted %d and sent %d spans, want 1 and 1", h.Counted, h.SpansSent)
	}
}

// TestConfigBounds: each bound is inclusive and the value just beyond it is
// refused naming the field.
func TestConfigBounds(t *testing.T) {
	realMinimums(t)
	for _, c := range []struct {
		field         string // a path of Config's fields
		bound, beyond int64
	}{
		{"BucketInterval", int64(MinBucketInterval), int64(MinBucketInterval) - 1},
		{"BucketInterval", int64(MaxBucketInterval), int64(MaxBucketInterval) + 1},
		{"BucketInterval", int64(MinBucketInterval), 1},
		{"SendJitter", int64(DefaultBucketInterval / 2), int64(DefaultBucketInterval/2) + 1},
		{"HTTPTimeout", int64(MinHTTPTimeout), int64(MinHTTPTimeout) - 1},
		{"HTTPTimeout", int64(MinHTTPTimeout), 10}, // seconds meant, nanoseconds given
		{"HTTPTimeout", int64(MaxHTTPTimeout), int64(MaxHTTPTimeout) + 1},
		{"InfoRefresh", int64(MinInfoRefresh), int64(MinInfoRefresh) - 1},
		{"InfoRefresh", int64(MaxInfoRefresh), int64(MaxInfoRefresh) + 1},
		{"RetryBackoff", int64(MinRetryBackoff), int64(MinRetryBackoff) - 1},
		{"RetryBackoff", int64(MinRetryBackoff), 200}, // milliseconds meant
		{"RetryBackoff", int64(MaxMaxRetryBackoff), int64(MaxMaxRetryBackoff) + 1},
		{"MaxRetryBackoff", int64(MaxMaxRetryBackoff), int64(MaxMaxRetryBackoff) + 1},
		{"InboxSize", MaxInboxSize, MaxInboxSize + 1},
		{"ShedYieldEvery", MaxShedYieldEvery, MaxShedYieldEvery + 1},
		{"MaxAggregates", MaxMaxAggregates, MaxMaxAggregates + 1},
		{"MaxPayloadBytes", MaxMaxPayloadBytes, MaxMaxPayloadBytes + 1},
		{"MaxDatagramBytes", MaxMaxDatagramBytes, MaxMaxDatagramBytes + 1},
		{"SendQueue", MaxSendQueue, MaxSendQueue + 1},
		{"MaxRetries", MaxMaxRetries, MaxMaxRetries + 1},
		{"MaxRetryPayloads", MaxMaxRetryPayloads, MaxMaxRetryPayloads + 1},
		{"MaxRetryBytes", MaxMaxRetryBytes, MaxMaxRetryBytes + 1},
		{"CardinalityLimits.HTTPEndpoint", MaxCardinalityLimit, MaxCardinalityLimit + 1},
	} {
		for _, v := range []int64{c.bound, c.beyond} {
			cfg := Config{AgentURL: "http://127.0.0.1:1"}
			f := reflect.ValueOf(&cfg).Elem()
			for name := range strings.SplitSeq(c.field, ".") {
				f = f.FieldByName(name)
			}
			f.SetInt(v)
			_, err := New(cfg)
			switch {
			case v == c.bound && err != nil:
				t.Errorf("%s = %d: New = %v, want the bound accepted", c.field, v, err)
			case v == c.beyond && (!errors.Is(err, ErrBadConfig) || !strings.Contains(err.Error(), c.field+" ")):
				t.Errorf("%s = %d: New = %v, want ErrBadConfig naming %s", c.field, v, err, c.field)
			}
		}
	}
}

// TestUDPDatagramLimit: over UDP, whatever the scheme's case, datagrams
// default to UDP's largest and a larger limit is refused; a Unix relay
// keeps the 64 KiB default.
func TestUDPDatagramLimit(t *testing.T) {
	for _, url := range []string{"udp://127.0.0.1:8127", "UDP://127.0.0.1:8127", "Udp://[::1]:8127"} {
		c, err := Config{AgentURL: url}.withDefaults()
		if err != nil || c.MaxDatagramBytes != MaxUDPDatagramBytes {
			t.Errorf("%s: MaxDatagramBytes %d (%v), want %d", url, c.MaxDatagramBytes, err, MaxUDPDatagramBytes)
		}
		if _, err := (Config{AgentURL: url, MaxDatagramBytes: MaxUDPDatagramBytes + 1}).withDefaults(); !errors.Is(err, ErrBadConfig) {
			t.Errorf("%s: MaxDatagramBytes over UDP's: %v, want ErrBadConfig", url, err)
		}
	}
	if c, err := (Config{AgentURL: "unixgram:///run/relay.sock"}).withDefaults(); err != nil || c.MaxDatagramBytes != DefaultMaxDatagramBytes {
		t.Errorf("unixgram: MaxDatagramBytes %d (%v), want %d", c.MaxDatagramBytes, err, DefaultMaxDatagramBytes)
	}
}

// TestHeaderTooLarge: every payload repeats the header, so Tags that would
// fill a quarter of the payload or datagram limit are refused by New,
// naming the limit, and the largest header under it is accepted.
func TestHeaderTooLarge(t *testing.T) {
	tags := func(n int) []string {
		s := make([]string, n)
		for i := range s {
			s[i] = fmt.Sprintf("tag%05d:%030d", i, i)
		}
		return s
	}
	for _, tc := range []struct {
		url, limit string
		max        int
	}{
		{"unixgram:///run/relay.sock", "MaxDatagramBytes", DefaultMaxDatagramBytes / 4},
		{"udp://127.0.0.1:8127", "MaxDatagramBytes", MaxUDPDatagramBytes / 4},
		{"http://127.0.0.1:8126", "MaxPayloadBytes", 1 << 20 / 4},
	} {
		cfg := Config{AgentURL: tc.url, RuntimeID: "r", MaxPayloadBytes: 1 << 20}
		c, err := cfg.withDefaults()
		if err != nil {
			t.Fatal(err)
		}
		h := headerOf(&c)
		base := writer.HeaderSize(&h)
		h.Tags = tags(1)
		per := writer.HeaderSize(&h) - base
		n := (tc.max - base) / per // tags that fit
		cfg.Tags = tags(n)
		c, err = cfg.withDefaults()
		if err != nil {
			t.Fatalf("%s: %d tags: %v", tc.url, n, err)
		}
		if h := headerOf(&c); writer.HeaderSize(&h) > tc.max || writer.HeaderSize(&h) <= tc.max-per {
			t.Fatalf("%s: %d tags make a header of %d bytes, want in (%d, %d]", tc.url, n, writer.HeaderSize(&h), tc.max-per, tc.max)
		}
		cfg.Tags = tags(n + 1)
		_, err = cfg.withDefaults()
		if !errors.Is(err, ErrBadConfig) || !strings.Contains(err.Error(), tc.limit) {
			t.Fatalf("%s: %d tags: %v, want ErrBadConfig naming %s", tc.url, n+1, err, tc.limit)
		}
	}
	many := make([]string, writer.MaxStrings+1)
	for i := range many {
		many[i] = "a"
	}
	_, err := Config{Tags: many, MaxPayloadBytes: MaxMaxPayloadBytes}.withDefaults()
	if !errors.Is(err, ErrBadConfig) || !strings.Contains(err.Error(), "Tags") {
		t.Fatalf("%d tags: %v, want ErrBadConfig naming Tags", len(many), err)
	}
}

// TestShortTagsDecodable: Tags that would make a payload of few groups
// undecodable by the relay (too many array strings for its size) are
// refused by New; the same count of key:value tags is accepted, and the
// header-only payload (the final datagram) of an accepted Config decodes.
func TestShortTagsDecodable(t *testing.T) {
	for _, tc := range []struct {
		tag string
		ok  bool
	}{{"ab", false}, {"a", false}, {"a:b", true}, {"env:prod", true}} {
		tags := make([]string, 400)
		for i := range tags {
			tags[i] = tc.tag
		}
		c, err := Config{AgentURL: "unixgram:///run/relay.sock", Service: "s", Tags: tags}.withDefaults()
		if !tc.ok {
			if !errors.Is(err, ErrBadConfig) || !strings.Contains(err.Error(), "400 Tags") {
				t.Errorf("400 Tags %q: %v, want ErrBadConfig naming them", tc.tag, err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("400 Tags %q: %v", tc.tag, err)
		}
		h := headerOf(&c)
		b := writer.AppendPayload(nil, &h, nil)
		var d writer.Decoder
		if _, err := d.Decode(b, len(b)/writer.MinWireGroupBytes); err != nil {
			t.Errorf("400 Tags %q: the relay's decoder refuses the header-only payload: %v", tc.tag, err)
		}
	}
}

// TestLongTagsFromEnvironment: DD_TAGS is not copied into the payload,
// so a long one costs the datagrams nothing and is used (its service and
// env); one whose service would crowd groups out of every datagram is
// logged and ignored, as any unusable environment value; Tags that long
// set in the Config are refused.
func TestLongTagsFromEnvironment(t *testing.T) {
	var tags []string
	for i := range 600 {
		tags = append(tags, fmt.Sprintf("team_tag_%04d:%030d", i, i))
	}
	t.Setenv(EnvTags, strings.Join(append(tags, "service:from-tags", "env:from-tags"), ","))
	t.Setenv(EnvVersion, "1.2")
	var buf bytes.Buffer
	c, err := Config{AgentURL: "unixgram:///run/relay.sock", Logger: slog.New(slog.NewTextHandler(&buf, nil))}.withDefaults()
	if err != nil || c.Tags != nil || buf.Len() != 0 {
		t.Fatalf("a long DD_TAGS: %v, %d tags in the payload, logged %q; want none and nothing logged", err, len(c.Tags), buf.String())
	}
	if c.Service != "from-tags" || c.Env != "from-tags" || c.Version != "1.2" {
		t.Fatalf("DD_TAGS gave service %q env %q version %q; want from-tags, from-tags, DD_VERSION's", c.Service, c.Env, c.Version)
	}
	// Too long by its own service: ignored all the same; another
	// variable's warning is logged once.
	t.Setenv(EnvTags, "service:"+strings.Repeat("s", 20000))
	t.Setenv(EnvEnv, "a\x01b")
	buf.Reset()
	if c, err := (Config{AgentURL: "unixgram:///run/relay.sock", Logger: slog.New(slog.NewTextHandler(&buf, nil))}).withDefaults(); err != nil || c.Service != "" {
		t.Fatalf("a DD_TAGS long by its service: %v, service of %d bytes", err, len(c.Service))
	}
	if n := strings.Count(buf.String(), "name="+EnvEnv); n != 1 {
		t.Fatalf("DD_ENV's warning logged %d times, want 1: %q", n, buf.String())
	}
	// Not the cause (the Config's own ProcessTags are): the error, and no
	// word of DD_TAGS.
	t.Setenv(EnvTags, "team:a")
	buf.Reset()
	_, err = Config{AgentURL: "unixgram:///run/relay.sock", ProcessTags: strings.Repeat("p", 20000), Logger: slog.New(slog.NewTextHandler(&buf, nil))}.withDefaults()
	if !errors.Is(err, ErrBadConfig) || strings.Contains(buf.String(), "name="+EnvTags) {
		t.Fatalf("ProcessTags too long: %v, logged %q; want ErrBadConfig and DD_TAGS not blamed", err, buf.String())
	}
	if _, err := (Config{AgentURL: "unixgram:///run/relay.sock", Tags: tags, Logger: slog.New(slog.DiscardHandler)}).withDefaults(); !errors.Is(err, ErrBadConfig) {
		t.Fatalf("the same Tags in the Config: %v, want ErrBadConfig", err)
	}
}

// TestLongOtelResourceAttributes: OTEL_RESOURCE_ATTRIBUTES, standing in
// for DD_TAGS, is ignored and logged by its name when the env it gives does
// not fit a relay's datagrams, as a long DD_TAGS is; and when it is not the
// cause (ProcessTags too long), the error comes back. Both once hung New:
// the retry without DD_TAGS let OTEL_RESOURCE_ATTRIBUTES fill the tags again.
func TestLongOtelResourceAttributes(t *testing.T) {
	resolve := func(cfg Config, env map[string]string) (Config, error) {
		t.Helper()
		calls := 0
		return cfg.withDefaultsFrom(func(k string) string {
			if calls++; calls > 1000 { // one resolution and its retry take about a hundred
				t.Fatalf("withDefaultsFrom read the environment %d times: it does not end", calls)
			}
			return env[k]
		})
	}
	attrs := "team=core,deployment.environment=" + strings.Repeat("e", 20000)
	var buf bytes.Buffer
	c, err := resolve(Config{AgentURL: "unixgram:///run/relay.sock", Logger: slog.New(slog.NewTextHandler(&buf, nil))},
		map[string]string{EnvOtelResourceAttributes: attrs, EnvOtelService: "svc"})
	if err != nil || c.Env != "" || c.Service != "svc" || !strings.Contains(buf.String(), "name="+EnvOtelResourceAttributes) {
		t.Fatalf("a long OTEL_RESOURCE_ATTRIBUTES: %v, env of %d bytes, service %q, logged %q; want it ignored by name, OTEL_SERVICE_NAME kept",
			err, len(c.Env), c.Service, buf.String())
	}
	for _, env := range []map[string]string{{EnvOtelResourceAttributes: "team=core"}, {EnvTags: "team:core"}} {
		_, err = resolve(Config{AgentURL: "unixgram:///run/relay.sock", ProcessTags: strings.Repeat("p", 20000),
			Logger: slog.New(slog.DiscardHandler)}, env)
		if !errors.Is(err, ErrBadConfig) {
			t.Fatalf("ProcessTags too long, %v: %v, want ErrBadConfig", env, err)
		}
	}
}

// TestIdentityControlCharacters: every string field of Config but AgentURL
// is identity (payload, headers or metric names); found by reflection, each
// with a line break inside is refused naming the field, and so is a tag.
func TestIdentityControlCharacters(t *testing.T) {
	n := 0
	typ := reflect.TypeFor[Config]()
	for i := range typ.NumField() {
		f := typ.Field(i)
		if f.Type.Kind() != reflect.String || f.Name == "AgentURL" {
			continue
		}
		n++
		for _, bad := range []string{"a\nb", "a\x00b", "a\x7fb", "a\u0085b", "a\tb"} {
			cfg := Config{AgentURL: "http://127.0.0.1:1"}
			reflect.ValueOf(&cfg).Elem().FieldByIndex(f.Index).SetString(bad)
			_, err := New(cfg)
			if !errors.Is(err, ErrBadConfig) || !strings.Contains(err.Error(), f.Name+" ") {
				t.Errorf("%s = %q: New = %v, want ErrBadConfig naming %s", f.Name, bad, err, f.Name)
			}
		}
	}
	if n < 14 {
		t.Errorf("walked %d string fields, want at least the 14 identity fields", n)
	}
	_, err := New(Config{AgentURL: "http://127.0.0.1:1", Tags: []string{"a:b", "c:\r\nd"}})
	if !errors.Is(err, ErrBadConfig) || !strings.Contains(err.Error(), "Tags[1] ") {
		t.Errorf("a tag with CRLF inside: New = %v, want ErrBadConfig naming Tags[1]", err)
	}
}

// TestIdentityTrimmed: identity read from files and environments carries
// newlines; trimmed, it reaches the agent — in the headers it reads the
// origin from and in the payload — instead of failing every request.
func TestIdentityTrimmed(t *testing.T) {
	ag := statstest.New()
	defer ag.Close()
	tags := []string{" team:core\n"}
	a := newStarted(t, Config{AgentURL: ag.URL(), ContainerID: "abc\n", TracerVersion: "1.2.3\r\n",
		Env: " prod ", Service: "\tweb", Version: "v1\n", Hostname: "h1\n", RuntimeID: "rid\n",
		Lang: "go\n", LangVersion: " 1.26\n", EntityID: "ci-abc\n", GitCommitSha: "sha\n",
		ImageTag: "img\n", ProcessTags: "p:1\n", Tags: tags})
	a.Publish(&Span{Service: "s", Name: "n", Resource: "r", Duration: 5, TopLevel: true})
	stop(t, a)
	if h := a.Health(); h.SpansSent != 1 || h.PayloadsFailed != 0 {
		t.Fatalf("sent %d spans, %d failed attempts; want 1 and 0", h.SpansSent, h.PayloadsFailed)
	}
	if tags[0] != " team:core\n" {
		t.Errorf("New trimmed the caller's Tags slice: %q", tags)
	}
	reqs := statstest.Accepted(ag.Requests())
	if len(reqs) != 1 {
		t.Fatalf("%d accepted requests, want 1", len(reqs))
	}
	r := reqs[0]
	for name, want := range map[string]string{
		"Datadog-Container-ID": "abc", "Datadog-Entity-ID": "ci-abc", "Datadog-Meta-Tracer-Version": "1.2.3",
		"Datadog-Meta-Lang": "go", "Datadog-Meta-Lang-Version": "1.26",
	} {
		if got := r.Header.Get(name); got != want {
			t.Errorf("header %s = %q, want %q", name, got, want)
		}
	}
	p := r.Payload.Header
	if p.ContainerID != "abc" || p.TracerVersion != "1.2.3" || p.Env != "prod" || p.Service != "web" ||
		p.Version != "v1" || p.Hostname != "h1" || p.RuntimeID != "rid" || p.Lang != "go" ||
		p.GitCommitSha != "sha" || p.ImageTag != "img" || p.ProcessTags != "p:1" ||
		!slices.Equal(p.Tags, []string{"team:core"}) {
		t.Errorf("payload header %+v: want every identity field trimmed", p)
	}
	if r.Status != http.StatusOK {
		t.Errorf("status %d", r.Status)
	}
}

// TestEnvBounds: environment values go through the same bounds; one that
// cannot be used is logged and ignored, as every bad variable is.
func TestEnvBounds(t *testing.T) {
	env := map[string]string{
		EnvEnv: "pr\nod", EnvService: " web\n", EnvTags: "a:b,c:\x00d",
		EnvResourceLimit: fmt.Sprint(int64(1) << 40), EnvPeerTagsLimit: fmt.Sprint(MaxCardinalityLimit),
	}
	c, logs := envCase(Config{}, env, false)
	if c.Env != "" || c.Service != "web" || c.Tags != nil {
		t.Errorf("Env %q, Service %q, Tags %q: want the control characters ignored, the space trimmed", c.Env, c.Service, c.Tags)
	}
	// Over the bound is the bound, as dd-trace-go takes any positive
	// budget (it used to be ignored: the default, 64 times less).
	if c.CardinalityLimits.Resource != MaxCardinalityLimit || c.CardinalityLimits.PeerTag != MaxCardinalityLimit {
		t.Errorf("limits %+v: want resource at the bound (over it), peer tags at the bound", c.CardinalityLimits)
	}
	if len(logs) != 3 || !strings.Contains(logs[2], "over its maximum") || !strings.Contains(logs[2], EnvResourceLimit) {
		t.Errorf("logged %d lines, want 3 (env, tags, resource limit clamped): %q", len(logs), logs)
	}
	c, _ = envCase(Config{}, map[string]string{EnvResourceLimit: "99999999999999999999999", "DD_TRACE_STATS_SERVICE_CARDINALITY_LIMIT": "-99999999999999999999999"}, false)
	if c.CardinalityLimits.Resource != MaxCardinalityLimit || c.CardinalityLimits.Service != 0 {
		t.Errorf("limits %+v: want resource at the bound (past int64), service ignored (negative)", c.CardinalityLimits)
	}
}

// TestEntityIDThroughRelayWarns: an EntityID cannot travel in a datagram,
// so New says so toward a relay, and only there.
func TestEntityIDThroughRelayWarns(t *testing.T) {
	for url, want := range map[string]int{"udp://127.0.0.1:8127": 1, "unixgram:///run/r.sock": 1, "http://127.0.0.1:8126": 0} {
		var buf bytes.Buffer
		_, err := Config{AgentURL: url, EntityID: "in-42", Logger: slog.New(slog.NewTextHandler(&buf, nil))}.withDefaults()
		if err != nil {
			t.Fatal(err)
		}
		if got := strings.Count(buf.String(), "EntityID does not reach the agent through a relay"); got != want {
			t.Errorf("%s: %d warnings, want %d:\n%s", url, got, want, buf.String())
		}
	}
}

// TestDefaultSendJitterSpreads: at every interval the default SendJitter
// leaves a random spread past the bucket's close (BucketInterval/10, at
// most 1 s), so a host's processes do not all send in the same
// millisecond, and stays within min(BI/5, 2 s) of the boundary, as issue 12
// asks; DefaultSendJitter, which statsrelay's -grace follows, says the same.
func TestDefaultSendJitterSpreads(t *testing.T) {
	for _, tc := range []struct{ interval, want time.Duration }{
		{time.Second, 200 * time.Millisecond},
		{DefaultBucketInterval, 2 * time.Second},
		{5 * time.Second, time.Second},
		{20 * time.Second, 2 * time.Second},
		{time.Minute, 2 * time.Second},
		{time.Hour, 2 * time.Second},
	} {
		c, err := Config{AgentURL: "http://127.0.0.1:1", BucketInterval: tc.interval}.withDefaults()
		if err != nil {
			t.Fatal(err)
		}
		if c.SendJitter != tc.want || DefaultSendJitter(tc.interval) != tc.want {
			t.Errorf("interval %v: default SendJitter %v, DefaultSendJitter %v, want %v", tc.interval, c.SendJitter, DefaultSendJitter(tc.interval), tc.want)
		}
		a, err := New(Config{AgentURL: "udp://127.0.0.1:8127", BucketInterval: tc.interval})
		if err != nil {
			t.Fatal(err)
		}
		if latest, bound := closeGrace(tc.interval)+a.snd.jitter, min(tc.interval/5, 2*time.Second); latest > bound {
			t.Errorf("interval %v: a report may be sent %v past its boundary (the close, then the draw), over %v", tc.interval, latest, bound)
		}
		if spread := c.SendJitter - closeGrace(tc.interval); spread < min(tc.interval/10, time.Second) {
			t.Errorf("interval %v: no spread past the close (%v)", tc.interval, spread)
		}
	}
}

// TestRetryBackoffOverMax: a RetryBackoff above MaxRetryBackoff used to be
// cut to it without a word, so the first retry came sooner than asked.
// Left at zero, MaxRetryBackoff follows a longer RetryBackoff; set below
// it, New refuses the pair.
func TestRetryBackoffOverMax(t *testing.T) {
	c, err := Config{AgentURL: "http://127.0.0.1:1", RetryBackoff: 10 * time.Second}.withDefaults()
	if err != nil || c.RetryBackoff != 10*time.Second || c.MaxRetryBackoff != 10*time.Second {
		t.Fatalf("RetryBackoff 10s alone: RetryBackoff %s MaxRetryBackoff %s (%v), want 10s and 10s", c.RetryBackoff, c.MaxRetryBackoff, err)
	}
	c, err = Config{AgentURL: "http://127.0.0.1:1", RetryBackoff: time.Second}.withDefaults()
	if err != nil || c.MaxRetryBackoff != DefaultMaxRetryBackoff {
		t.Fatalf("RetryBackoff 1s: MaxRetryBackoff %s (%v), want the default %s", c.MaxRetryBackoff, err, DefaultMaxRetryBackoff)
	}
	_, err = New(Config{AgentURL: "http://127.0.0.1:1", RetryBackoff: 2 * time.Second, MaxRetryBackoff: time.Second})
	if !errors.Is(err, ErrBadConfig) || !strings.Contains(err.Error(), "RetryBackoff ") || !strings.Contains(err.Error(), "MaxRetryBackoff") {
		t.Fatalf("RetryBackoff 2s over MaxRetryBackoff 1s: New = %v, want ErrBadConfig naming both", err)
	}
}

// TestDefaultPayloadUnderAgentLimit: DESIGN §7, the agent answers 413 to a
// body over 25 MiB; the default payload limit keeps every body under it,
// so a default configuration never needs the agent's refusal to split.
func TestDefaultPayloadUnderAgentLimit(t *testing.T) {
	c, err := Config{AgentURL: "http://127.0.0.1:8126"}.withDefaultsFrom(func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	if c.MaxPayloadBytes <= 0 || c.MaxPayloadBytes > 25<<20 {
		t.Fatalf("default MaxPayloadBytes %d, want in (0, 25 MiB]", c.MaxPayloadBytes)
	}
}

// TestPeerTagKeysChecked: a PeerTagKeys entry that no span's tag can match
// (empty, as strings.Split("", ",") gives, white space around it, a ":")
// would replace the agent's list and keep no peer tag without a word: New
// refuses it, naming the entry. A well-formed list is taken.
func TestPeerTagKeysChecked(t *testing.T) {
	for _, keys := range [][]string{{""}, {" peer.service"}, {"peer.service", "db.instance\t"}, {"peer:service"}, {"peer.\x01service"}} {
		_, err := New(Config{AgentURL: "http://127.0.0.1:1", PeerTagKeys: keys})
		if !errors.Is(err, ErrBadConfig) || !strings.Contains(err.Error(), "PeerTagKeys[") {
			t.Errorf("PeerTagKeys %q: New = %v, want ErrBadConfig naming the entry", keys, err)
		}
	}
	a, err := New(Config{AgentURL: "http://127.0.0.1:1", PeerTagKeys: []string{"peer.service", "db.instance"}})
	if err != nil {
		t.Fatal(err)
	}
	_ = a.Stop(context.Background())
}

// TestLongIdentityVariableIgnored: any variable of the payload header (here
// DD_VERSION) too long for a relay's datagrams is logged and ignored, as
// DD_TAGS is, and only it: DD_ENV, short, stays. The same value in the
// Config is refused, the error naming the field.
func TestLongIdentityVariableIgnored(t *testing.T) {
	env := map[string]string{EnvRelayURL: "udp://127.0.0.1:8127", EnvVersion: strings.Repeat("v", 20<<10), EnvEnv: "prod", EnvService: "svc"}
	var buf bytes.Buffer
	c, err := Config{Logger: slog.New(slog.NewTextHandler(&buf, nil))}.withDefaultsFrom(func(k string) string { return env[k] })
	if err != nil || c.Version != "" || c.Env != "prod" || c.Service != "svc" {
		t.Fatalf("a 20 KiB DD_VERSION: %v, version of %d bytes, env %q, service %q; want it ignored, the others kept", err, len(c.Version), c.Env, c.Service)
	}
	if !strings.Contains(buf.String(), "name="+EnvVersion) || strings.Contains(buf.String(), "name="+EnvEnv) || strings.Contains(buf.String(), "name="+EnvService) {
		t.Fatalf("logged %q; want DD_VERSION named, and no other", buf.String())
	}
	_, err = Config{AgentURL: "udp://127.0.0.1:8127", Version: strings.Repeat("v", 20<<10), Logger: slog.New(slog.DiscardHandler)}.withDefaultsFrom(func(k string) string { return env[k] })
	if !errors.Is(err, ErrBadConfig) || !strings.Contains(err.Error(), "the longest: Version (20480 bytes)") {
		t.Fatalf("the same Version in the Config: %v; want ErrBadConfig naming Version", err)
	}
}

// TestLongVariableBlamedOnlyIfCause: a long DD_TAGS that the Config's own
// Tags override is not what makes the header too long, a long DD_VERSION
// is: only DD_VERSION is ignored and named, though DD_TAGS is the longer.
func TestLongVariableBlamedOnlyIfCause(t *testing.T) {
	env := map[string]string{EnvRelayURL: "udp://127.0.0.1:8127", EnvTags: "team:" + strings.Repeat("t", 30<<10),
		EnvVersion: strings.Repeat("v", 20<<10)}
	var buf bytes.Buffer
	c, err := Config{Tags: []string{"team:core"}, Logger: slog.New(slog.NewTextHandler(&buf, nil))}.withDefaultsFrom(func(k string) string { return env[k] })
	if err != nil || c.Version != "" || !slices.Equal(c.Tags, []string{"team:core"}) {
		t.Fatalf("%v, version of %d bytes, tags %q; want DD_VERSION ignored, the Config's tags kept", err, len(c.Version), c.Tags)
	}
	if !strings.Contains(buf.String(), "name="+EnvVersion) || strings.Contains(buf.String(), "name="+EnvTags) {
		t.Fatalf("logged %q; want DD_VERSION named, not DD_TAGS", buf.String())
	}
}
