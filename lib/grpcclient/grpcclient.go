// Package grpcclient dials meridian's services with the settings every
// client shares: TLS (mTLS when the configuration holds a client
// certificate), keepalive and message size limits.
package grpcclient

import (
	"crypto/tls"
	"fmt"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"

	"github.com/meridian-cp/meridian/lib/telemetry"
)

// MaxMsgSize is the largest message a client sends or receives (64 MiB):
// large lists and snapshots come back in one message.
const MaxMsgSize = 64 << 20

// Keepalive settings. KeepaliveTime must stay above the servers'
// enforcement minimum (10s in lib/grpcserver).
const (
	// KeepaliveTime is how long a connection may be idle before the client
	// pings it.
	KeepaliveTime = 30 * time.Second
	// KeepaliveTimeout is how long the client waits for the ping's answer
	// before it closes the connection.
	KeepaliveTimeout = 10 * time.Second
)

// Flow-control windows, static: every meridian client (Dial, the store's
// client) and server (lib/grpcserver) sets them. A static window turns off
// gRPC's bandwidth-delay estimator, which sends a PING, and draws a PING
// ack, whenever data arrives after a quiet spell — on request/response
// traffic, about once per call. The all-in-one serving one client
// (/proc/PID/io, two runs each): a GET took 6.2–6.3 → 3.3–3.4 write and
// 12.1–12.3 → 6.4–6.5 read system calls, a create 14.4–15.0 → 8.3–9.1 and
// 26.6–30.8 → 14.9–17.3.
// The sizes are what the estimator grows to on a fast link, so a stream
// still moves 40 MB/s across a 100 ms round trip (another region); a
// window is credit, not memory: a receiver buffers only what its reader
// has not yet taken.
const (
	// InitialWindowSize is a stream's receive window.
	InitialWindowSize = 4 << 20
	// InitialConnWindowSize is a connection's receive window.
	InitialConnWindowSize = 16 << 20
)

// WindowDialOptions set the flow-control windows of a client connection.
func WindowDialOptions() []grpc.DialOption {
	return []grpc.DialOption{grpc.WithInitialWindowSize(InitialWindowSize), grpc.WithInitialConnWindowSize(InitialConnWindowSize)}
}

// Dial returns a client connection to target (any grpc.NewClient target,
// e.g. "dns:///store:7000" or "127.0.0.1:7000"). tlsConf nil means
// plaintext, for tests only. opts are appended after the defaults, so they
// may override them. A call made under a span joins its trace
// (telemetry.GRPCClientOptions). Like grpc.NewClient it does not connect; the first
// call does.
func Dial(target string, tlsConf *tls.Config, opts ...grpc.DialOption) (*grpc.ClientConn, error) {
	creds := insecure.NewCredentials()
	if tlsConf != nil {
		creds = credentials.NewTLS(tlsConf)
	}
	all := append([]grpc.DialOption{
		grpc.WithTransportCredentials(creds),
		grpc.WithKeepaliveParams(keepalive.ClientParameters{
			Time:                KeepaliveTime,
			Timeout:             KeepaliveTimeout,
			PermitWithoutStream: true,
		}),
		grpc.WithDefaultCallOptions(
			grpc.MaxCallRecvMsgSize(MaxMsgSize),
			grpc.MaxCallSendMsgSize(MaxMsgSize),
		),
		grpc.WithInitialWindowSize(InitialWindowSize),
		grpc.WithInitialConnWindowSize(InitialConnWindowSize),
	}, telemetry.GRPCClientOptions()...)
	all = append(all, opts...)
	conn, err := grpc.NewClient(target, all...)
	if err != nil {
		return nil, fmt.Errorf("grpcclient: dial %s: %w", target, err)
	}
	return conn, nil
}
