package flowcontrolclient

import (
	"context"
	"errors"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/meridian-cp/meridian/lib/flowcontrol/decideclient"
	flowcontrolv1 "github.com/meridian-cp/meridian/proto/gen/meridian/flowcontrol/v1"
)

// errUnary says that a replica does not serve the Decide stream: the
// call is to be made unary.
var errUnary = errors.New("flowcontrol: no Decide stream")

// replica is one replica of the service with its Decide stream.
type replica struct {
	Replica
	stream replicaStream
}

// replicaStream is the Decide stream of one replica, opened on first use
// and again after it ends. Acquire and ReleaseGrants go on it; a replica
// without a connection (Replica.Conn nil), or one that answered
// UNIMPLEMENTED (an older service) or PERMISSION_DENIED (a service whose
// access policy predates Decide) to Decide, is called unary, the latter
// for batchRetry before the stream is tried again.
type replicaStream struct {
	conn grpc.ClientConnInterface
	// mu guards cur and unaryUntil; it is held while a stream opens, so
	// that the calls of a replica share one stream.
	mu         sync.Mutex
	cur        *decideclient.Client
	unaryUntil time.Time
}

// get returns the stream to call on, opening one (for as long as life
// lasts) when there is none; nil and no error when the call is to be
// unary.
func (s *replicaStream) get(life context.Context) (*decideclient.Client, error) {
	if s.conn == nil {
		return nil, nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cur != nil {
		select {
		case <-s.cur.Done():
			s.cur = nil
		default:
			return s.cur, nil
		}
	}
	if time.Now().Before(s.unaryUntil) {
		return nil, nil
	}
	dc, err := decideclient.Open(life, s.conn)
	if err != nil {
		return nil, unavailable(err)
	}
	s.cur = dc
	return dc, nil
}

// settle maps the error of a call made on dc to what the unary call
// would have returned: the call's own answer as it is; ctx's end as the
// status of a cancelled call; the stream's end as UNAVAILABLE, so that
// the call moves on to another replica, or errUnary when the replica
// does not serve Decide to this gateway.
func (s *replicaStream) settle(ctx context.Context, dc *decideclient.Client, err error) error {
	if err == nil {
		return nil
	}
	if ctxErr := ctx.Err(); ctxErr != nil && errors.Is(err, ctxErr) {
		return status.FromContextError(ctxErr).Err()
	}
	if streamErr := dc.Err(); streamErr == nil || err != streamErr {
		return err // the call's answer
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cur == dc {
		s.cur = nil
	}
	if c := status.Code(err); c == codes.Unimplemented || c == codes.PermissionDenied {
		s.unaryUntil = time.Now().Add(batchRetry)
		return errUnary
	}
	return unavailable(err)
}

// unavailable returns err as an UNAVAILABLE status, unless it is one.
func unavailable(err error) error {
	if status.Code(err) == codes.Unavailable {
		return err
	}
	return status.Errorf(codes.Unavailable, "flowcontrol: the Decide stream ended: %v", err)
}

// acquireOn makes r's Acquire call: on its Decide stream, or unary with
// outgoing's metadata.
func (c *Client) acquireOn(ctx, outgoing context.Context, r *replica, req *flowcontrolv1.AcquireRequest) (*flowcontrolv1.AcquireResponse, error) {
	dc, err := r.stream.get(c.life)
	if err != nil {
		return nil, err
	}
	if dc != nil {
		resp, err := dc.Acquire(ctx, req)
		if err = r.stream.settle(ctx, dc, err); !errors.Is(err, errUnary) {
			return resp, err
		}
	}
	return r.Client.Acquire(outgoing, req)
}

// releaseOn makes r's ReleaseGrants call: on its Decide stream, or
// unary.
func (c *Client) releaseOn(ctx context.Context, r *replica, ids []string) (*flowcontrolv1.ReleaseGrantsResponse, error) {
	dc, err := r.stream.get(c.life)
	if err != nil {
		return nil, err
	}
	if dc != nil {
		resp, err := dc.ReleaseGrants(ctx, ids)
		if err = r.stream.settle(ctx, dc, err); !errors.Is(err, errUnary) {
			return resp, err
		}
	}
	return r.Client.ReleaseGrants(ctx, &flowcontrolv1.ReleaseGrantsRequest{GrantIds: ids})
}
