// This file tests how Config is filled from the environment: which variable
// fills which field, which wins, and what a bad value logs.

package stats

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/spanstats/spanstats/aggregate"
	"github.com/spanstats/spanstats/stats/statstest"
)

// envCase runs withEnv over env with a logger that keeps its lines.
func envCase(c Config, env map[string]string, socket bool) (Config, []string) {
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, nil))
	got := c.withEnv(func(k string) string { return env[k] }, func(string) bool { return socket }, log)
	var lines []string
	for l := range strings.Lines(buf.String()) {
		lines = append(lines, l)
	}
	return got, lines
}

// TestEnvFillsZeroFields: every variable fills its field when the config
// leaves it at zero, and nothing is logged.
func TestEnvFillsZeroFields(t *testing.T) {
	env := map[string]string{
		EnvAgentURL: "unix:///run/apm.sock", EnvEnv: "prod", EnvService: "web", EnvVersion: "1.2.3",
		EnvTags: "team:core, region:eu", EnvHostname: "h1", EnvGitCommit: "abc123",
		EnvResourceLimit: "100", "DD_TRACE_STATS_SERVICE_CARDINALITY_LIMIT": "7", EnvPeerTagsLimit: " 9 ",
		EnvAggregatesLimit: "888",
	}
	c, logs := envCase(Config{}, env, false)
	if len(logs) != 0 {
		t.Fatalf("logged %q for valid variables", logs)
	}
	// DD_TAGS is not copied into the payload (TestEnvTagsStayOutOfThePayload).
	want := Config{AgentURL: "unix:///run/apm.sock", Env: "prod", Service: "web", Version: "1.2.3",
		Hostname: "h1", GitCommitSha: "abc123"}
	if c.AgentURL != want.AgentURL || c.Env != want.Env || c.Service != want.Service || c.Version != want.Version ||
		c.Tags != nil || c.Hostname != want.Hostname || c.GitCommitSha != want.GitCommitSha {
		t.Fatalf("got %+v\nwant %+v", c, want)
	}
	if l := c.CardinalityLimits; l != (aggregate.Limits{Resource: 100, Service: 7, PeerTag: 9}) {
		t.Fatalf("limits %+v: want resource 100, service 7, peer tags 9, the rest left to the default", l)
	}
	if c.MaxAggregates != 888 {
		t.Fatalf("MaxAggregates %d from %s=888", c.MaxAggregates, EnvAggregatesLimit)
	}
}

// TestEnvBlankConfigField: a blank identity field of the config leaves it
// to the environment, as a blank variable leaves the default; it used to
// shut the variable out and then be trimmed to nothing.
func TestEnvBlankConfigField(t *testing.T) {
	c, err := Config{Env: " ", Service: "\t", Logger: slog.New(slog.DiscardHandler)}.withDefaultsFrom(func(k string) string {
		return map[string]string{EnvEnv: "prod", EnvTags: "service:web"}[k]
	})
	if err != nil || c.Env != "prod" || c.Service != "web" {
		t.Fatalf("blank Env and Service, DD_ENV=prod, DD_TAGS=service:web: env %q service %q (%v), want prod and web", c.Env, c.Service, err)
	}
}

// TestEnvConfigWins: a field the config sets is never replaced.
func TestEnvConfigWins(t *testing.T) {
	env := map[string]string{
		EnvAgentURL: "http://env:1", EnvEnv: "env", EnvService: "env", EnvVersion: "env", EnvTags: "a:b",
		EnvResourceLimit: "100", EnvAgentHost: "envhost", EnvAggregatesLimit: "888",
	}
	cfg := Config{AgentURL: "http://cfg:2", Env: "cfg", Service: "cfg", Version: "cfg", Tags: []string{},
		CardinalityLimits: aggregate.Limits{Resource: -1}, MaxAggregates: 100}
	c, _ := envCase(cfg, env, true)
	if c.AgentURL != "http://cfg:2" || c.Env != "cfg" || c.Service != "cfg" || c.Version != "cfg" ||
		len(c.Tags) != 0 || c.CardinalityLimits.Resource != -1 || c.MaxAggregates != 100 {
		t.Fatalf("the environment replaced configured fields: %+v", c)
	}
}

