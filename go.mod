module github.com/spanstats/spanstats

go 1.26.0

require (
	github.com/DataDog/sketches-go v1.4.8
	github.com/VictoriaMetrics/metrics v1.45.0
	github.com/cespare/xxhash/v2 v2.3.0
	github.com/tinylib/msgp v1.6.5
	go.uber.org/goleak v1.3.0
	golang.org/x/sys v0.50.0
	google.golang.org/protobuf v1.36.11
)

require (
	github.com/philhofer/fwd v1.2.0 // indirect
	github.com/valyala/fastrand v1.1.0 // indirect
	github.com/valyala/histogram v1.2.0 // indirect
)
