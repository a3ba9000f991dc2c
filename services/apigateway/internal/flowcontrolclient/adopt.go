package flowcontrolclient

import (
	"context"
	"sync"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	flowcontrolv1 "github.com/meridian-cp/meridian/proto/gen/meridian/flowcontrol/v1"
)

// adoptRetry is how long the client waits before it tries again to
// re-register its grants while no replica leads.
const adoptRetry = 500 * time.Millisecond

// heldGrants are the grants this gateway holds from the service, each
// with the term of the leader that holds it, so that when another term
// answers (a new leader, or a restarted single replica, which start with
// no grant) the client re-registers them there (AdoptGrants) and the
// requests running across the change stay counted.
//
// A grant leaves the set when its request ends, before its release is
// queued: a re-registration taken after that does not carry it, and one
// taken before it may reach the leader after the release, which the
// service then remembers and does not charge.
type heldGrants struct {
	mu sync.Mutex
	// term is the latest term an answer named; "" while none did (a
	// service older than terms: nothing is re-registered).
	term   string
	grants map[string]*heldGrant
	// resync wakes adoptLoop when term changes.
	resync chan struct{}
	// synced is closed while no grant of another term than term is
	// held (all re-registered, or given up on); a new term opens a new
	// one, unless the one open is still waited on.
	synced chan struct{}
}

type heldGrant struct {
	grant *flowcontrolv1.HeldGrant
	term  string
}

func newHeldGrants() heldGrants {
	synced := make(chan struct{})
	close(synced)
	return heldGrants{grants: map[string]*heldGrant{}, resync: make(chan struct{}, 1), synced: synced}
}

// add records a grant of term.
func (h *heldGrants) add(g *flowcontrolv1.HeldGrant, term string) {
	h.mu.Lock()
	h.grants[g.GetId()] = &heldGrant{grant: g, term: term}
	h.observeLocked(term)
	h.mu.Unlock()
}

// remove forgets a grant whose request has ended.
func (h *heldGrants) remove(id string) {
	h.mu.Lock()
	delete(h.grants, id)
	h.mu.Unlock()
}

// observe notes the term of an answer.
func (h *heldGrants) observe(term string) {
	h.mu.Lock()
	h.observeLocked(term)
	h.mu.Unlock()
}

func (h *heldGrants) observeLocked(term string) {
	if term == "" || term == h.term {
		return
	}
	h.term = term
	select {
	case <-h.synced:
		h.synced = make(chan struct{})
	default:
	}
	select {
	case h.resync <- struct{}{}:
	default:
	}
}

// latest returns the latest term an answer named, and a channel closed
// once the grants held of other terms have been re-registered with it.
func (h *heldGrants) latest() (string, <-chan struct{}) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.term, h.synced
}

// stale returns the grants held of another term than the latest; when
// there are none, the grants are synced with it (latest's channel
// closes).
func (h *heldGrants) stale() (string, []*flowcontrolv1.HeldGrant) {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []*flowcontrolv1.HeldGrant
	for _, g := range h.grants {
		if g.term != h.term {
			out = append(out, g.grant)
		}
	}
	if len(out) == 0 {
		select {
		case <-h.synced:
		default:
			close(h.synced)
		}
	}
	return h.term, out
}

// moved records that grants are held by term now (those still held).
func (h *heldGrants) moved(grants []*flowcontrolv1.HeldGrant, term string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, g := range grants {
		if hg := h.grants[g.GetId()]; hg != nil {
			hg.term = term
		}
	}
	h.observeLocked(term)
}

// adoptLoop re-registers the grants of other terms with the leader each
// time an answer names a new term, until ctx ends, at most maxBatch per
// call. While no replica answers it tries again every adoptRetry; on any
// other error (a service that does not know AdoptGrants, a refusal) those
// grants are left as they are, uncounted by the leader until they end.
func (c *Client) adoptLoop(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-c.grants.resync:
		}
		for ctx.Err() == nil {
			term, grants := c.grants.stale()
			if len(grants) == 0 {
				break
			}
			grants = grants[:min(len(grants), maxBatch)]
			resp, err := c.adopt(ctx, grants)
			switch status.Code(err) {
			case codes.OK:
				c.log.Info("flow control: re-registered this gateway's grants with a new leader",
					"adopted", resp.GetAdopted(), "held", resp.GetHeld(), "released", resp.GetReleased(), "unknown", resp.GetUnknown())
				held := resp.GetTerm()
				if held == "" {
					held = term // a reply naming no term: taken as the one asked
				}
				c.grants.moved(grants, held)
			case codes.Unavailable, codes.DeadlineExceeded, codes.ResourceExhausted:
				c.log.Warn("flow control: re-registering this gateway's grants with the leader failed; retrying", "grants", len(grants), "error", err)
				select {
				case <-ctx.Done():
				case <-time.After(adoptRetry):
				}
			default:
				c.log.Warn("flow control: the leader did not take this gateway's grants; they run uncounted until they end", "grants", len(grants), "error", err)
				c.grants.moved(grants, term)
			}
		}
	}
}

// newTermReason is the ErrorInfo reason of the answer to an Acquire that
// named another term than the leader's
// (services/flowcontrol/internal/server.NewTermReason).
const newTermReason = "NEW_TERM"

// newTermNamed returns the term a NEW_TERM answer names; "" when err is
// no such answer.
func newTermNamed(err error) string {
	if status.Code(err) != codes.Aborted {
		return ""
	}
	for _, d := range status.Convert(err).Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok && info.GetReason() == newTermReason {
			return info.GetMetadata()["term"]
		}
	}
	return ""
}

// adopt sends one AdoptGrants call.
func (c *Client) adopt(ctx context.Context, grants []*flowcontrolv1.HeldGrant) (*flowcontrolv1.AdoptGrantsResponse, error) {
	ctx, cancel := context.WithTimeout(ctx, releaseTimeout)
	defer cancel()
	var resp *flowcontrolv1.AdoptGrantsResponse
	err := c.call(ctx, func(r *replica) (err error) {
		resp, err = r.Client.AdoptGrants(ctx, &flowcontrolv1.AdoptGrantsRequest{GatewayId: c.gatewayID, Grants: grants})
		return err
	})
	return resp, err
}