// TestEnvAgentURL: the relay variable wins over the agent's; the URL
// variable wins over host and port; host and port
// each default; the default socket is used only when nothing names the
// agent; "" leaves DefaultAgentURL to withDefaults.
func TestEnvAgentURL(t *testing.T) {
	for _, tc := range []struct {
		env    map[string]string
		socket bool
		want   string
	}{
		{map[string]string{EnvAgentURL: "http://a:1", EnvAgentHost: "b", EnvAgentPort: "2"}, true, "http://a:1"},
		{map[string]string{EnvRelayURL: "unixgram:///run/relay.sock", EnvAgentURL: "http://a:1"}, true, "unixgram:///run/relay.sock"},
		{map[string]string{EnvRelayURL: " udp://127.0.0.1:8127 ", EnvAgentHost: "b"}, false, "udp://127.0.0.1:8127"},
		{map[string]string{EnvAgentHost: "agent.local"}, false, "http://agent.local:8126"},
		{map[string]string{EnvAgentPort: "9126"}, false, "http://localhost:9126"},
		{map[string]string{EnvAgentHost: "::1", EnvAgentPort: "9"}, false, "http://[::1]:9"},
		{map[string]string{EnvAgentHost: "[::1]"}, false, "http://[::1]:8126"},
		{map[string]string{EnvAgentHost: "agent.local"}, true, "http://agent.local:8126"},
		{nil, true, "unix://" + DefaultAgentSocket},
		{nil, false, ""},
	} {
		if c, logs := envCase(Config{}, tc.env, tc.socket); c.AgentURL != tc.want || len(logs) != 0 {
			t.Errorf("env %v socket %v: AgentURL %q (logged %q), want %q", tc.env, tc.socket, c.AgentURL, logs, tc.want)
		}
	}
}

// TestEnvBadValues: each unusable value logs one warning naming the
// variable, and its field keeps the default.
func TestEnvBadValues(t *testing.T) {
	for _, tc := range []struct {
		name, value string
		check       func(Config) bool
	}{
		{EnvAgentURL, "ftp://agent", func(c Config) bool { return c.AgentURL == "" }},
		// A relay: SPANSTATS_RELAY_URL names one; a DogStatsD address
		// copied here must not get datagrams (dd-trace-go refuses it too).
		{EnvAgentURL, "udp://127.0.0.1:8125", func(c Config) bool { return c.AgentURL == "" }},
		{EnvAgentURL, "unixgram:///run/relay.sock", func(c Config) bool { return c.AgentURL == "" }},
		// Not a relay: an HTTP agent belongs in DD_TRACE_AGENT_URL.
		{EnvRelayURL, "http://agent:8126", func(c Config) bool { return c.AgentURL == "" }},
		{EnvRelayURL, "udp://no-port", func(c Config) bool { return c.AgentURL == "" }},
		{EnvRelayURL, "unixgram://", func(c Config) bool { return c.AgentURL == "" }},
		{EnvAgentPort, "http", func(c Config) bool { return c.AgentURL == "" }},
		{EnvAgentPort, "70000", func(c Config) bool { return c.AgentURL == "" }},
		{EnvAgentPort, "+8126", func(c Config) bool { return c.AgentURL == "" }}, // blamed on itself, not on the host
		{EnvResourceLimit, "lots", func(c Config) bool { return c.CardinalityLimits.Resource == 0 }},
		{EnvHTTPEndpointLimit, "-3", func(c Config) bool { return c.CardinalityLimits.HTTPEndpoint == 0 }},
		{"DD_TRACE_STATS_GRPC_STATUS_CODE_CARDINALITY_LIMIT", "0", func(c Config) bool { return c.CardinalityLimits.GRPCStatusCode == 0 }},
		{EnvAggregatesLimit, "2k", func(c Config) bool { return c.MaxAggregates == 0 }},
		// Over the maximum: the maximum, with a warning.
		{EnvAggregatesLimit, "100000", func(c Config) bool { return c.MaxAggregates == MaxMaxAggregates }},
	} {
		c, logs := envCase(Config{}, map[string]string{tc.name: tc.value}, false)
		if !tc.check(c) {
			t.Errorf("%s=%q: field changed: %+v", tc.name, tc.value, c)
		}
		if len(logs) != 1 || !strings.Contains(logs[0], "level=WARN") || !strings.Contains(logs[0], tc.name) {
			t.Errorf("%s=%q: logged %q, want one warning naming the variable", tc.name, tc.value, logs)
		}
	}
}

