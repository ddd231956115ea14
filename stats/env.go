// This file fills Config from the environment variables the Datadog
// tracers read, so a service configured for dd-trace-go or dd-trace-java
// reports to the same agent with the same identity, and from
// SPANSTATS_RELAY_URL, which sends it to a relay instead.

package stats

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"

	"github.com/spanstats/spanstats/aggregate"
	"github.com/spanstats/spanstats/internal/agentclient"
)

// Environment variables read for the Config fields left at their zero value.
const (
	EnvRelayURL  = "SPANSTATS_RELAY_URL" // AgentURL: a relay's unixgram:///path or udp://host:port (wins over the DD_ variables)
	EnvAgentURL  = "DD_TRACE_AGENT_URL"  // AgentURL: http://host:port or unix:///path (wins over host and port)
	EnvAgentHost = "DD_AGENT_HOST"       // AgentURL's host (default localhost)
	EnvAgentPort = "DD_TRACE_AGENT_PORT" // AgentURL's port (default 8126)
	EnvEnv       = "DD_ENV"
	EnvService   = "DD_SERVICE"
	EnvVersion   = "DD_VERSION"
	EnvTags      = "DD_TAGS"                  // "k:v,k2:v2" or "k:v k2:v2": Env, Service, Version, GitCommitSha fallbacks (not Tags)
	EnvHostname  = "DD_TRACE_SOURCE_HOSTNAME" // Hostname
	// EnvReportHostname "true" sends the host name as Hostname when
	// DD_TRACE_SOURCE_HOSTNAME does not name one; otherwise Hostname stays
	// empty and the agent files the stats under its own host, as it files
	// the traces of dd-trace-go.
	EnvReportHostname = "DD_TRACE_REPORT_HOSTNAME"
	EnvGitCommit      = "DD_GIT_COMMIT_SHA" // GitCommitSha (else DD_TAGS' git.commit.sha)
	// EnvGitMetadataEnabled "false" stops GitCommitSha being filled from
	// DD_GIT_COMMIT_SHA or a git.commit.sha tag (of DD_TAGS or
	// Config.Tags), as dd-trace-go; the config's own GitCommitSha is still
	// sent, and Config.Tags go into the payload as given.
	EnvGitMetadataEnabled = "DD_TRACE_GIT_METADATA_ENABLED"
	// EnvOtelService stands in for an unset DD_SERVICE, as in dd-trace-go.
	EnvOtelService = "OTEL_SERVICE_NAME"
	// EnvOtelResourceAttributes stands in for an unset DD_TAGS, as in
	// dd-trace-go: "key=value" pairs, deployment.environment,
	// service.name and service.version read as env, service and version.
	EnvOtelResourceAttributes = "OTEL_RESOURCE_ATTRIBUTES"
	envLimitShape             = "DD_TRACE_STATS_%s_CARDINALITY_LIMIT"

	// EnvAggregatesLimit fills MaxAggregates: dd-trace-go's whole-key
	// limit, the groups of a bucket (the SDK's cap holds for the table).
	EnvAggregatesLimit = "DD_TRACE_STATS_CARDINALITY_LIMIT"

	// EnvResourceLimit, EnvHTTPEndpointLimit and EnvPeerTagsLimit fill
	// Config.CardinalityLimits' fields. The names are dd-trace-go's, the
	// budgets not quite: here a field's budget holds for the whole
	// interval across services (dd-trace-go counts resources within one
	// service and operation), and the peer-tag budget holds for each
	// peer-tag key's values (dd-trace-go counts combinations of peer tags).
	EnvResourceLimit     = "DD_TRACE_STATS_RESOURCE_CARDINALITY_LIMIT"
	EnvHTTPEndpointLimit = "DD_TRACE_STATS_HTTP_ENDPOINT_CARDINALITY_LIMIT"
	EnvPeerTagsLimit     = "DD_TRACE_STATS_PEER_TAGS_CARDINALITY_LIMIT"
)

// otelTagNames are the resource attributes dd-trace-go reads as the
// unified service tags.
var otelTagNames = map[string]string{
	"deployment.environment": "env",
	"service.name":           "service",
	"service.version":        "version",
}

// DefaultAgentSocket is the agent's Unix socket: when it exists and neither
// AgentURL nor the environment names the agent, reports go there, as the
// Datadog tracers do.
const DefaultAgentSocket = "/var/run/datadog/apm.socket"

