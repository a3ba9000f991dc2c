// Package flowcontrolclient takes seats from the flow-control service for one
// request and gives them back, for both of the gateway's front doors (REST
// and gRPC).
//
// Seats go back off the request's path: Release queues the grant, and the
// client's sender (Run) returns everything queued in one ReleaseGrants
// call, so a response never waits for a flow-control round trip and a busy
// gateway sends one release call per batch rather than one per request.
//
// Requests of exempt callers (system:masters in the mandatory
// configuration) make no round trip at all: Run follows the service's
// exemptions (WatchExemptions), and Acquire answers for a caller they list
// what the service would have, an exempt grant holding nothing. While the
// client holds no list (stream not yet open, broken, or a service older
// than WatchExemptions) every request asks the service; a change of the
// service's configuration applies here once the new list has arrived.
// Non-resource requests that the local limiter's configuration (the
// stored objects, SetFallback) classifies into an exempt level make none
// either (exemptLocally): health probes never wait for the service.
//
// Acquire and the releases go on one DecisionService.Decide stream per
// replica (stream.go), many calls in flight at once, rather than one
// unary call each: a decision then costs the service about half the CPU.
// A replica given no connection (Replica.Conn), or one that does not
// serve Decide, gets unary calls; every other call (Heartbeat,
// AdoptGrants, Dump, WatchExemptions) is unary. A call's answer on the
// stream is the unary call's, and a stream that ends counts as the
// replica being UNAVAILABLE.
//
// The service may run as several replicas, of which the elected leader
// holds the seats and the others answer UNAVAILABLE with a NOT_LEADER
// ErrorInfo naming it. The client is given every replica (NewReplicas):
// each call goes to the replica that answered last, and on UNAVAILABLE
// moves on, to the leader a follower named when it is one of the
// replicas, else to the next, each replica tried once per call. A
// redirect rather than a follower forwarding the call keeps one hop per
// decision (the leader's CPU per decision is the service's limit), and
// keeps a follower from holding calls for a leader it cannot reach.
//
// A new leader (or a restarted replica) starts with no grant. Every
// answer names the leader's term; the client keeps the grants it holds
// with their term and re-registers those of another term with the
// leader that answers (AdoptGrants, adopt.go), so requests running
// across a leader change stay counted and are released once.
package flowcontrolclient

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/meridian-cp/meridian/lib/flowcontrol/apf"
	"github.com/meridian-cp/meridian/lib/identity"
	flowcontrolv1 "github.com/meridian-cp/meridian/proto/gen/meridian/flowcontrol/v1"
	"github.com/meridian-cp/meridian/services/apigateway/internal/follow"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

const (
	// releaseTimeout bounds one attempt to release a batch.
	releaseTimeout = 5 * time.Second
	// releaseAttempts is how often a batch is sent while the service is
	// unreachable; after that its grants are left to expire with this
	// gateway's lease if the service lost them, or stay held.
	releaseAttempts = 3
	// queueSize bounds the grants waiting for the sender. A full queue
	// means the sender is behind: Release then sends the grant itself.
	queueSize = 4096
	// maxBatch bounds the grants of one ReleaseGrants call.
	maxBatch = 512
	// batchRetry is how long a service that answered UNIMPLEMENTED to
	// ReleaseGrants (an older version) gets one Release per grant before
	// ReleaseGrants is tried again.
	batchRetry = time.Minute
	// heartbeatRetry is how soon a heartbeat that found no replica
	// answering is sent again.
	heartbeatRetry = time.Second
	// newTermAttempts bounds how often an Acquire answered NEW_TERM is
	// asked again (the term may change again meanwhile); then it is
	// decided as while the service does not answer.
	newTermAttempts = 3
)

