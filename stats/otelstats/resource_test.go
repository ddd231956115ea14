// This file tests ConfigFromResource: the env, version and container id
// an Aggregator's Config takes from the TracerProvider's resource.

package otelstats

import (
	"testing"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/resource"

	"github.com/spanstats/spanstats/stats"
)

// TestConfigFromResource: env and version come from the resource as the
// agent reads them (the current env key first, normalized); what the
// Config sets stays.
func TestConfigFromResource(t *testing.T) {
	res := resource.NewWithAttributes("", attribute.String("deployment.environment", "old"),
		attribute.String("deployment.environment.name", "Prod EU"), attribute.String("service.version", "2.0.1"))
	if c := ConfigFromResource(stats.Config{}, res); c.Env != "prod_eu" || c.Version != "2.0.1" {
		t.Errorf("from the resource: env %q version %q, want prod_eu, 2.0.1", c.Env, c.Version)
	}
	if c := ConfigFromResource(stats.Config{Env: "staging"}, res); c.Env != "staging" || c.Version != "2.0.1" {
		t.Errorf("Config's env kept: env %q version %q", c.Env, c.Version)
	}
	old := resource.NewWithAttributes("", attribute.String("deployment.environment", "qa"), attribute.Int("service.version", 3))
	if c := ConfigFromResource(stats.Config{}, old); c.Env != "qa" || c.Version != "" {
		t.Errorf("older key, non-string version: env %q version %q, want qa and none", c.Env, c.Version)
	}
	if c := ConfigFromResource(stats.Config{Env: "x"}, nil); c.Env != "x" {
		t.Errorf("nil resource changed the Config: %+v", c)
	}
}

// TestConfigFromResourceContainerID: the agent files the OTLP spans, and the
// stats it computes of them, under the resource's container.id (normalized
// as a tag value) and tags them from that container; the stats computed
// here are filed the same way only when they carry the same ID.
func TestConfigFromResourceContainerID(t *testing.T) {
	const id = "3f6c1a2b9d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8"
	res := resource.NewWithAttributes("", attribute.String("container.id", id))
	if c := ConfigFromResource(stats.Config{}, res); c.ContainerID != id {
		t.Errorf("container id %q, want the resource's %q", c.ContainerID, id)
	}
	if c := ConfigFromResource(stats.Config{}, resource.NewWithAttributes("", attribute.String("container.id", "ABC 1"))); c.ContainerID != "abc_1" {
		t.Errorf("container id %q, want abc_1, normalized as the agent normalizes it", c.ContainerID)
	}
	if c := ConfigFromResource(stats.Config{ContainerID: "mine"}, res); c.ContainerID != "mine" {
		t.Errorf("Config's container id replaced: %q", c.ContainerID)
	}
}