// EnvCardinalityLimit is the variable that sets field f's budget:
// DD_TRACE_STATS_<FIELD>_CARDINALITY_LIMIT, e.g.
// DD_TRACE_STATS_HTTP_ENDPOINT_CARDINALITY_LIMIT: a positive integer, one
// over MaxCardinalityLimit taking that maximum (with a warning).
func EnvCardinalityLimit(f aggregate.Field) string {
	return fmt.Sprintf(envLimitShape, strings.ToUpper(f.String()))
}

// withEnv fills the fields c leaves at zero from getenv. A value that cannot
// be used is logged and ignored, so the field keeps its default.
func (c Config) withEnv(getenv func(string) string, exists func(string) bool, log *slog.Logger) Config {
	ignore := func(name, value, why string) {
		value = strings.TrimSpace(value)
		if name == EnvRelayURL || name == EnvAgentURL || name == EnvAgentHost || name == EnvAgentPort {
			value = agentclient.Redact(value) // a password in a URL stays out of the logs; an "@" in a tag is no password
		}
		log.Warn("spanstats: ignoring an environment variable, as if it were unset", "name", name, "value", value, "reason", why)
	}
	if c.AgentURL == "" {
		c.AgentURL = agentURLFromEnv(getenv, exists, ignore)
	}
	// The OpenTelemetry variables stand in only for fields the config
	// leaves to the environment.
	serviceFromConfig, tagsFromConfig := c.Service != "", c.Tags != nil
	gitFromEnv := true // as dd-trace-go: git metadata is on unless turned off
	// Blank is unset here too, as for every variable.
	if raw := getenv(EnvGitMetadataEnabled); strings.TrimSpace(raw) != "" {
		if on, err := strconv.ParseBool(strings.TrimSpace(raw)); err != nil {
			ignore(EnvGitMetadataEnabled, raw, "want true or false")
		} else {
			gitFromEnv = on
		}
	}
	for _, f := range []struct {
		v    *string
		name string
	}{
		{&c.Env, EnvEnv}, {&c.Service, EnvService}, {&c.Version, EnvVersion},
		{&c.Hostname, EnvHostname}, {&c.GitCommitSha, EnvGitCommit},
	} {
		if *f.v != "" || f.name == EnvGitCommit && !gitFromEnv {
			continue
		}
		if v := strings.TrimSpace(getenv(f.name)); controlAt(v) >= 0 {
			ignore(f.name, v, "has a control character")
		} else {
			*f.v = v
		}
	}
	// The fallbacks are consulted only then: their warning that the
	// Datadog variable wins would be wrong where the config does.
	if !serviceFromConfig {
		if raw, ok := otelFallback(EnvService, EnvOtelService, c.Service != "", getenv, log); ok {
			if v := strings.TrimSpace(raw); controlAt(v) >= 0 {
				ignore(EnvOtelService, raw, "has a control character")
			} else {
				c.Service = v
			}
		}
	}
	// Set by the config or their own variable (a usable value: not blank,
	// no control character): DD_TAGS does not replace them.
	// git.commit.sha is read from DD_TAGS or the config's Tags only, as
	// dd-trace-go reads it from DD_TAGS only (TestEnvGitCommitNotFromOtelAttributes).
	envSet, serviceSet, versionSet, gitSet := c.Env != "", c.Service != "", c.Version != "", c.GitCommitSha != "" || !gitFromEnv
	// DD_TAGS (or OTEL_RESOURCE_ATTRIBUTES) is read for these fallbacks
	// only, not copied into the payload's Tags: the agent (v0.85) takes a
	// payload's Tags as its container's tags, in place of those it would
	// look up, and drops them without a container id; dd-trace-go sends
	// none (TestEnvTagsStayOutOfThePayload).
	tags := c.Tags
	ddTags := false // DD_TAGS is set and used
	if !tagsFromConfig {
		// Set, DD_TAGS wins over OTEL_RESOURCE_ATTRIBUTES, as in
		// dd-trace-go, even holding no tag (","), unless every tag it
		// holds was dropped for a control character.
		raw := getenv(EnvTags)
		parsed := parseTags(raw)
		n := len(parsed)
		tags = withoutControlTags(EnvTags, parsed, log)
		ddTags = strings.TrimSpace(raw) != "" && (n == 0 || len(tags) > 0)
		if raw, ok := otelFallback(EnvTags, EnvOtelResourceAttributes, ddTags, getenv, log); ok {
			tags = withoutControlTags(EnvOtelResourceAttributes, otelTags(raw), log)
			gitSet = true
		}
	}
	// As dd-trace-go: the env, service and version tags stand in for
	// DD_ENV, DD_SERVICE and DD_VERSION, and git.commit.sha (its git
	// metadata) for DD_GIT_COMMIT_SHA, the last of each winning.
	for _, t := range tags {
		switch k, v, _ := strings.Cut(t, ":"); { // DD_TAGS' trimmed by parseTags
		case v == "":
		case k == "env" && !envSet:
			c.Env = v
		case k == "service" && !serviceSet:
			c.Service = v
		case k == "version" && !versionSet:
			c.Version = v
		case k == "git.commit.sha" && !gitSet:
			c.GitCommitSha = v
		}
	}
	// Parsed even where Hostname is set, so a bad value is still logged.
	if raw := getenv(EnvReportHostname); strings.TrimSpace(raw) != "" {
		if report, err := strconv.ParseBool(strings.TrimSpace(raw)); err != nil {
			ignore(EnvReportHostname, raw, "want true or false")
		} else if report && c.Hostname == "" {
			h, err := os.Hostname()
			if err != nil {
				log.Warn("spanstats: cannot read the host name; sending none", "name", EnvReportHostname, "err", err)
			}
			c.Hostname = strings.TrimSpace(h)
		}
	}
	// A positive limit, at most max; 0 when unset or refused (logged).
	limit := func(name string, max int64) int {
		raw := getenv(name)
		if strings.TrimSpace(raw) == "" {
			return 0
		}
		n, err := strconv.ParseInt(strings.TrimSpace(raw), 10, 64)
		if errors.Is(err, strconv.ErrRange) && n > 0 {
			err = nil // past int64: past the maximum too
		}
		if err != nil || n <= 0 {
			ignore(name, raw, fmt.Sprintf("want an integer in [1, %d]", max))
			return 0
		}
		if n > max {
			// dd-trace-go takes any positive limit: one asking for more
			// than the table keeps gets the most it keeps, not the default.
			log.Warn("spanstats: an environment variable is over its maximum; using the maximum",
				"name", name, "value", strings.TrimSpace(raw), "max", max)
			n = max
		}
		return int(n)
	}
	if c.MaxAggregates == 0 {
		c.MaxAggregates = limit(EnvAggregatesLimit, MaxMaxAggregates)
	}
	for f := range aggregate.NumFields {
		if c.CardinalityLimits.Get(f) == 0 {
			c.CardinalityLimits.Set(f, limit(EnvCardinalityLimit(f), MaxCardinalityLimit))
		}
	}
	return c
}