// Client acquires seats. A nil *Client serves every request at once. Run
// must run for as long as the Client is used: it sends the releases and
// the heartbeats.
type Client struct {
	// replicas are the service's replicas; leader is the index of the one
	// that answered last, where calls go first; streamFrom rotates the
	// exemptions stream over the replicas (every one serves it).
	replicas   []*replica
	leader     atomic.Int32
	streamFrom atomic.Uint32
	gatewayID  string
	log        *slog.Logger

	// queue holds the ids of grants whose requests have finished, for Run
	// to release.
	queue chan string
	// noBatchUntil is the time (unix nanoseconds) until which releases are
	// sent one by one, after the service answered UNIMPLEMENTED to
	// ReleaseGrants.
	noBatchUntil atomic.Int64
	// exemptions is the service's latest list; nil while not synced.
	exemptions atomic.Pointer[[]exemption]
	// fallback limits requests while the service does not answer; nil
	// serves them without seats.
	fallback *apf.Controller
	// grants are the grants held from the service, with their terms.
	grants heldGrants
	// life is the context of the Decide streams; stopStreams, called
	// when Run returns, ends it.
	life        context.Context
	stopStreams context.CancelFunc
}

// exemption is a WatchExemptions entry: callers whose every request gets an
// exempt grant of this flow schema.
type exemption struct {
	flowSchemaUID, priorityLevelUID string
	users, groups                   []string
}

// Replica is one replica of the flow-control service.
type Replica struct {
	// Address is what the replica's --advertise-address says (the
	// holderIdentity of its Lease), so that a follower's NOT_LEADER
	// answer can name it; "" for a single replica.
	Address string
	Client  flowcontrolv1.FlowControlServiceClient
	// Conn, when set, is the connection of Client, on which Acquire and
	// ReleaseGrants go as a Decide stream; nil makes them unary.
	Conn grpc.ClientConnInterface
}

// New returns a Client of a single replica making unary calls; fc nil
// returns nil (no flow control).
func New(fc flowcontrolv1.FlowControlServiceClient, gatewayID string, log *slog.Logger) *Client {
	if fc == nil {
		return nil
	}
	return NewReplicas([]Replica{{Client: fc}}, gatewayID, log)
}

// NewReplicas returns a Client of the service's replicas; none returns nil
// (no flow control).
func NewReplicas(replicas []Replica, gatewayID string, log *slog.Logger) *Client {
	if len(replicas) == 0 {
		return nil
	}
	if log == nil {
		log = slog.Default()
	}
	rs := make([]*replica, len(replicas))
	for i, r := range replicas {
		rs[i] = &replica{Replica: r, stream: replicaStream{conn: r.Conn}}
	}
	life, stop := context.WithCancel(context.Background())
	return &Client{
		replicas: rs, gatewayID: gatewayID, log: log, queue: make(chan string, queueSize), grants: newHeldGrants(),
		life: life, stopStreams: stop,
	}
}

// call runs fn on the replica that answered last and, while the answer is
// UNAVAILABLE (a follower, a replica shutting down or unreachable), on
// the others: first the leader a follower named, else the next in order,
// each at most once. The replica that gives any other answer is where
// the next call goes first.
func (c *Client) call(ctx context.Context, fn func(*replica) error) error {
	n := len(c.replicas)
	i := int(c.leader.Load())
	tried := make([]bool, n)
	var err error
	for range n {
		tried[i] = true
		err = fn(c.replicas[i])
		if status.Code(err) != codes.Unavailable {
			c.leader.Store(int32(i))
			return err
		}
		if ctx.Err() != nil {
			return err
		}
		next := -1
		if named := leaderNamed(err); named != "" {
			next = slices.IndexFunc(c.replicas, func(r *replica) bool { return r.Address == named })
		}
		if next < 0 || tried[next] {
			next = -1
			for k := 1; k < n; k++ {
				if j := (i + k) % n; !tried[j] {
					next = j
					break
				}
			}
		}
		if next < 0 {
			break
		}
		i = next
	}
	return err
}

// notLeaderReason is the ErrorInfo reason of a follower's answer
// (services/flowcontrol/internal/server.NotLeaderReason).
const notLeaderReason = "NOT_LEADER"

// leaderNamed returns the leader a follower's answer names; "" when err
// is no such answer or names none.
func leaderNamed(err error) string {
	for _, d := range status.Convert(err).Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok && info.GetReason() == notLeaderReason {
			return info.GetMetadata()["leader"]
		}
	}
	return ""
}

