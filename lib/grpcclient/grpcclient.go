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

// Dial returns a client connection to target (any grpc.NewClient target,
// e.g. "dns:///store:7000" or "127.0.0.1:7000"). tlsConf nil means
// plaintext, for tests only. opts are appended after the defaults, so they
// may override them. Like grpc.NewClient it does not connect; the first
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
	}, opts...)
	conn, err := grpc.NewClient(target, all...)
	if err != nil {
		return nil, fmt.Errorf("grpcclient: dial %s: %w", target, err)
	}
	return conn, nil
}
