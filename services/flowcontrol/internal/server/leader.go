package server

import (
	"context"
	"crypto/rand"
	"sync"
	"sync/atomic"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Leadership says whether this replica holds the fleet's seats now. Of
// several replicas only the elected leader does; the others answer
// UNAVAILABLE with a NotLeaderReason ErrorInfo naming the leader, and the
// gateways go there.
type Leadership interface {
	// Term returns a context that ends when this replica's term as
	// leader ends, or nil when it does not lead, with the leader's
	// identity (its address; "" while none is known).
	Term() (term context.Context, leader string)
}

// NotLeaderReason is the ErrorInfo reason of a follower's answer; its
// metadata "leader" is the leader's address ("" while none is known).
const NotLeaderReason = "NOT_LEADER"

// NewTermReason is the ErrorInfo reason of the answer to an Acquire of
// a gateway that last heard another term; its metadata "term" is the
// leader's term.
const NewTermReason = "NEW_TERM"

// newTerm is the answer to an Acquire of a gateway that last heard
// another term than id.
func newTerm(id string) error {
	st := status.New(codes.Aborted, "a new flow-control term: re-register the grants held (AdoptGrants), then ask again")
	if ds, err := st.WithDetails(&errdetails.ErrorInfo{
		Reason: NewTermReason, Domain: RejectedDomain, Metadata: map[string]string{"term": id},
	}); err == nil {
		st = ds
	}
	return st.Err()
}

// notLeader is a follower's answer.
func notLeader(leader string) error {
	st := status.New(codes.Unavailable, "this flow-control replica is not the leader")
	if ds, err := st.WithDetails(&errdetails.ErrorInfo{
		Reason: NotLeaderReason, Domain: RejectedDomain, Metadata: map[string]string{"leader": leader},
	}); err == nil {
		st = ds
	}
	return st.Err()
}

// term returns the current term's context, or the follower's error.
func (s *Server) term() (context.Context, error) {
	if s.leadership == nil {
		return context.Background(), nil
	}
	term, leader := s.leadership.Term()
	if term == nil || term.Err() != nil {
		return nil, notLeader(leader)
	}
	return term, nil
}

// terms names the terms a Server leads, for the term fields of its
// answers: a gateway holding grants of another term than the one that
// answers re-registers them (AdoptGrants). The grants of a term are
// released when it ends (apf.Controller.Forget), so a term's id must
// never be reused: each is random.
type terms struct {
	cur atomic.Pointer[namedTerm] // read without mu on every answer
	mu  sync.Mutex                // serializes naming a new term
}

// namedTerm is a term and its id.
type namedTerm struct {
	ctx context.Context
	id  string
}

// idOf returns the id of term, a new one when term is not the term named
// last.
func (t *terms) idOf(term context.Context) string {
	if n := t.cur.Load(); n != nil && n.ctx == term {
		return n.id
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if n := t.cur.Load(); n != nil && n.ctx == term {
		return n.id
	}
	n := &namedTerm{ctx: term, id: rand.Text()}
	t.cur.Store(n)
	return n.id
}
