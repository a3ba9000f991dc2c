module github.com/meridian-cp/meridian/services/store/loadtest

go 1.26.0

replace (
	github.com/meridian-cp/meridian/lib => ../../../lib
	github.com/meridian-cp/meridian/proto/gen => ../../../proto/gen
	github.com/meridian-cp/meridian/services/store => ..
)

require (
	github.com/meridian-cp/meridian/proto/gen v0.0.0-00010101000000-000000000000
	github.com/meridian-cp/meridian/services/store v0.0.0-00010101000000-000000000000
	go.etcd.io/etcd/client/v3 v3.5.17
)

require (
	github.com/coreos/go-semver v0.3.0 // indirect
	github.com/coreos/go-systemd/v22 v22.3.2 // indirect
	github.com/gogo/protobuf v1.3.2 // indirect
	github.com/golang/protobuf v1.5.4 // indirect
	github.com/meridian-cp/meridian/lib v0.0.0-00010101000000-000000000000 // indirect
	go.etcd.io/etcd/api/v3 v3.5.17 // indirect
	go.etcd.io/etcd/client/pkg/v3 v3.5.17 // indirect
	go.uber.org/atomic v1.7.0 // indirect
	go.uber.org/multierr v1.6.0 // indirect
	go.uber.org/zap v1.17.0 // indirect
	golang.org/x/net v0.59.0 // indirect
	golang.org/x/sys v0.48.0 // indirect
	golang.org/x/text v0.42.0 // indirect
	google.golang.org/genproto/googleapis/api v0.0.0-20260921155816-b14227669459 // indirect
	google.golang.org/genproto/googleapis/rpc v0.0.0-20260918162117-cecb64721679 // indirect
	google.golang.org/grpc v1.84.0 // indirect
	google.golang.org/protobuf v1.36.12 // indirect
)
