// Package watchfanoutclient is the gateway's client of watchfanout: a pool
// that picks one of watchfanout's replicas for each watch or cached read.
// Replicas are independent (each follows the store on its own), so any
// healthy one serves any request: calls go round-robin over the replicas
// whose connections are not failing, and a call that a replica cannot take
// moves on to the next. A watch (Pool.Watch) goes on across replicas: when
// the replica serving it goes away, drains, or cannot serve its
// resourceVersion, it resumes on another from the last resourceVersion it
// delivered.
package watchfanoutclient

import (
	"context"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/meridian-cp/meridian/lib/identity"
	"github.com/meridian-cp/meridian/lib/watchmux"
	watchv1 "github.com/meridian-cp/meridian/proto/gen/meridian/watch/v1"
	"github.com/meridian-cp/meridian/services/apigateway/internal/watchpark"
)

// Pool is a set of replica connections. It is safe for concurrent use.
type Pool struct {
	conns   []*grpc.ClientConn
	clients []watchv1.WatchServiceClient
	next    atomic.Uint64
	// localGets counts the replicas whose Get runs in this process
	// (WithGetInProcess); set by New's options only.
	localGets int
}

// New returns a pool over conns, which must not be empty. Watches are
// multiplexed over WatchMany streams of each replica (lib/watchmux): a
// watch then costs the replica a few hundred bytes, not a gRPC stream and
// the goroutine that serves it.
func New(conns []*grpc.ClientConn, opts ...Option) *Pool {
	p := &Pool{conns: conns}
	for _, c := range conns {
		wc := watchv1.NewWatchServiceClient(c)
		p.clients = append(p.clients, &muxed{WatchServiceClient: wc, mux: watchmux.New(wc, watchmux.Options{})})
	}
	for _, o := range opts {
		o(p)
	}
	return p
}

// StreamListFunc is a replica's StreamList served in this process
// (watchfanout's App.StreamListInProcess).
type StreamListFunc func(context.Context, *watchv1.StreamListRequest) (grpc.ServerStreamingClient[watchv1.StreamListResponse], error)

// Option configures a Pool.
type Option func(*Pool)

// WithStreamListInProcess serves the StreamList calls of replica i (the
// one at conns[i], which runs in this process) with f instead of over its
// connection: the list's chunks are handed over as the replica wrote
// them. Its other calls, and the health the pool sees, stay on the
// connection.
func WithStreamListInProcess(i int, f StreamListFunc) Option {
	return func(p *Pool) {
		p.clients[i] = localLists{WatchServiceClient: p.clients[i], streamList: f}
	}
}

// localLists is a replica's client whose StreamList runs in process.
type localLists struct {
	watchv1.WatchServiceClient
	streamList StreamListFunc
}

// StreamList calls the replica in process; call options, which configure
// a connection's call, do not apply.
func (l localLists) StreamList(ctx context.Context, in *watchv1.StreamListRequest, _ ...grpc.CallOption) (grpc.ServerStreamingClient[watchv1.StreamListResponse], error) {
	return l.streamList(ctx, in)
}

// GetFunc is a replica's Get served in this process (watchfanout's
// App.GetInProcess).
type GetFunc func(context.Context, *watchv1.GetRequest) (*watchv1.GetResponse, error)

// WithGetInProcess serves the Get calls of replica i (the one at
// conns[i], which runs in this process) with f instead of over its
// connection: the object's encoding is handed over as the replica holds
// it. Its other calls, and the health the pool sees, stay as they were.
func WithGetInProcess(i int, f GetFunc) Option {
	return func(p *Pool) {
		p.clients[i] = localGet{WatchServiceClient: p.clients[i], get: f}
		p.localGets++
	}
}

// localGet is a replica's client whose Get runs in process.
type localGet struct {
	watchv1.WatchServiceClient
	get GetFunc
}

// Get calls the replica in process; call options do not apply.
func (l localGet) Get(ctx context.Context, in *watchv1.GetRequest, _ ...grpc.CallOption) (*watchv1.GetResponse, error) {
	return l.get(ctx, in)
}

// GetsInProcess reports whether every replica's Get runs in this process
// (WithGetInProcess): a Get then costs no call, and consistent gets are
// worth serving from the replicas (see resources.Server.cachedGet).
func (p *Pool) GetsInProcess() bool { return p.localGets == len(p.clients) }

// retryManyAfter is how long a replica that does not serve WatchMany (an
// older version, during an upgrade) gets a Watch stream per watch before
// WatchMany is tried again.
const retryManyAfter = time.Minute

// muxed is a replica's client whose watches go over WatchMany.
type muxed struct {
	watchv1.WatchServiceClient
	mux *watchmux.Mux
	// noManyUntil (unix nanoseconds): until then, watches use Watch.
	noManyUntil atomic.Int64
}

