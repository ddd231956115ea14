module github.com/spanstats/spanstats/bench/peer

go 1.26.0

require (
	github.com/DataDog/datadog-agent/pkg/proto v0.85.4
	github.com/DataDog/sketches-go v1.4.8
	github.com/spanstats/spanstats v0.0.0
	github.com/tinylib/msgp v1.6.5
	go.uber.org/goleak v1.3.0
	google.golang.org/protobuf v1.36.12
)

require (
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/philhofer/fwd v1.2.0 // indirect
	github.com/planetscale/vtprotobuf v0.6.1-0.20240319094008-0393e58bdf10 // indirect
)

replace github.com/spanstats/spanstats => ../..
