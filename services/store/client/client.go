// Package client is the Go client of meridian's store for the other
// services: one grpc.ClientConnInterface over every member of the cluster
// that follows leader changes and retries only what is safe to retry.
//
// # Routing
//
// Any member accepts any request (followers forward writes and serve
// linearizable reads with a read index), so routing is an optimisation:
// writes, linearizable reads and streams go to the member believed to be
// the leader (learned from MemberList at Dial, every RefreshInterval, and
// after a failure); serializable reads are spread round-robin.
//
// # Retries
//
// A call that fails with UNAVAILABLE is retried on another member, with
// backoff, until its context ends or MaxAttempts is reached, when:
//   - the method is a read (Range, Status, MemberList, ReadIndex,
//     LeaseTimeToLive): reads have no effect; or
//   - the error proves the request was never proposed: it carries the
//     store's NOT_PROPOSED ErrorInfo, or the connection could not be
//     established. Writes (Txn, Compact, leases, membership) are retried
//     only then, so an acknowledged-or-not ambiguity is never resolved by
//     applying a write twice; the caller sees UNAVAILABLE and decides.
//
// Streams (Watch, LeaseKeepAlive) are retried only while being opened;
// Watch (the method of Client) resumes a watch from the revision after its
// last event on any member, which never loses or repeats an event.
package client

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/meridian-cp/meridian/lib/grpcclient"
	"github.com/meridian-cp/meridian/lib/ports"
	"github.com/meridian-cp/meridian/lib/telemetry"
	storev1 "github.com/meridian-cp/meridian/proto/gen/meridian/store/v1"
	"github.com/meridian-cp/meridian/services/store/internal/wire"
)

// DefaultAddress is the store's gRPC address when none is configured: a
// member listens there by default (store --listen), and the store CLI
// (--endpoints) and the services that use the store (--store-address) dial
// it by default, so that they find each other on one host without flags.
// It is lib/ports' Store, in the table of every service's defaults.
const DefaultAddress = ports.Store

// Options tune a Client; the zero value of each field means its default.
type Options struct {
	// MaxAttempts bounds the attempts of one call (first included);
	// default 8.
	MaxAttempts int
	// RefreshInterval is how often the leader is looked up; default 5s.
	RefreshInterval time.Duration
	// DialOptions are added to every connection's options.
	DialOptions []grpc.DialOption
}

// Client is a grpc.ClientConnInterface over the members of a store
// cluster. Safe for concurrent use; Close releases it.
type Client struct {
	endpoints []string
	conns     []*grpc.ClientConn
	opts      Options

	preferred atomic.Int32  // index of the endpoint believed to lead
	rr        atomic.Uint32 // round-robin cursor for serializable reads

	cancel context.CancelFunc
	wg     sync.WaitGroup
	once   sync.Once
}

var _ grpc.ClientConnInterface = (*Client)(nil)

// Dial connects to the members at endpoints ("host:port" of their gRPC
// API) with TLS (nil: plaintext, for tests). It does not block: connections
// are established on first use.
func Dial(endpoints []string, tlsConfig *tls.Config, opts ...Options) (*Client, error) {
	if len(endpoints) == 0 {
		return nil, errors.New("client: no endpoints")
	}
	var o Options
	if len(opts) > 0 {
		o = opts[0]
	}
	if o.MaxAttempts <= 0 {
		o.MaxAttempts = 8
	}
	if o.RefreshInterval <= 0 {
		o.RefreshInterval = 5 * time.Second
	}
	creds := insecure.NewCredentials()
	if tlsConfig != nil {
		creds = credentials.NewTLS(tlsConfig)
	}
	c := &Client{endpoints: append([]string(nil), endpoints...), opts: o}
	for _, ep := range endpoints {
		dopts := append([]grpc.DialOption{grpc.WithTransportCredentials(creds),
			grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(grpcclient.MaxMsgSize), grpc.MaxCallSendMsgSize(grpcclient.MaxMsgSize))}, grpcclient.WindowDialOptions()...)
		dopts = append(dopts, telemetry.GRPCClientOption())
		dopts = append(dopts, o.DialOptions...)
		conn, err := grpc.NewClient(ep, dopts...)
		if err != nil {
			_ = c.Close()
			return nil, fmt.Errorf("client: dial %s: %w", ep, err)
		}
		c.conns = append(c.conns, conn)
	}
	ctx, cancel := context.WithCancel(context.Background())
	c.cancel = cancel
	c.wg.Add(1)
	go func() { defer c.wg.Done(); c.refreshLoop(ctx) }()
	return c, nil
}

// Close closes every connection and stops the leader refresh. Idempotent.
func (c *Client) Close() error {
	var errs []error
	c.once.Do(func() {
		if c.cancel != nil {
			c.cancel()
		}
		c.wg.Wait()
		for _, conn := range c.conns {
			errs = append(errs, conn.Close())
		}
	})
	return errors.Join(errs...)
}

// KV, Watch, Lease, Cluster and Maintenance return typed clients over c.
func (c *Client) KV() storev1.KVServiceClient { return storev1.NewKVServiceClient(c) }

