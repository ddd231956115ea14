module github.com/spanstats/spanstats

go 1.26.0

require golang.org/x/sys v0.50.0

require (
	github.com/DataDog/sketches-go v1.4.8 // indirect
	github.com/VictoriaMetrics/metrics v1.45.0 // indirect
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/philhofer/fwd v1.2.0 // indirect
	github.com/tinylib/msgp v1.6.5 // indirect
	github.com/valyala/fastrand v1.1.0 // indirect
	github.com/valyala/histogram v1.2.0 // indirect
	go.uber.org/goleak v1.3.0 // indirect
	golang.org/x/mod v0.18.0 // indirect
	golang.org/x/tools v0.22.0 // indirect
	google.golang.org/protobuf v1.36.11 // indirect
)
