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
// With Options.Local (the members in the client's own region or zone),
// serializable reads and watches go to those members instead (round-robin
// over them), so that a region's reads and watches are served by its own
// replica and only writes and linearizable reads cross to the leader.
// They move to the other members when the local ones do not answer.
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
// # Unresponsive members
//
// A member that does not answer at all — partitioned away, its host gone,
// a connection that silently stopped carrying data — would hold a call
// until the caller's deadline: nothing fails, TCP keeps retransmitting.
// So while an attempt of a unary call waits for its answer, the member is
// probed every Options.ProbeInterval: a health check it must answer
// within ProbeTimeout. A member that is merely slow (a large read, a
// loaded host) answers it and the attempt goes on; one that does not
// answer is given up on and the next member preferred. A read is then
// retried there; a write fails with DEADLINE_EXCEEDED, as any write whose
// answer was lost (it may or may not have been applied; the API gateway
// answers 504 Timeout). Connections are also kept alive with pings
// (lib/grpcclient's keepalive), so a dead one is eventually closed and
// dialled again rather than kept.
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
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
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
	// ProbeInterval is how long an attempt of a unary call waits for its
	// answer before its member is probed, and the time between probes
	// (see "Unresponsive members"); default DefaultProbeInterval,
	// negative: never probed (the caller's context alone bounds a call).
	ProbeInterval time.Duration
	// ProbeTimeout is how long a probe waits for the member's answer;
	// default DefaultProbeTimeout.
	ProbeTimeout time.Duration
	// DialOptions are added to every connection's options.
	DialOptions []grpc.DialOption
	// Local are the endpoints of the members near the client (its region
	// or zone): serializable reads and watches go to them. An endpoint not
	// among Dial's endpoints is added to them. Empty: serializable reads
	// are spread over every member and watches go to the leader.
	Local []string
}

// Defaults of Options.ProbeInterval and ProbeTimeout: a member that stops
// answering is given up on after 4s at most, and a call that is answered
// within 2s — nearly all — costs no probe.
const (
	DefaultProbeInterval = 2 * time.Second
	DefaultProbeTimeout  = 2 * time.Second
)

// Client is a grpc.ClientConnInterface over the members of a store
// cluster. Safe for concurrent use; Close releases it.
type Client struct {
	endpoints []string
	conns     []*grpc.ClientConn
	opts      Options

	preferred atomic.Int32  // index of the endpoint believed to lead
	rr        atomic.Uint32 // round-robin cursor for serializable reads
	// near are the indexes of the endpoints serializable reads and watches
	// start at: Options.Local's, or every endpoint when Local is empty
	// (then watches start at the leader). Never empty; fixed at Dial.
	near []int

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
	if o.ProbeInterval == 0 {
		o.ProbeInterval = DefaultProbeInterval
	}
	if o.ProbeTimeout <= 0 {
		o.ProbeTimeout = DefaultProbeTimeout
	}
	creds := insecure.NewCredentials()
	if tlsConfig != nil {
		creds = credentials.NewTLS(tlsConfig)
	}
	c := &Client{endpoints: append([]string(nil), endpoints...), opts: o}
	for _, l := range o.Local {
		i := slices.Index(c.endpoints, l)
		if i < 0 {
			i = len(c.endpoints)
			c.endpoints = append(c.endpoints, l)
		}
		if !slices.Contains(c.near, i) {
			c.near = append(c.near, i)
		}
	}
	if len(c.near) == 0 {
		for i := range c.endpoints {
			c.near = append(c.near, i)
		}
	}
	endpoints = c.endpoints
	for _, ep := range endpoints {
		dopts := append([]grpc.DialOption{grpc.WithTransportCredentials(creds),
			grpc.WithKeepaliveParams(keepalive.ClientParameters{
				Time: grpcclient.KeepaliveTime, Timeout: grpcclient.KeepaliveTimeout, PermitWithoutStream: true,
			}),
			grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(grpcclient.MaxMsgSize), grpc.MaxCallSendMsgSize(grpcclient.MaxMsgSize))}, grpcclient.WindowDialOptions()...)
		dopts = append(dopts, telemetry.GRPCClientOptions()...)
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
		idx = c.nearIndex()
	}
	backoff := 10 * time.Millisecond
	read := isRead(method, args)
	var err error
	for attempt := 1; ; attempt++ {
		var silent bool
		silent, err = c.invokeOn(ctx, idx, method, args, reply, opts...)
		next := (idx + 1) % len(c.conns)
		if silent {
			// The member did not answer: the next call, and this one if
			// it is a read, go to another.
			c.preferred.CompareAndSwap(int32(idx), int32(next))
		}
		if err == nil || attempt >= c.opts.MaxAttempts || !(retryable(read, err) || silent && read) {
			return err
		}
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

// errSilent is the cause of an attempt's context when its member did not
// answer a probe.
var errSilent = errors.New("client: member did not answer a probe")

// invokeOn makes one attempt of a unary call on member idx, probing the
// member while it waits (see "Unresponsive members"). silent reports that
// the member did not answer a probe (while ctx still runs); err is then
// DEADLINE_EXCEEDED.
func (c *Client) invokeOn(ctx context.Context, idx int, method string, args, reply any, opts ...grpc.CallOption) (silent bool, err error) {
	if c.opts.ProbeInterval < 0 {
		return false, c.conns[idx].Invoke(ctx, method, args, reply, opts...)
	}
	actx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	t := time.AfterFunc(c.opts.ProbeInterval, func() { c.probe(actx, idx, cancel) })
	defer t.Stop()
	err = c.conns[idx].Invoke(actx, method, args, reply, opts...)
	// Cancelled by the probe (an error of the member's own that came
	// first, say a refused connection, is returned as it is).
	if status.Code(err) == codes.Canceled && ctx.Err() == nil && errors.Is(context.Cause(actx), errSilent) {
		return true, status.Errorf(codes.DeadlineExceeded, "store: member %s stopped answering (no answer to a health check within %v) during %s; a write may or may not have been applied",
			c.endpoints[idx], c.opts.ProbeTimeout, method)
	}
	return false, err
}

// probe checks, every ProbeInterval until the attempt of actx ends, that
// member idx answers a health check within ProbeTimeout, and cancels the
// attempt when it does not. Any answer counts, an error status included
// (NOT_SERVING, UNIMPLEMENTED, PERMISSION_DENIED): the member is there.
func (c *Client) probe(actx context.Context, idx int, cancel context.CancelCauseFunc) {
	hc := healthpb.NewHealthClient(c.conns[idx])
	for {
		pctx, pcancel := context.WithTimeout(actx, c.opts.ProbeTimeout)
		_, err := hc.Check(pctx, &healthpb.HealthCheckRequest{})
		pcancel()
		if actx.Err() != nil {
			return
		}
		if code := status.Code(err); code == codes.DeadlineExceeded || code == codes.Unavailable {
			cancel(errSilent)
			return
		}
		if !sleep(actx, c.opts.ProbeInterval) {
			return
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

// nearIndex is the endpoint the next serializable read or local watch
// starts at: round-robin over the near endpoints.
func (c *Client) nearIndex() int {
	return c.near[int(c.rr.Add(1)%uint32(len(c.near)))]
}

// NewStream opens a stream on the preferred member (a watch, with
// Options.Local, on a local member), trying the others while the stream
// cannot be opened. Once open, a stream is never retried.
func (c *Client) NewStream(ctx context.Context, desc *grpc.StreamDesc, method string, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	idx := int(c.preferred.Load())
	if method == storev1.WatchService_Watch_FullMethodName && len(c.opts.Local) > 0 {
		idx = c.nearIndex()
	}
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