// TestEnvAgentURLWarningSaysWhy: an agent or relay URL from the
// environment that New would refuse is ignored with New's reason, not
// only the shape wanted: "http://agent:81260" looks like http://host:port.
func TestEnvAgentURLWarningSaysWhy(t *testing.T) {
	for _, tc := range []struct{ name, value, why string }{
		{EnvAgentURL, "http://agent:81260", `81260\" is not in [1, 65535]`}, // quotes escaped by the text handler
		{EnvAgentURL, "unix://var/run/datadog/apm.socket", "write unix:///var/run/datadog/apm.socket (three slashes)"},
		{EnvRelayURL, "udp://relay:0", `0\" is not in [1, 65535]`},
	} {
		c, logs := envCase(Config{}, map[string]string{tc.name: tc.value}, false)
		if c.AgentURL != "" || len(logs) != 1 || !strings.Contains(logs[0], tc.name) || !strings.Contains(logs[0], tc.why) {
			t.Errorf("%s=%q: AgentURL %q, logged %q; want one warning saying %s", tc.name, tc.value, c.AgentURL, logs, tc.why)
		}
	}
}

// TestEnvCardinalityLimitNames: one variable per field, in the Datadog
// tracers' shape, and the three they already read keep their names.
func TestEnvCardinalityLimitNames(t *testing.T) {
	seen := map[string]bool{}
	for f := range aggregate.NumFields {
		n := EnvCardinalityLimit(f)
		if seen[n] || !strings.HasPrefix(n, "DD_TRACE_STATS_") || !strings.HasSuffix(n, "_CARDINALITY_LIMIT") {
			t.Errorf("field %v: variable %q", f, n)
		}
		seen[n] = true
	}
	for _, n := range []string{EnvResourceLimit, EnvHTTPEndpointLimit, EnvPeerTagsLimit} {
		if !seen[n] {
			t.Errorf("%s is not read", n)
		}
	}
}

// TestNewReadsEnvironment: New applies the environment (here DD_ENV and
// DD_TRACE_AGENT_URL) before its defaults.
func TestNewReadsEnvironment(t *testing.T) {
	t.Setenv(EnvEnv, "staging")
	t.Setenv(EnvAgentURL, "http://127.0.0.1:1")
	c, err := Config{Logger: slog.New(slog.DiscardHandler)}.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	if c.Env != "staging" || c.AgentURL != "http://127.0.0.1:1" {
		t.Fatalf("Env %q AgentURL %q, want the environment's", c.Env, c.AgentURL)
	}
}

