// Package ports is the one table of meridian's default addresses: where
// each service binary listens when no flag names an address, and so where
// the binaries that call it dial by default. Each binary takes its
// defaults from here, so that the five services started on one host
// without address flags find each other and bind no port twice.
//
// Every default is on loopback: a service reachable from other hosts is
// one somebody asked for with a flag (and should serve TLS). On several
// hosts each listen flag names the host's address, with the same ports.
package ports

// The default addresses. The store's raft transport has none: without
// --peer-listen a member is a single in-memory node.
const (
	// Store is a store member's gRPC API (store --listen), and where the
	// store CLI (--endpoints), watchfanout and the gateway
	// (--store-address) look for it.
	Store = "127.0.0.1:2479"
	// StoreMetrics is a store member's /metrics (store --metrics-listen).
	StoreMetrics = "127.0.0.1:9479"
	// Admission is the admission service's gRPC API.
	Admission = "127.0.0.1:7002"
	// AdmissionMetrics is the admission service's /metrics.
	AdmissionMetrics = "127.0.0.1:9092"
	// FlowControl is the flow-control service's gRPC API.
	FlowControl = "127.0.0.1:7003"
	// FlowControlMetrics is the flow-control service's /metrics.
	FlowControlMetrics = "127.0.0.1:9093"
	// WatchFanout is a watchfanout replica's gRPC API.
	WatchFanout = "127.0.0.1:7004"
	// WatchFanoutMetrics is a watchfanout replica's /metrics.
	WatchFanoutMetrics = "127.0.0.1:9094"
	// API is the gateway's Kubernetes HTTPS API (and the all-in-one's);
	// the gateway serves its metrics there.
	API = "127.0.0.1:6443"
	// APIGRPC is the gateway's gRPC API (meridian.api.v1.ResourceService).
	APIGRPC = "127.0.0.1:6444"
)

// Default is the default address of one flag of one command line.
type Default struct {
	// Command is the command's words: the binary's name, then the
	// subcommand's words if any ("store member list").
	Command string
	// Flag is the flag's name with its dashes ("--listen").
	Flag string
	// Address is the flag's default.
	Address string
}

// Listeners are the default listen addresses of the five service
// binaries, every one distinct.
func Listeners() []Default {
	return []Default{
		{"store", "--listen", Store},
		{"store", "--metrics-listen", StoreMetrics},
		{"admission", "--listen", Admission},
		{"admission", "--metrics-listen", AdmissionMetrics},
		{"flowcontrol", "--listen", FlowControl},
		{"flowcontrol", "--metrics-listen", FlowControlMetrics},
		{"watchfanout", "--listen", WatchFanout},
		{"watchfanout", "--metrics-listen", WatchFanoutMetrics},
		{"apigateway", "--listen", API},
		{"apigateway", "--grpc-listen", APIGRPC},
	}
}

// Peers are the default addresses the binaries dial: each is a default
// of Listeners.
func Peers() []Default {
	return []Default{
		{"store member list", "--endpoints", Store},
		{"watchfanout", "--store-address", Store},
		{"apigateway", "--store-address", Store},
		{"apigateway", "--admission-address", Admission},
		{"apigateway", "--flowcontrol-address", FlowControl},
		{"apigateway", "--watchfanout-addresses", WatchFanout},
	}
}
