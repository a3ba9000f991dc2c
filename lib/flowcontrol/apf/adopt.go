package apf

import (
	"context"
	"fmt"
	"time"
)

// maxReleasedUnknown bounds the ids of unknown grants a Controller
// remembers as released (releasedLocked); past it, more are not
// remembered.
const maxReleasedUnknown = 1 << 16

// AdoptResult counts what Adopt did with the grants it was given.
type AdoptResult struct {
	// Adopted grants are now held and charged to their levels.
	Adopted int
	// Held grants were held already (an Adopt sent twice).
	Held int
	// Released grants had been released here before they were adopted
	// (the gateway's release overtook its Adopt): nothing is charged.
	Released int
	// Unknown grants name a level this Controller does not serve, or an
	// exempt one: nothing is charged.
	Unknown int
}

// Adopt takes over grants another Controller (the previous leader)
// handed out to gatewayID and that gateway still holds: each is charged
// to its priority level (PriorityLevel, by name) with its Seats, at once
// and without queuing, even when that takes the level over its limit
// (nothing is dispatched there until enough seats are released), and is
// held for gatewayID under its ID, so that its Release, or the gateway's
// lease expiring, gives the seats back. It counts as a heartbeat of
// gatewayID.
//
// Adopt is idempotent: a grant held already is left as it is, and a
// grant released here before (Release of an id this Controller did not
// hold, remembered for a Lease) is not charged, so a release that
// overtakes the Adopt of its grant leaks nothing. It fails with
// ErrInvalid for an empty gatewayID or grant ID, before adopting
// anything, and with ErrClosed after Close.
func (c *Controller) Adopt(_ context.Context, gatewayID string, grants []Grant) (AdoptResult, error) {
	var res AdoptResult
	if gatewayID == "" {
		return res, fmt.Errorf("%w: gateway_id is required", ErrInvalid)
	}
	for _, g := range grants {
		if g.ID == "" {
			return res, fmt.Errorf("%w: a grant without id", ErrInvalid)
		}
	}
	select {
	case <-c.closed:
		return res, ErrClosed
	default:
	}
	st := c.cur.Load()
	c.mu.Lock()
	defer c.mu.Unlock()
	gw := c.gatewayLocked(gatewayID)
	for _, g := range grants {
		if _, ok := c.mu.grants[g.ID]; ok {
			res.Held++
			continue
		}
		if _, ok := c.mu.released[g.ID]; ok {
			delete(c.mu.released, g.ID)
			res.Released++
			continue
		}
		l := st.levels[g.PriorityLevel]
		if l == nil || l.cfg.Exempt {
			res.Unknown++
			continue
		}
		// Lock order: c.mu, then a level's mu, as nowhere else the other
		// way round (c.mu is never taken under a level's mu).
		r := l.adopt(g.FlowSchema, g.Seats)
		g.Seats, g.Exempt, g.PriorityLevelUID = r.width, false, l.uid
		h := &held{grant: g, gateway: gatewayID, level: l, req: r}
		c.mu.grants[g.ID] = h
		gw.grants[g.ID] = h
		res.Adopted++
	}
	return res, nil
}

// releasedLocked remembers id, a grant released here that was not held,
// until a Lease from now (the sweeper forgets it then): its Adopt may
// still be on its way. c.mu is held.
func (c *Controller) releasedLocked(id string, now time.Time) {
	if len(c.mu.released) < maxReleasedUnknown {
		c.mu.released[id] = now
	}
}

// forgetReleasedLocked forgets the released ids remembered before
// now-Lease. c.mu is held.
func (c *Controller) forgetReleasedLocked(now time.Time) {
	for id, at := range c.mu.released {
		if now.Sub(at) > c.cfg.Lease {
			delete(c.mu.released, id)
		}
	}
}

// adopt charges a request of schema that another Controller dispatched
// with width seats (at least 1) to l, as executing since now. It is in
// no queue, so its release corrects no queue's virtual time.
func (l *level) adopt(schema string, width int) *request {
	width = max(width, 1)
	l.mu.Lock()
	now := l.now()
	l.syncDemandLocked(now)
	r := &request{schema: schema, width: width, enqueued: now, dispatched: now, adopted: true, ready: make(chan struct{}), state: stateDispatched}
	close(r.ready)
	l.mu.seatsInUse += width
	l.mu.executing[r] = struct{}{}
	l.mu.Unlock()
	l.metrics.executingSeats.WithLabelValues(l.cfg.Name, schema).Add(float64(width))
	return r
}