// agentURLFromEnv resolves the agent as dd-trace-go does: DD_TRACE_AGENT_URL,
// else DD_AGENT_HOST and DD_TRACE_AGENT_PORT, else the default socket if it
// exists; "" leaves DefaultAgentURL.
//
// SPANSTATS_RELAY_URL comes first: it points the stats of every process of a
// host or pod at a statsrelay without changing DD_TRACE_AGENT_URL, which the
// tracer itself reads to send traces and which must stay an HTTP agent.
func agentURLFromEnv(getenv func(string) string, exists func(string) bool, ignore func(name, value, why string)) string {
	if raw := strings.TrimSpace(getenv(EnvRelayURL)); raw != "" {
		t, err := parseAgentURL(raw)
		if err == nil && t.network != "" {
			return raw
		}
		ignore(EnvRelayURL, raw, urlReason("want unixgram:///path/to/relay.sock or udp://host:port", err))
	}
	if raw := strings.TrimSpace(getenv(EnvAgentURL)); raw != "" {
		// An HTTP agent only, as dd-trace-go: a udp:// copied from a
		// DogStatsD setting must not send datagrams there (SPANSTATS_RELAY_URL
		// names a relay).
		t, err := parseAgentURL(raw)
		if err == nil && t.network == "" {
			return raw
		}
		ignore(EnvAgentURL, raw, urlReason("want http://host:port or unix:///path (a relay goes in "+EnvRelayURL+")", err))
	}
	u, err := agentclient.HostPortURL(getenv(EnvAgentHost), getenv(EnvAgentPort))
	if errors.Is(err, agentclient.ErrAgentPort) {
		ignore(EnvAgentPort, strings.TrimSpace(getenv(EnvAgentPort)), "want a port number")
	}
	if errors.Is(err, agentclient.ErrAgentHost) {
		ignore(EnvAgentHost, strings.TrimSpace(getenv(EnvAgentHost)), "not a host name or address")
		// The host alone is ignored, as a bad port is: a valid port still
		// names the agent (on localhost), rather than being dropped too.
		u, _ = agentclient.HostPortURL("", getenv(EnvAgentPort))
	}
	if u != "" {
		return u
	}
	if exists(DefaultAgentSocket) {
		return "unix://" + DefaultAgentSocket
	}
	return ""
}