// TestEnvIdentityFromTags: as dd-trace-go, DD_TAGS' env, service and
// version tags fill Env, Service and Version when neither the config nor
// their own variable does; DD_TRACE_REPORT_HOSTNAME=true sends the host
// name, and without it (or DD_TRACE_SOURCE_HOSTNAME) there is none.
func TestEnvIdentityFromTags(t *testing.T) {
	c, logs := envCase(Config{}, map[string]string{EnvTags: "env:staging,service:web,team:core,version:9"}, false)
	if c.Env != "staging" || c.Service != "web" || c.Version != "9" || c.Hostname != "" || len(logs) != 0 {
		t.Fatalf("from DD_TAGS: env %q service %q version %q hostname %q (logs %q); want staging web 9, no hostname", c.Env, c.Service, c.Version, c.Hostname, logs)
	}
	c, _ = envCase(Config{Service: "cfg"}, map[string]string{EnvTags: "env:staging,service:web", EnvEnv: "prod"}, false)
	if c.Env != "prod" || c.Service != "cfg" {
		t.Fatalf("DD_TAGS replaced DD_ENV or the config: env %q service %q", c.Env, c.Service)
	}
	// A blank DD_ENV, or one refused, is not set: DD_TAGS' env stands in.
	c, _ = envCase(Config{}, map[string]string{EnvTags: "env:staging,service:web", EnvEnv: "  ", EnvService: "a\nb"}, false)
	if c.Env != "staging" || c.Service != "web" {
		t.Fatalf("a blank DD_ENV and a refused DD_SERVICE: env %q service %q, want DD_TAGS' staging web", c.Env, c.Service)
	}
	// As dd-trace-go: key and value trimmed, an entry without a key skipped.
	c, logs = envCase(Config{}, map[string]string{EnvTags: "env : staging, service :web ,: x, team :  core"}, false)
	if c.Env != "staging" || c.Service != "web" || c.Tags != nil || len(logs) != 0 {
		t.Fatalf("DD_TAGS with spaces around keys: env %q service %q tags %q (logs %q); want staging web, no payload tags", c.Env, c.Service, c.Tags, logs)
	}
	host, _ := os.Hostname()
	c, _ = envCase(Config{}, map[string]string{EnvReportHostname: "true"}, false)
	if c.Hostname != strings.TrimSpace(host) || c.Hostname == "" {
		t.Fatalf("DD_TRACE_REPORT_HOSTNAME=true: hostname %q, want %q", c.Hostname, host)
	}
	c, _ = envCase(Config{}, map[string]string{EnvReportHostname: "true", EnvHostname: "h1"}, false)
	if c.Hostname != "h1" {
		t.Fatalf("DD_TRACE_SOURCE_HOSTNAME lost to DD_TRACE_REPORT_HOSTNAME: %q", c.Hostname)
	}
	if _, logs = envCase(Config{}, map[string]string{EnvReportHostname: "maybe"}, false); len(logs) != 1 {
		t.Fatalf("DD_TRACE_REPORT_HOSTNAME=maybe logged %q, want one warning", logs)
	}
}

// TestEnvWarningHidesPasswords: a URL variable ignored for its scheme is
// logged without the password it carries.
func TestEnvWarningHidesPasswords(t *testing.T) {
	c, logs := envCase(Config{}, map[string]string{EnvAgentURL: "ftp://user:s3cret@agent:21"}, false)
	if len(logs) != 1 || strings.Contains(logs[0], "s3cret") || !strings.Contains(logs[0], "user") {
		t.Fatalf("logged %q; want one warning naming the URL without its password", logs)
	}
	if c.AgentURL != "" {
		t.Fatalf("AgentURL %q from an ftp:// URL", c.AgentURL)
	}
	// A URL that does not parse may carry one too.
	for _, bad := range []string{"http://user:s3cret@bad host:8126", "http://user:s3cret@[::1:8126"} {
		_, logs := envCase(Config{}, map[string]string{EnvAgentURL: bad}, false)
		if len(logs) != 1 || strings.Contains(logs[0], "s3cret") || !strings.Contains(logs[0], "xxxxx@") {
			t.Errorf("%s: logged %q; want one warning with the password hidden", bad, logs)
		}
	}
}

// TestNewErrorHidesPasswords: New's error about a bad AgentURL quotes it
// without its password, parsed or not.
func TestNewErrorHidesPasswords(t *testing.T) {
	for _, raw := range []string{"http://user:s3cret@bad host:8126", "udp://user:s3cret@relay", "unixgram://user:s3cret@relay/x.sock",
		"http://user:s3cret@agent:99999"} {
		_, err := New(Config{AgentURL: raw})
		if !errors.Is(err, ErrBadConfig) || strings.Contains(err.Error(), "s3cret") {
			t.Errorf("New(AgentURL %s) = %v; want ErrBadConfig without the password", raw, err)
		}
	}
}