// Watch opens the watch on one of the replica's WatchMany streams, or as a
// Watch stream of its own when the replica does not serve WatchMany. The
// first message is received here to tell; the stream delivers it first.
//
// The stream ends when ctx does, or when its reader closes it (its Close
// method, which every stream returned here has); ctx's deadline is not the
// call's: the watch's request asks the replica for the time left in
// timeout_seconds, so that the replica's own end comes after the deadline,
// and a gRPC deadline would end the stream with the replica's
// DEADLINE_EXCEEDED a moment before the context's. A watch on a WatchMany
// stream costs no context of its own; one on a Watch stream of its own
// carries the caller's identity (ctx's user) to the replica.
func (m *muxed) Watch(ctx context.Context, in *watchv1.WatchRequest, opts ...grpc.CallOption) (grpc.ServerStreamingClient[watchv1.WatchResponse], error) {
	if time.Now().UnixNano() < m.noManyUntil.Load() {
		return m.ownWatch(ctx, in, opts...)
	}
	s, err := m.mux.Watch(ctx, in, opts...)
	if err == nil {
		first, ferr := s.Recv()
		if status.Code(ferr) != codes.Unimplemented {
			return &primed[watchv1.WatchResponse]{ServerStreamingClient: s, first: first, err: ferr}, nil
		}
		s.(closer).Close()
		err = ferr
	}
	if status.Code(err) == codes.Unimplemented {
		m.noManyUntil.Store(time.Now().Add(retryManyAfter).UnixNano())
		return m.ownWatch(ctx, in, opts...)
	}
	return nil, err
}

// ownWatch opens the watch as a Watch stream of its own, ended by ctx's
// end or by its Close.
func (m *muxed) ownWatch(ctx context.Context, in *watchv1.WatchRequest, opts ...grpc.CallOption) (grpc.ServerStreamingClient[watchv1.WatchResponse], error) {
	u, _ := identity.UserFrom(ctx)
	sctx, cancelStream := context.WithCancel(context.WithoutCancel(identity.AppendToOutgoing(ctx, u)))
	unhook := context.AfterFunc(ctx, cancelStream)
	s, err := m.WatchServiceClient.Watch(sctx, in, opts...)
	if err != nil {
		unhook()
		cancelStream()
		return nil, err
	}
	return &ownStream{ServerStreamingClient: s, unhook: unhook, cancel: cancelStream}, nil
}

// closer is a watch stream its reader can end before its context ends
// (every stream muxed.Watch returns).
type closer interface{ Close() }

// ownStream is a Watch stream of its own, with its context's cancel.
type ownStream struct {
	grpc.ServerStreamingClient[watchv1.WatchResponse]
	unhook func() bool
	cancel context.CancelFunc
}

// Close ends the stream.
func (o *ownStream) Close() {
	o.unhook()
	o.cancel()
}

// Client returns a client of watchfanout for one call. The call goes to the
// next healthy replica — one whose connection is READY or IDLE — and the
// others follow in turn. A replica that went away cycles between
// TRANSIENT_FAILURE and CONNECTING while gRPC retries it, and is tried
// last; but its connection may also look IDLE until a call tries it, so a
// call a replica answers UNAVAILABLE before anything else (it is gone, or
// its cache has not synced with the store yet) is made again on the next
// replica, each replica tried once. Only when every replica failed does
// the caller see UNAVAILABLE (and serve from the store).
func (p *Pool) Client() watchv1.WatchServiceClient {
	order := p.order()
	clients := make([]watchv1.WatchServiceClient, len(order))
	for i, j := range order {
		clients[i] = p.clients[j]
	}
	return failover{WatchServiceClient: clients[0], clients: clients}
}

// order returns the indexes of the replicas to try, in round-robin order
// from the next start, healthy replicas first.
func (p *Pool) order() []int {
	n := len(p.conns)
	start := int(p.next.Add(1) % uint64(n))
	out := make([]int, 0, n)
	var failing []int
	for i := range n {
		j := (start + i) % n
		switch p.conns[j].GetState() {
		case connectivity.Ready, connectivity.Idle:
			out = append(out, j)
		default:
			failing = append(failing, j)
		}
	}
	return append(out, failing...)
}

// failover makes each call on the replicas in turn until one does not
// answer UNAVAILABLE. Methods it does not define go to the first replica
// only.
type failover struct {
	watchv1.WatchServiceClient // clients[0]
	clients                    []watchv1.WatchServiceClient
}

var _ watchv1.WatchServiceClient = failover{}

// unavailable reports whether err means the replica could not take the
// call, which another replica may.
func unavailable(err error) bool { return status.Code(err) == codes.Unavailable }

