package flowcontrolclient

import (
	"context"
	"sync"
	"testing"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	flowcontrolv1 "github.com/meridian-cp/meridian/proto/gen/meridian/flowcontrol/v1"
)

// replicaStub answers Acquire as a leader (grants) or as a follower
// (UNAVAILABLE, NOT_LEADER naming leader), and counts the calls.
type replicaStub struct {
	flowcontrolv1.FlowControlServiceClient
	mu       sync.Mutex
	leads    bool
	leader   string
	acquires int
}

func (r *replicaStub) Acquire(context.Context, *flowcontrolv1.AcquireRequest, ...grpc.CallOption) (*flowcontrolv1.AcquireResponse, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.acquires++
	if r.leads {
		return &flowcontrolv1.AcquireResponse{Grant: &flowcontrolv1.Grant{Exempt: true, FlowSchemaUid: "fs"}}, nil
	}
	st, err := status.New(codes.Unavailable, "not the leader").WithDetails(&errdetails.ErrorInfo{
		Reason: notLeaderReason, Metadata: map[string]string{"leader": r.leader},
	})
	if err != nil {
		panic(err)
	}
	return nil, st.Err()
}

func (r *replicaStub) set(leads bool, leader string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.leads, r.leader = leads, leader
}

func (r *replicaStub) calls() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := r.acquires
	r.acquires = 0
	return n
}

// TestCallsFollowTheLeader: a call that reaches a follower moves to the
// leader it names, skipping the others, and the next call goes to that
// leader first; when the leader changes the calls follow; while no
// replica leads, each replica is asked once and the request is served
// anyway (no fallback set), never looping.
func TestCallsFollowTheLeader(t *testing.T) {
	a, b, c := &replicaStub{}, &replicaStub{}, &replicaStub{}
	a.set(false, "c:7003")
	b.set(false, "c:7003")
	c.set(true, "")
	cl := NewReplicas([]Replica{{Address: "a:7003", Client: a}, {Address: "b:7003", Client: b}, {Address: "c:7003", Client: c}}, "gw", nil)
	acquire := func() {
		t.Helper()
		g, err := cl.Acquire(t.Context(), &flowcontrolv1.RequestDigest{User: "alice"})
		if err != nil {
			t.Fatal(err)
		}
		g.Release()
	}
	counts := func() [3]int { return [3]int{a.calls(), b.calls(), c.calls()} }

	acquire()
	if got := counts(); got != [3]int{1, 0, 1} {
		t.Fatalf("first call asked %v, want a then the leader it named, c", got)
	}
	acquire()
	if got := counts(); got != [3]int{0, 0, 1} {
		t.Fatalf("second call asked %v, want the leader only", got)
	}

	// b takes over; c, now a follower, names it.
	c.set(false, "b:7003")
	a.set(false, "b:7003")
	b.set(true, "")
	acquire()
	if got := counts(); got != [3]int{0, 1, 1} {
		t.Fatalf("after the change: asked %v, want c then b", got)
	}

	// No leader: every replica once.
	for _, r := range []*replicaStub{a, b, c} {
		r.set(false, "")
	}
	acquire()
	if got := counts(); got != [3]int{1, 1, 1} {
		t.Fatalf("without a leader: asked %v, want each replica once", got)
	}
}

// streaming returns how many replicas have a Decide stream open.
func (c *Client) streaming() int {
	n := 0
	for _, r := range c.replicas {
		r.stream.mu.Lock()
		if r.stream.cur != nil {
			n++
		}
		r.stream.mu.Unlock()
	}
	return n
}