// TestEnvBadHostKeepsPort: a DD_AGENT_HOST that cannot be used is ignored
// alone, as a bad DD_TRACE_AGENT_PORT is: the host falls back to
// localhost and a valid port is still used, rather than lost without a
// word (and the default socket taken instead).
func TestEnvBadHostKeepsPort(t *testing.T) {
	for _, socket := range []bool{false, true} {
		c, logs := envCase(Config{}, map[string]string{EnvAgentHost: "agent:8126", EnvAgentPort: "9000"}, socket)
		if c.AgentURL != "http://localhost:9000" {
			t.Errorf("socket %v: AgentURL %q, want http://localhost:9000 (DD_TRACE_AGENT_PORT kept)", socket, c.AgentURL)
		}
		if len(logs) != 1 || !strings.Contains(logs[0], EnvAgentHost) || strings.Contains(logs[0], EnvAgentPort) {
			t.Errorf("socket %v: logged %q, want one warning naming DD_AGENT_HOST only", socket, logs)
		}
	}
}

// TestEnvGitCommitFromTags: as dd-trace-go's git metadata, DD_TAGS'
// git.commit.sha stands in for DD_GIT_COMMIT_SHA, which wins over it.
func TestEnvGitCommitFromTags(t *testing.T) {
	c, logs := envCase(Config{}, map[string]string{EnvTags: "git.commit.sha:abc123,team:core"}, false)
	if c.GitCommitSha != "abc123" || len(logs) != 0 {
		t.Fatalf("from DD_TAGS: GitCommitSha %q (logs %q), want abc123", c.GitCommitSha, logs)
	}
	c, _ = envCase(Config{}, map[string]string{EnvTags: "git.commit.sha:abc123", EnvGitCommit: "def456"}, false)
	if c.GitCommitSha != "def456" {
		t.Fatalf("DD_TAGS replaced DD_GIT_COMMIT_SHA: %q, want def456", c.GitCommitSha)
	}
	c, _ = envCase(Config{GitCommitSha: "cfg"}, map[string]string{EnvTags: "git.commit.sha:abc123"}, false)
	if c.GitCommitSha != "cfg" {
		t.Fatalf("DD_TAGS replaced the config's GitCommitSha: %q", c.GitCommitSha)
	}
}

// TestEnvGitMetadataDisabled: as dd-trace-go, DD_TRACE_GIT_METADATA_ENABLED
// false keeps DD_GIT_COMMIT_SHA and DD_TAGS' git.commit.sha out of the
// payload; the config's own GitCommitSha is still sent, and a value that is
// not a boolean is ignored with a warning (git metadata stays on).
func TestEnvGitMetadataDisabled(t *testing.T) {
	off := map[string]string{EnvGitMetadataEnabled: "false", EnvGitCommit: "abc123", EnvTags: "git.commit.sha:def456,env:prod"}
	c, logs := envCase(Config{}, off, false)
	if c.GitCommitSha != "" || c.Env != "prod" || len(logs) != 0 {
		t.Fatalf("disabled: GitCommitSha %q env %q (logs %q), want none sent, env prod", c.GitCommitSha, c.Env, logs)
	}
	c, _ = envCase(Config{GitCommitSha: "cfg"}, off, false)
	if c.GitCommitSha != "cfg" {
		t.Fatalf("disabled: the config's GitCommitSha became %q", c.GitCommitSha)
	}
	c, logs = envCase(Config{}, map[string]string{EnvGitMetadataEnabled: "nope", EnvGitCommit: "abc123"}, false)
	if c.GitCommitSha != "abc123" || len(logs) != 1 || !strings.Contains(logs[0], EnvGitMetadataEnabled) {
		t.Fatalf("bad flag: GitCommitSha %q (logs %q), want abc123 and one warning naming the variable", c.GitCommitSha, logs)
	}
}

// TestEnvGitCommitNotFromOtelAttributes: dd-trace-go reads git.commit.sha
// from DD_TAGS only; OTEL_RESOURCE_ATTRIBUTES, standing in for DD_TAGS,
// gives env, service and version but not the commit.
func TestEnvGitCommitNotFromOtelAttributes(t *testing.T) {
	c, _ := envCase(Config{}, map[string]string{EnvOtelResourceAttributes: "git.commit.sha=abc123,service.name=web"}, false)
	if c.GitCommitSha != "" || c.Service != "web" {
		t.Fatalf("OTEL_RESOURCE_ATTRIBUTES: GitCommitSha %q service %q, want none and web", c.GitCommitSha, c.Service)
	}
}

