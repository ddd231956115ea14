// This file fills an Aggregator's Config from the TracerProvider's resource,
// so the stats are filed under the env and version the agent files the
// exported spans under.

package otelstats

import (
	"github.com/DataDog/datadog-agent/pkg/trace/traceutil/normalize"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/resource"

	"github.com/spanstats/spanstats/stats"
)

// ConfigFromResource returns c with Env, Version and ContainerID, where c
// leaves them empty, taken from r as the agent reads them from OTLP spans:
// deployment.environment.name (else deployment.environment),
// service.version and container.id, normalized as tag values. Without them
// the agent files the stats under its default env, and, over TCP, under no
// container (so without the container's tags), while the spans go under the
// resource's. A value set here is not replaced by DD_ENV or DD_VERSION.
// Hostname is left to c: the agent names an OTLP span's host from several
// resource attributes by cloud provider (datadog.host.name, host.id,
// host.name, k8s.node.name, ...), which this does not follow; an empty
// Hostname files the stats under the agent's own host. Env and version
// are the resource's, one per Aggregator: the agent lets a span's own
// deployment.environment(.name) and service.version attributes win over
// the resource's, which a span that sets them differently (rare: they
// describe the process) does not get here.
func ConfigFromResource(c stats.Config, r *resource.Resource) stats.Config {
	if r == nil {
		return c
	}
	get := func(keys ...attribute.Key) string {
		for _, k := range keys {
			if v, ok := r.Set().Value(k); ok && v.Type() == attribute.STRING && v.AsString() != "" {
				return normalize.NormalizeTagValue(v.AsString())
			}
		}
		return ""
	}
	if c.Env == "" {
		c.Env = get("deployment.environment.name", "deployment.environment")
	}
	if c.Version == "" {
		c.Version = get("service.version")
	}
	if c.ContainerID == "" {
		c.ContainerID = get("container.id")
	}
	return c
}
