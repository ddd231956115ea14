module github.com/spanstats/spanstats/bench/peer

go 1.26.0

require (
	github.com/DataDog/datadog-agent/comp/core/tagger/origindetection v0.85.4
	github.com/DataDog/datadog-agent/pkg/obfuscate v0.85.4
	github.com/DataDog/datadog-agent/pkg/opentelemetry-mapping-go/otlp/attributes v0.85.4
	github.com/DataDog/datadog-agent/pkg/proto v0.85.4
	github.com/DataDog/datadog-agent/pkg/trace v0.85.4
	github.com/DataDog/datadog-agent/pkg/trace/stats v0.85.4
	github.com/DataDog/datadog-agent/pkg/trace/traceutil v0.85.4
	github.com/DataDog/datadog-go/v5 v5.9.1
	github.com/DataDog/sketches-go v1.4.8
	github.com/spanstats/spanstats v0.0.0
	github.com/spanstats/spanstats/stats/otelstats v0.0.0
	github.com/tinylib/msgp v1.6.5
	go.opentelemetry.io/collector/pdata v1.65.0
	go.opentelemetry.io/otel v1.46.0
	go.opentelemetry.io/otel/sdk v1.45.0
	go.opentelemetry.io/otel/trace v1.46.0
	go.uber.org/goleak v1.3.0
	google.golang.org/protobuf v1.36.12
)

require (
	github.com/DataDog/datadog-agent/comp/core/telemetry v0.85.4 // indirect
	github.com/DataDog/datadog-agent/pkg/api v0.85.4 // indirect
	github.com/DataDog/datadog-agent/pkg/remoteconfig/state v0.85.4 // indirect
	github.com/DataDog/datadog-agent/pkg/template v0.85.4 // indirect
	github.com/DataDog/datadog-agent/pkg/trace/log v0.85.4 // indirect
	github.com/DataDog/datadog-agent/pkg/util/cgroups v0.85.4 // indirect
	github.com/DataDog/datadog-agent/pkg/util/log v0.85.4 // indirect
	github.com/DataDog/datadog-agent/pkg/util/pointer v0.85.4 // indirect
	github.com/DataDog/datadog-agent/pkg/util/scrubber v0.85.4 // indirect
	github.com/DataDog/datadog-agent/pkg/version v0.85.4 // indirect
	github.com/DataDog/go-sqllexer v0.2.4 // indirect
	github.com/DataDog/go-tuf v1.1.1-0.5.2 // indirect
	github.com/Microsoft/go-winio v0.6.2 // indirect
	github.com/VictoriaMetrics/metrics v1.45.0 // indirect
	github.com/beorn7/perks v1.0.1 // indirect
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/dustin/go-humanize v1.1.0 // indirect
	github.com/ebitengine/purego v0.11.1 // indirect
	github.com/go-logr/logr v1.4.4 // indirect
	github.com/go-logr/stdr v1.2.2 // indirect
	github.com/go-ole/go-ole v1.3.0 // indirect
	github.com/google/uuid v1.6.0 // indirect
	github.com/hashicorp/go-version v1.9.0 // indirect
	github.com/json-iterator/go v1.1.12 // indirect
	github.com/lufia/plan9stats v0.0.0-20260802145828-341c2f0c90b5 // indirect
	github.com/modern-go/concurrent v0.0.0-20180306012644-bacd9c7ef1dd // indirect
	github.com/modern-go/reflect2 v1.0.3-0.20250322232337-35a7c28c31ee // indirect
	github.com/munnerz/goautoneg v0.0.0-20191010083416-a7dc8b61c822 // indirect
	github.com/open-telemetry/opentelemetry-collector-contrib/pkg/sampling v0.159.0 // indirect
	github.com/outcaste-io/ristretto v0.2.3 // indirect
	github.com/philhofer/fwd v1.2.0 // indirect
	github.com/pkg/errors v0.9.1 // indirect
	github.com/planetscale/vtprotobuf v0.6.1-0.20240319094008-0393e58bdf10 // indirect
	github.com/power-devops/perfstat v0.0.0-20260805114148-88456608a4f6 // indirect
	github.com/prometheus/client_golang v1.24.1 // indirect
	github.com/prometheus/client_model v0.6.3 // indirect
	github.com/prometheus/common v0.71.0 // indirect
	github.com/prometheus/procfs v0.22.0 // indirect
	github.com/secure-systems-lab/go-securesystemslib v0.11.1 // indirect
	github.com/shirou/gopsutil/v4 v4.26.9 // indirect
	github.com/tklauser/go-sysconf v0.4.0 // indirect
	github.com/tklauser/numcpus v0.12.0 // indirect
	github.com/valyala/fastrand v1.1.0 // indirect
	github.com/valyala/histogram v1.2.0 // indirect
	github.com/yusufpapurcu/wmi v1.2.4 // indirect
	go.opentelemetry.io/auto/sdk v1.2.1 // indirect
	go.opentelemetry.io/collector/component v1.65.0 // indirect
	go.opentelemetry.io/collector/featuregate v1.65.0 // indirect
	go.opentelemetry.io/otel/metric v1.46.0 // indirect
	go.uber.org/atomic v1.12.0 // indirect
	go.uber.org/mock v0.6.0 // indirect
	go.uber.org/multierr v1.11.0 // indirect
	go.uber.org/zap v1.28.0 // indirect
	go.yaml.in/yaml/v3 v3.0.5 // indirect
	golang.org/x/net v0.62.0 // indirect
	golang.org/x/sys v0.50.0 // indirect
	golang.org/x/text v0.43.0 // indirect
	golang.org/x/time v0.15.0 // indirect
	google.golang.org/genproto/googleapis/rpc v0.0.0-20260819154853-08b0e4226688 // indirect
	google.golang.org/grpc v1.84.0 // indirect
)

replace github.com/spanstats/spanstats => ../..

replace github.com/spanstats/spanstats/stats/otelstats => ../../stats/otelstats