// urlReason is want and, when New would refuse the URL, New's reason: a
// URL of the shape wanted can still be bad (a port out of range, two
// slashes before a socket path).
func urlReason(want string, err error) string {
	if err == nil {
		return want
	}
	return want + "; " + strings.TrimPrefix(err.Error(), ErrBadConfig.Error()+": ")
}

// otelFallback returns the OpenTelemetry variable ot, which stands in
// for the Datadog variable dd as in dd-trace-go: ok only when ot is set
// and dd is not used (ddUsed: set, and not ignored for a control
// character, or for DD_TAGS not every tag of it); when both are, dd
// wins, with a warning naming both.
func otelFallback(dd, ot string, ddUsed bool, getenv func(string) string, log *slog.Logger) (raw string, ok bool) {
	if raw = getenv(ot); strings.TrimSpace(raw) == "" {
		return "", false
	}
	if ddUsed {
		log.Warn("spanstats: both "+dd+" and "+ot+" are set; using "+dd, "name", ot)
		return "", false
	}
	return raw, true
}

// otelTags reads OTEL_RESOURCE_ATTRIBUTES as DD_TAGS, for the fallbacks:
// pairs split as DD_TAGS is, at "=" rather than ":", the unified service
// tags among them put in front as dd-trace-go puts them (the caller drops
// those with a control character: withoutControlTags).
func otelTags(raw string) []string {
	var named, other []string
	forEachTag(raw, "=", func(k, v string) {
		if dd, ok := otelTagNames[k]; ok {
			named = append([]string{dd + ":" + v}, named...)
		} else {
			other = append(other, k+":"+v)
		}
	})
	return append(named, other...)
}

// withoutControlTags returns tags less those holding a control character,
// each logged: one such tag, which may be one nobody reads, does not cost
// the variable's env, service and version with it.
func withoutControlTags(name string, tags []string, log *slog.Logger) []string {
	kept := tags[:0]
	for _, t := range tags {
		if controlAt(t) >= 0 {
			log.Warn("spanstats: ignoring a tag of an environment variable, as if it were absent", "name", name, "tag", t, "reason", "has a control character")
			continue
		}
		kept = append(kept, t)
	}
	return kept
}

// forEachTag calls fn with each key and value of raw, split as dd-trace-go's
// ForEachStringTag splits: pairs on commas when there are any, else on
// spaces; key and value at the first delim, each trimmed (no delim: an
// empty value); an empty pair or key skipped.
func forEachTag(raw, delim string, fn func(k, v string)) {
	sep := " "
	if strings.Contains(raw, ",") {
		sep = ","
	}
	for t := range strings.SplitSeq(raw, sep) {
		k, v, _ := strings.Cut(t, delim)
		if k = strings.TrimSpace(k); k != "" {
			fn(k, strings.TrimSpace(v))
		}
	}
}

// parseTags splits DD_TAGS as the tracers do: on commas when there are any,
// else on spaces; empty entries are skipped.
func parseTags(raw string) []string {
	sep := " "
	if strings.Contains(raw, ",") {
		sep = ","
	}
	var tags []string
	for t := range strings.SplitSeq(raw, sep) {
		t = strings.TrimSpace(t)
		// As dd-trace-go's ForEachStringTag: key and value trimmed ("env :
		// staging" is env:staging), an empty key skipped.
		if k, v, ok := strings.Cut(t, ":"); ok {
			k, v = strings.TrimSpace(k), strings.TrimSpace(v)
			if k == "" {
				continue
			}
			if len(k)+1+len(v) != len(t) {
				t = k + ":" + v
			}
		}
		if t != "" {
			tags = append(tags, t)
		}
	}
	return tags
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}