// Grant is what Acquire hands out.
type Grant struct {
	// FlowSchemaUID and PriorityLevelUID are sent to REST clients as
	// X-Kubernetes-PF-FlowSchema-UID and X-Kubernetes-PF-PriorityLevel-UID.
	FlowSchemaUID, PriorityLevelUID string
	// Release returns the seats. It does not wait for the flow-control
	// service (unless the release queue is full): call it once the
	// request's work is done, on every path. It is safe to call more than
	// once and from several goroutines; only the first call counts.
	Release func()
}

// ErrNoFlowControl is Dump's error on a gateway without flow control.
var ErrNoFlowControl = errors.New("flow control is not configured")

// Dump asks the service for the state of its priority levels, queues and
// requests.
func (c *Client) Dump(ctx context.Context) (*flowcontrolv1.DumpResponse, error) {
	if c == nil {
		return nil, ErrNoFlowControl
	}
	var resp *flowcontrolv1.DumpResponse
	err := c.call(ctx, func(r *replica) (err error) {
		resp, err = r.Client.Dump(ctx, &flowcontrolv1.DumpRequest{})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("flow control: %w", err)
	}
	return resp, nil
}

// Acquire waits for seats for a request described by digest. A rejection is
// a 429 TooManyRequests with Retry-After, returned with a Grant that names
// the flow schema and priority level that rejected it (and holds nothing).
// When the flow-control service cannot be reached the request takes seats
// from the fallback limiter (SetFallback), or without one is served anyway
// (and logged): losing the flow-control service must not take the API
// down. A non-resource request that the local limiter classifies into an
// exempt level is granted without asking the service (exemptLocally).
func (c *Client) Acquire(ctx context.Context, digest *flowcontrolv1.RequestDigest) (Grant, error) {
	nop := Grant{Release: func() {}}
	if c == nil {
		return nop, nil
	}
	u, _ := identity.UserFrom(ctx)
	if digest.User == "" {
		digest.User, digest.Groups = u.Name, u.Groups
	}
	if e := c.exemptionOf(digest.User, digest.Groups); e != nil {
		return Grant{FlowSchemaUID: e.flowSchemaUID, PriorityLevelUID: e.priorityLevelUID, Release: nop.Release}, nil
	}
	if g, ok := c.exemptLocally(digest); ok {
		return g, nil
	}
	if digest.EstimatedWidth == 0 {
		digest.EstimatedWidth = 1
	}
	var resp *flowcontrolv1.AcquireResponse
	term, _ := c.grants.latest()
	req := &flowcontrolv1.AcquireRequest{GatewayId: c.gatewayID, Digest: digest, Term: term}
	outgoing := identity.AppendToOutgoing(ctx, u)
	var err error
	for attempt := 0; ; attempt++ {
		err = c.call(ctx, func(r *replica) (err error) {
			resp, err = c.acquireOn(ctx, outgoing, r, req)
			return err
		})
		// A leader of a new term: once this gateway's grants are
		// re-registered there (adoptLoop), ask again with its term.
		named := newTermNamed(err)
		if named == "" || attempt == newTermAttempts {
			break
		}
		c.grants.observe(named)
		term, synced := c.grants.latest()
		select {
		case <-synced:
		case <-ctx.Done():
			return nop, apierrors.NewTimeoutError("the request was cancelled while waiting for a seat", 0)
		case <-time.After(releaseTimeout):
		}
		req.Term = term
	}
	if err != nil {
		st := status.Convert(err)
		switch st.Code() {
		case codes.ResourceExhausted:
			retry, rejected := 1, nop
			for _, d := range st.Details() {
				switch d := d.(type) {
				case *errdetails.RetryInfo:
					if s := int(d.GetRetryDelay().AsDuration().Round(time.Second) / time.Second); s > retry {
						retry = s
					}
				case *errdetails.ErrorInfo:
					// Who classified it, for the X-Kubernetes-PF-* headers.
					rejected.FlowSchemaUID, rejected.PriorityLevelUID = d.GetMetadata()["flow_schema_uid"], d.GetMetadata()["priority_level_uid"]
				}
			}
			return rejected, apierrors.NewTooManyRequests("too many requests, please try again later", retry)
		case codes.Canceled, codes.DeadlineExceeded:
			if ctx.Err() != nil {
				return nop, apierrors.NewTimeoutError("the request was cancelled while waiting for a seat", 0)
			}
		}
		if g, ok, lerr := c.acquireLocally(ctx, digest); ok {
			c.log.Warn("flow control unavailable; limited by this gateway's fallback", "error", err)
			return g, lerr
		}
		c.log.Warn("flow control unavailable; serving without it", "error", err)
		return nop, nil
	}
	g := resp.GetGrant()
	if g.GetId() == "" {
		c.grants.observe(resp.GetTerm())
	}
	out := Grant{FlowSchemaUID: g.GetFlowSchemaUid(), PriorityLevelUID: g.GetPriorityLevelUid(), Release: nop.Release}
	if g.GetExempt() || g.GetId() == "" {
		return out, nil
	}
	id := g.GetId()
	c.grants.add(&flowcontrolv1.HeldGrant{Id: id, FlowSchema: g.GetFlowSchema(), PriorityLevel: g.GetPriorityLevel(), Seats: g.GetSeats()}, resp.GetTerm())
	var released atomic.Bool
	out.Release = func() {
		if released.CompareAndSwap(false, true) {
			c.grants.remove(id)
			c.release(id)
		}
	}
	return out, nil
}

// exemptionOf returns the exemption that classifies every request of the
// caller, the first in the service's order; nil when there is none or the
// client holds no list.
func (c *Client) exemptionOf(user string, groups []string) *exemption {
	list := c.exemptions.Load()
	if list == nil {
		return nil
	}
	for i := range *list {
		e := &(*list)[i]
		if (user != "" && slices.Contains(e.users, user)) || slices.ContainsFunc(groups, func(g string) bool { return slices.Contains(e.groups, g) }) {
			return e
		}
	}
	return nil
}

// ExemptionsSynced reports whether the client holds the service's
// exemptions.
func (c *Client) ExemptionsSynced() bool { return c != nil && c.exemptions.Load() != nil }

// followExemptions opens one exemptions stream and applies every list it
// receives until it ends.
func (c *Client) followExemptions(ctx context.Context) (established bool, err error) {
	open := func(ctx context.Context) (grpc.ServerStreamingClient[flowcontrolv1.WatchExemptionsResponse], error) {
		// Every replica serves the exemptions; each attempt asks the
		// next one, so that one that is down is not asked again and again.
		r := c.replicas[int(c.streamFrom.Add(1)-1)%len(c.replicas)]
		return r.Client.WatchExemptions(ctx, &flowcontrolv1.WatchExemptionsRequest{})
	}
	return follow.Receive(ctx, open, func(resp *flowcontrolv1.WatchExemptionsResponse, first bool) {
		list := make([]exemption, 0, len(resp.GetExemptions()))
		for _, e := range resp.GetExemptions() {
			list = append(list, exemption{
				flowSchemaUID: e.GetFlowSchemaUid(), priorityLevelUID: e.GetPriorityLevelUid(),
				users: e.GetUsers(), groups: e.GetGroups(),
			})
		}
		c.exemptions.Store(&list)
		if first {
			c.log.Info("flow-control exemptions synced", "exemptions", len(list))
		}
	})
}

// release queues a grant for the sender, or, when the queue is full,
// releases it on the caller's goroutine: the caller then waits, as a
// back-pressure on a gateway that finishes requests faster than flow
// control takes their seats back, and no grant is ever dropped.
func (c *Client) release(id string) {
	select {
	case c.queue <- id:
	default:
		c.send(context.Background(), []string{id}, releaseAttempts)
	}
}

// Run sends the queued releases and the heartbeats that keep this
// gateway's grants alive, re-registers its grants with a new leader, and
// follows the service's exemptions, until ctx ends; then it sends what
// is still queued (each attempt bounded by releaseTimeout) and returns.
func (c *Client) Run(ctx context.Context) {
	if c == nil {
		return
	}
	var wg sync.WaitGroup
	wg.Add(3)
	go func() {
		defer wg.Done()
		c.heartbeat(ctx)
	}()
	go func() {
		defer wg.Done()
		c.adoptLoop(ctx)
	}()
	go func() {
		defer wg.Done()
		follow.Run(ctx, follow.Config{
			What: "flow-control exemptions", Open: c.followExemptions, Logger: c.log,
			Lost: func() { c.exemptions.Store(nil) },
		})
	}()
	c.sendReleases(ctx)
	wg.Wait()
	// The releases are sent: the streams end, and with them any call
	// still waiting on one (the service takes it out of its queue).
	c.stopStreams()
}

// sendReleases takes the queued grants in batches, as many as are queued
// when the previous call returns, and releases them.
func (c *Client) sendReleases(ctx context.Context) {
	batch := make([]string, 0, maxBatch)
	for {
		select {
		case id := <-c.queue:
			batch = append(batch[:0], id)
		case <-ctx.Done():
			c.drain()
			return
		}
		c.send(context.WithoutCancel(ctx), c.fill(batch), releaseAttempts)
	}
}

// fill appends to batch the grants queued now, without waiting, until it
// holds maxBatch.
func (c *Client) fill(batch []string) []string {
	for len(batch) < maxBatch {
		select {
		case id := <-c.queue:
			batch = append(batch, id)
		default:
			return batch
		}
	}
	return batch
}

// drain releases what is queued, at shutdown, with one attempt per batch:
// a gateway that stops sends no more heartbeats, so what it fails to
// release expires with its lease.
func (c *Client) drain() {
	for {
		batch := c.fill(make([]string, 0, maxBatch))
		if len(batch) == 0 {
			return
		}
		c.send(context.Background(), batch, 1)
	}
}

// send releases ids in up to attempts attempts, retrying while the service
// is unreachable: a release is idempotent (a grant no longer held is
// reported, not an error), so a retry after a lost answer releases nothing
// twice.
func (c *Client) send(ctx context.Context, ids []string, attempts int) {
	var err error
	for attempt := range attempts {
		if attempt > 0 {
			time.Sleep(time.Duration(attempt) * 100 * time.Millisecond)
		}
		if err = c.sendOnce(ctx, ids); err == nil {
			return
		}
		switch status.Code(err) {
		case codes.Unavailable, codes.DeadlineExceeded, codes.ResourceExhausted:
			continue
		}
		break
	}
	c.log.Warn("flow control release failed; the seats stay held until flow control forgets this gateway's grants",
		"grants", len(ids), "error", err)
}

// sendOnce makes one attempt: a ReleaseGrants call, or one Release per
// grant for a service that does not know ReleaseGrants.
func (c *Client) sendOnce(ctx context.Context, ids []string) error {
	ctx, cancel := context.WithTimeout(ctx, releaseTimeout)
	defer cancel()
	if time.Now().UnixNano() >= c.noBatchUntil.Load() {
		err := c.call(ctx, func(r *replica) error {
			resp, err := c.releaseOn(ctx, r, ids)
			c.grants.observe(resp.GetTerm())
			return err
		})
		if status.Code(err) != codes.Unimplemented {
			return err
		}
		c.noBatchUntil.Store(time.Now().Add(batchRetry).UnixNano())
	}
	for _, id := range ids {
		// On an error the whole batch is sent again: those already
		// released are then NotFound, which is no error.
		err := c.call(ctx, func(r *replica) error {
			_, err := r.Client.Release(ctx, &flowcontrolv1.ReleaseRequest{GrantId: id})
			return err
		})
		if err != nil && status.Code(err) != codes.NotFound {
			return err
		}
	}
	return nil
}

// heartbeat keeps this gateway's grants alive until ctx ends. While no
// replica answers it tries every heartbeatRetry (at most the interval),
// so that a new leader learns of this gateway, and the gateway of the
// new term, soon after a change.
func (c *Client) heartbeat(ctx context.Context) {
	interval := 5 * time.Second
	for {
		var resp *flowcontrolv1.HeartbeatResponse
		err := c.call(ctx, func(r *replica) (err error) {
			resp, err = r.Client.Heartbeat(ctx, &flowcontrolv1.HeartbeatRequest{GatewayId: c.gatewayID})
			return err
		})
		next := interval
		if err == nil {
			if d := resp.GetInterval().AsDuration(); d > 0 {
				interval, next = d, d
			}
			c.grants.observe(resp.GetTerm())
		} else {
			next = min(interval, heartbeatRetry)
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(next):
		}
	}
}