// WatchService returns the raw watch client (see also Client.Watch).
func (c *Client) WatchService() storev1.WatchServiceClient { return storev1.NewWatchServiceClient(c) }

// Lease returns the lease client.
func (c *Client) Lease() storev1.LeaseServiceClient { return storev1.NewLeaseServiceClient(c) }

// Cluster returns the cluster (membership) client.
func (c *Client) Cluster() storev1.ClusterServiceClient { return storev1.NewClusterServiceClient(c) }

// Maintenance returns the maintenance client.
func (c *Client) Maintenance() storev1.MaintenanceServiceClient {
	return storev1.NewMaintenanceServiceClient(c)
}

// readMethods have no effect and are always safe to retry.
var readMethods = map[string]bool{
	"/meridian.store.v1.KVService/Range":              true,
	"/meridian.store.v1.MaintenanceService/Status":    true,
	"/meridian.store.v1.ClusterService/MemberList":    true,
	"/meridian.store.v1.ClusterService/ReadIndex":     true,
	"/meridian.store.v1.LeaseService/LeaseTimeToLive": true,
}

// Invoke performs a unary call with routing and safe retries.
func (c *Client) Invoke(ctx context.Context, method string, args, reply any, opts ...grpc.CallOption) error {
	idx := int(c.preferred.Load())
	if r, ok := args.(*storev1.RangeRequest); ok && r.GetSerializable() {
		idx = int(c.rr.Add(1)) % len(c.conns)
	}
	backoff := 10 * time.Millisecond
	var err error
	for attempt := 1; ; attempt++ {
		err = c.conns[idx].Invoke(ctx, method, args, reply, opts...)
		if err == nil || attempt >= c.opts.MaxAttempts || !retryable(isRead(method, args), err) {
			return err
		}
		next := (idx + 1) % len(c.conns)
		c.preferred.CompareAndSwap(int32(idx), int32(next))
		idx = next
		if !sleep(ctx, backoff) {
			return err
		}
		backoff = min(2*backoff, 500*time.Millisecond)
		if attempt == 2 {
			c.refresh(ctx)
			idx = int(c.preferred.Load())
		}
	}
}

// isRead reports whether a call of method with args has no effect: a read
// method, or a transaction that only reads.
func isRead(method string, args any) bool {
	if readMethods[method] {
		return true
	}
	t, ok := args.(*storev1.TxnRequest)
	return ok && !wire.TxnWrites(t)
}

// NewStream opens a stream on the preferred member, trying the others
// while the stream cannot be opened. Once open, a stream is never retried.
func (c *Client) NewStream(ctx context.Context, desc *grpc.StreamDesc, method string, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	idx := int(c.preferred.Load())
	var err error
	for attempt := 0; attempt < len(c.conns); attempt++ {
		var s grpc.ClientStream
		s, err = c.conns[idx].NewStream(ctx, desc, method, opts...)
		if err == nil {
			return s, nil
		}
		if status.Code(err) != codes.Unavailable {
			return nil, err
		}
		idx = (idx + 1) % len(c.conns)
	}
	return nil, err
}

// Retryable reports whether a failed call of method may be sent again:
// reads on UNAVAILABLE, anything whose error proves it was not proposed.
func Retryable(method string, err error) bool { return retryable(readMethods[method], err) }

// retryable reports whether a failed call may be sent again: one without
// effect (read) on UNAVAILABLE, anything whose error proves it was not
// proposed.
func retryable(read bool, err error) bool {
	if status.Code(err) != codes.Unavailable {
		return false
	}
	return read || NotProposed(err)
}

// NotProposed reports whether err proves that the request never reached
// the raft log: the store said so (ErrorInfo reason NOT_PROPOSED), or the
// connection to the member could not be established.
func NotProposed(err error) bool {
	st, ok := status.FromError(err)
	if !ok || st.Code() != codes.Unavailable {
		return false
	}
	for _, d := range st.Details() {
		if ei, ok := d.(*errdetails.ErrorInfo); ok && ei.GetDomain() == wire.ErrorDomain && ei.GetReason() == wire.ReasonNotProposed {
			return true
		}
	}
	m := st.Message()
	return strings.Contains(m, "while dialing") || strings.Contains(m, "connection refused") ||
		strings.Contains(m, "produced zero addresses")
}

func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

func (c *Client) refreshLoop(ctx context.Context) {
	t := time.NewTicker(c.opts.RefreshInterval)
	defer t.Stop()
	for {
		c.refresh(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// refresh asks the members, in turn, for the leader's client address and
// prefers the endpoint that matches it.
func (c *Client) refresh(ctx context.Context) {
	if len(c.conns) == 1 {
		return
	}
	for _, conn := range c.conns {
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		resp, err := storev1.NewClusterServiceClient(conn).MemberList(cctx, &storev1.MemberListRequest{})
		cancel()
		if err != nil {
			continue
		}
		for _, m := range resp.GetMembers() {
			if !m.GetLeader() {
				continue
			}
			for j, ep := range c.endpoints {
				if ep == m.GetClientAddress() {
					c.preferred.Store(int32(j))
					return
				}
			}
		}
		return
	}
}