// TestEnvOpenTelemetryFallbacks: as dd-trace-go, OTEL_SERVICE_NAME stands in
// for an unset DD_SERVICE and OTEL_RESOURCE_ATTRIBUTES for an unset DD_TAGS
// (key=value pairs; deployment.environment, service.name and
// service.version become env, service and version, first; ten kept);
// where both are set the DD_ variable wins, with a warning.
func TestEnvOpenTelemetryFallbacks(t *testing.T) {
	c, logs := envCase(Config{}, map[string]string{
		EnvOtelService:            "otel-web",
		EnvOtelResourceAttributes: "team=core, deployment.environment=staging,service.version = 2.0,host.arch=amd64,service.name=from-attrs",
	}, false)
	if c.Service != "otel-web" || c.Env != "staging" || c.Version != "2.0" || c.Tags != nil || len(logs) != 0 {
		t.Fatalf("from OTEL_*: service %q env %q version %q tags %q (logs %q); want otel-web staging 2.0, no payload tags",
			c.Service, c.Env, c.Version, c.Tags, logs)
	}
	// service.name stands in for both service variables.
	c, _ = envCase(Config{}, map[string]string{EnvOtelResourceAttributes: "service.name=attrs"}, false)
	if c.Service != "attrs" {
		t.Fatalf("service.name alone: service %q, want attrs", c.Service)
	}
	// Space separated, as DD_TAGS when it has no comma; a pair without a key
	// is skipped, one without a value kept empty.
	c, _ = envCase(Config{}, map[string]string{EnvOtelResourceAttributes: "deployment.environment=e1 =x service.version service.name=s1"}, false)
	if c.Env != "e1" || c.Service != "s1" || c.Version != "" {
		t.Fatalf("space separated: env %q service %q version %q, want e1 s1 and none", c.Env, c.Service, c.Version)
	}
	// The DD_ variables win, each with a warning naming both.
	c, logs = envCase(Config{}, map[string]string{
		EnvService: "dd-web", EnvOtelService: "otel-web",
		EnvTags: "env:dd", EnvOtelResourceAttributes: "deployment.environment=otel",
	}, false)
	if c.Service != "dd-web" || c.Env != "dd" || len(logs) != 2 ||
		!strings.Contains(logs[0]+logs[1], EnvOtelService) || !strings.Contains(logs[0]+logs[1], EnvOtelResourceAttributes) {
		t.Fatalf("both set: service %q env %q logs %q; want dd-web, dd and a warning for each OTEL_ variable", c.Service, c.Env, logs)
	}
	// The config wins silently, whether the DD_ variables are set or not
	// (it used to be logged that DD_SERVICE and DD_TAGS won).
	for _, env := range []map[string]string{
		{EnvOtelService: "otel-web", EnvOtelResourceAttributes: "team=otel"},
		{EnvOtelService: "otel-web", EnvOtelResourceAttributes: "team=otel", EnvService: "dd-web", EnvTags: "team:dd"},
	} {
		c, logs = envCase(Config{Service: "cfg", Tags: []string{}}, env, false)
		if c.Service != "cfg" || len(c.Tags) != 0 || len(logs) != 0 {
			t.Fatalf("config set, environment %v: service %q tags %q logs %q", env, c.Service, c.Tags, logs)
		}
	}
	// No cap on the attributes (they are not sent): the mapped ones are
	// read wherever they stand.
	var attrs []string
	for i := range 12 {
		attrs = append(attrs, "k"+string(rune('a'+i))+"=v")
	}
	attrs = append(attrs, "deployment.environment=prod")
	c, logs = envCase(Config{}, map[string]string{EnvOtelResourceAttributes: strings.Join(attrs, ",")}, false)
	if c.Tags != nil || c.Env != "prod" || len(logs) != 0 {
		t.Fatalf("13 attributes: tags %q env %q logs %q; want env prod, nothing sent or logged", c.Tags, c.Env, logs)
	}
	// A control character refuses the variable, as in DD_TAGS.
	c, logs = envCase(Config{}, map[string]string{EnvOtelResourceAttributes: "a=b\nc", EnvOtelService: "x\ty"}, false)
	if c.Tags != nil || c.Service != "" || len(logs) != 2 {
		t.Fatalf("control characters: tags %q service %q logs %q; want both ignored with a warning", c.Tags, c.Service, logs)
	}
	// A DD_ variable ignored for one is not used: the OTEL_ one stands in,
	// and no warning says the DD_ one won.
	c, logs = envCase(Config{}, map[string]string{
		EnvService: "dd\x01web", EnvOtelService: "otel-web",
		EnvTags: "env:d\x01d", EnvOtelResourceAttributes: "deployment.environment=otel",
	}, false)
	if c.Service != "otel-web" || c.Env != "otel" || len(logs) != 2 ||
		!strings.Contains(logs[0]+logs[1], "control character") || strings.Contains(logs[0]+logs[1], "are set") {
		t.Fatalf("DD_ ignored: service %q env %q logs %q; want otel-web, otel, a warning for each ignored DD_ variable alone", c.Service, c.Env, logs)
	}
}