// Watch opens the watch on the first replica that takes it. A replica's
// first message is received here (watchfanout sends one at once, empty,
// after it validated the request), so that a refusal arriving with it
// moves on too; the returned stream delivers it first.
func (f failover) Watch(ctx context.Context, in *watchv1.WatchRequest, opts ...grpc.CallOption) (grpc.ServerStreamingClient[watchv1.WatchResponse], error) {
	return openPrimed(f.clients, func(c watchv1.WatchServiceClient) (grpc.ServerStreamingClient[watchv1.WatchResponse], error) {
		return c.Watch(ctx, in, opts...)
	})
}

// StreamList streams a list from the first replica that takes it: its
// first message (or refusal) is received here, as Watch's is.
func (f failover) StreamList(ctx context.Context, in *watchv1.StreamListRequest, opts ...grpc.CallOption) (grpc.ServerStreamingClient[watchv1.StreamListResponse], error) {
	return openPrimed(f.clients, func(c watchv1.WatchServiceClient) (grpc.ServerStreamingClient[watchv1.StreamListResponse], error) {
		return c.StreamList(ctx, in, opts...)
	})
}

// openPrimed opens a server stream on each client in turn until one does
// not answer UNAVAILABLE, at the call or with its first message. A stream
// that comes primed already (muxed.Watch's) is returned as it is.
func openPrimed[T any](clients []watchv1.WatchServiceClient, open func(watchv1.WatchServiceClient) (grpc.ServerStreamingClient[T], error)) (grpc.ServerStreamingClient[T], error) {
	var err error
	for _, c := range clients {
		var s grpc.ServerStreamingClient[T]
		if s, err = open(c); err != nil {
			if unavailable(err) {
				continue
			}
			return nil, err
		}
		var first *T
		var ferr error
		p, ok := s.(*primed[T])
		if ok && !p.done {
			first, ferr = p.first, p.err
		} else {
			ok = false
			first, ferr = s.Recv()
		}
		if ok && (ferr == nil || !unavailable(ferr)) {
			return p, nil
		}
		if ferr != nil && unavailable(ferr) {
			err = ferr // the stream has ended
			if cs, ok := s.(closer); ok {
				cs.Close()
			}
			continue
		}
		return &primed[T]{ServerStreamingClient: s, first: first, err: ferr}, nil
	}
	return nil, err
}

// List reads a collection from the first replica that answers.
func (f failover) List(ctx context.Context, in *watchv1.ListRequest, opts ...grpc.CallOption) (*watchv1.ListResponse, error) {
	var err error
	for _, c := range f.clients {
		var resp *watchv1.ListResponse
		if resp, err = c.List(ctx, in, opts...); !unavailable(err) {
			return resp, err
		}
	}
	return nil, err
}

// Get reads an object from the first replica that answers.
func (f failover) Get(ctx context.Context, in *watchv1.GetRequest, opts ...grpc.CallOption) (*watchv1.GetResponse, error) {
	var err error
	for _, c := range f.clients {
		var resp *watchv1.GetResponse
		if resp, err = c.Get(ctx, in, opts...); !unavailable(err) {
			return resp, err
		}
	}
	return nil, err
}

// primed is a server stream whose first message (or error) was received
// already; Recv and RecvMsg deliver it first. Like any stream, it is read
// by one goroutine.
type primed[T any] struct {
	grpc.ServerStreamingClient[T]
	first *T
	err   error
	done  bool // first delivered
}

// Recv returns the first message, then the stream's.
func (p *primed[T]) Recv() (*T, error) {
	if !p.done {
		p.done = true
		first := p.first
		p.first = nil // not kept for the stream's life
		return first, p.err
	}
	return p.ServerStreamingClient.Recv()
}

// Park parks the reader on the stream once its first message was
// delivered (watchpark.Parker); false when the stream cannot park, or may have
// something now.
func (p *primed[T]) Park(wake func()) bool {
	if !p.done {
		return false
	}
	pk, ok := p.ServerStreamingClient.(watchpark.Parker)
	return ok && pk.Park(wake)
}

// Close ends the stream (closer), when the stream under it can be ended so.
func (p *primed[T]) Close() {
	if c, ok := p.ServerStreamingClient.(closer); ok {
		c.Close()
	}
}

// RecvMsg receives into m (a *T) the first message, then the stream's.
func (p *primed[T]) RecvMsg(m any) error {
	if !p.done {
		p.done = true
		if p.err != nil {
			return p.err
		}
		proto.Reset(m.(proto.Message))
		proto.Merge(m.(proto.Message), any(p.first).(proto.Message))
		p.first = nil
		return nil
	}
	return p.ServerStreamingClient.RecvMsg(m)
}