// TestEnvTagsStayOutOfThePayload: DD_TAGS gives Env its fallback but is not
// sent as the payload's Tags: the agent (v0.85.4, writer/stats.go
// resolveContainerTags) takes a payload's non-nil Tags as its container's
// tags and then looks none up, and dd-trace-go sends none. Tags set in the
// Config are sent.
func TestEnvTagsStayOutOfThePayload(t *testing.T) {
	t.Setenv(EnvTags, "env:staging,team:core")
	for _, tc := range []struct {
		tags []string
		env  string
	}{{nil, "staging"}, {[]string{"kube_cluster_name:c1"}, ""}} {
		ag := statstest.New()
		a := newStarted(t, Config{AgentURL: ag.URL(), SendJitter: -1, Tags: tc.tags})
		s := raceSpan(0)
		if !a.Publish(&s) {
			t.Fatal("refused")
		}
		if err := a.Stop(context.Background()); err != nil {
			t.Fatal(err)
		}
		ag.Close()
		reqs := ag.Requests()
		if len(reqs) == 0 || reqs[0].Payload == nil {
			t.Fatalf("Tags %q: no payload decoded (%d requests)", tc.tags, len(reqs))
		}
		if p := reqs[0].Payload; p.Env != tc.env || !slices.Equal(p.Tags, tc.tags) {
			t.Fatalf("Tags %q: payload env %q tags %q, want %q and %q", tc.tags, p.Env, p.Tags, tc.env, tc.tags)
		}
	}
}

// TestEnvBadPartsLoggedAlone: a credential pasted into DD_TRACE_AGENT_PORT
// stays out of the log as in the other agent variables; a DD_TAGS tag with
// a control character is dropped alone, the others still giving env,
// service and version; a bad DD_TRACE_REPORT_HOSTNAME is logged even where
// DD_TRACE_SOURCE_HOSTNAME makes it moot.
func TestEnvBadPartsLoggedAlone(t *testing.T) {
	_, logs := envCase(Config{}, map[string]string{EnvAgentPort: "http://user:s3cret@agent:8126"}, false)
	if len(logs) != 1 || strings.Contains(logs[0], "s3cret") || !strings.Contains(logs[0], EnvAgentPort) {
		t.Errorf("URL in the port variable: logs %q; want one warning without the password", logs)
	}
	c, logs := envCase(Config{}, map[string]string{EnvTags: "env:prod,service:web,note:a\x01b,version:2\x02"}, false)
	if c.Env != "prod" || c.Service != "web" || c.Version != "" || len(logs) != 2 ||
		!strings.Contains(logs[0], "note:a") || !strings.Contains(logs[1], "version:2") {
		t.Errorf("two bad tags: env %q service %q version %q logs %q; want prod, web, none, a warning for each bad tag", c.Env, c.Service, c.Version, logs)
	}
	c, logs = envCase(Config{}, map[string]string{EnvOtelResourceAttributes: "deployment.environment=e,k=a\x01b"}, false)
	if c.Env != "e" || len(logs) != 1 || !strings.Contains(logs[0], EnvOtelResourceAttributes) {
		t.Errorf("bad attribute: env %q logs %q; want e and one warning", c.Env, logs)
	}
	// Set but holding no tag, DD_TAGS still wins over the OTel variable,
	// with the warning that both are set.
	for _, raw := range []string{",", ":x", " , "} {
		c, logs = envCase(Config{}, map[string]string{EnvTags: raw, EnvOtelResourceAttributes: "deployment.environment=otel"}, false)
		if c.Env != "" || len(logs) != 1 || !strings.Contains(logs[0], "are set") {
			t.Errorf("DD_TAGS %q beside the OTel variable: env %q logs %q; want none and the both-set warning", raw, c.Env, logs)
		}
	}
	c, logs = envCase(Config{}, map[string]string{EnvHostname: "h1", EnvReportHostname: "yes"}, false)
	if c.Hostname != "h1" || len(logs) != 1 || !strings.Contains(logs[0], EnvReportHostname) {
		t.Errorf("bad report flag beside a source host name: hostname %q logs %q; want h1 and one warning", c.Hostname, logs)
	}
}

// TestEnvOtelDuplicateUnifiedTag: otelTags puts each unified tag in
// front, as dd-trace-go's mapping does, so of a key given twice in
// OTEL_RESOURCE_ATTRIBUTES the first one is read (the tag loop's last wins).
func TestEnvOtelDuplicateUnifiedTag(t *testing.T) {
	c, _ := envCase(Config{}, map[string]string{EnvOtelResourceAttributes: "service.name=first,deployment.environment=e1,service.name=second,deployment.environment=e2"}, false)
	if c.Service != "first" || c.Env != "e1" {
		t.Fatalf("service %q env %q; want first and e1 (the unified tags prepended, as dd-trace-go)", c.Service, c.Env)
	}
}

// TestRelayURLFromEnvNamedInErrors: a relay URL from the environment that
// parses but brings datagram limits the Config breaks fails New with an
// error naming the variable, which the Config does not show; the same
// Config with the URL set in it is not blamed on the variable.
func TestRelayURLFromEnvNamedInErrors(t *testing.T) {
	quiet := slog.New(slog.DiscardHandler)
	for _, tc := range []struct {
		name string
		c    Config
		url  string
		want string
	}{
		{"udp limit", Config{MaxDatagramBytes: 100 << 10}, "udp://127.0.0.1:8127", "over UDP's 65507 (AgentURL from " + EnvRelayURL + ")"},
		{"header", Config{Tags: []string{"k:" + strings.Repeat("v", 20<<10)}}, "unixgram:///run/relay.sock", "MaxDatagramBytes (65536) (AgentURL from " + EnvRelayURL + ")"},
	} {
		tc.c.Logger = quiet
		_, err := tc.c.withDefaultsFrom(func(k string) string {
			if k == EnvRelayURL {
				return tc.url
			}
			return ""
		})
		if !errors.Is(err, ErrBadConfig) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %s=%s: err %v, want one saying %q", tc.name, EnvRelayURL, tc.url, err, tc.want)
		}
		given := tc.c
		given.AgentURL = tc.url
		if _, err := given.withDefaultsFrom(func(string) string { return "" }); err == nil || strings.Contains(err.Error(), EnvRelayURL) {
			t.Errorf("%s: AgentURL %s in the Config: err %v, want one not naming %s", tc.name, tc.url, err, EnvRelayURL)
		}
	}
}

// TestEnvBlankParsedVariablesAreUnset: a variable set to white space is
// unset, as the identity and URL variables are, for the parsed ones too:
// no warning, the default stands.
func TestEnvBlankParsedVariablesAreUnset(t *testing.T) {
	env := map[string]string{EnvGitMetadataEnabled: " ", EnvReportHostname: "\t", EnvResourceLimit: "  ", EnvAggregatesLimit: " "}
	c, logs := envCase(Config{}, env, false)
	if len(logs) != 0 || c.Hostname != "" || c.CardinalityLimits != (Config{}).CardinalityLimits || c.MaxAggregates != 0 {
		t.Errorf("blank variables: logged %q, Hostname %q, limits %+v, MaxAggregates %d; want no warning and no field set", logs, c.Hostname, c.CardinalityLimits, c.MaxAggregates)
	}
}
